"""Version strings: ordering them and matching them, in one place.

Torch and OS versions are compared as versions, never as strings
("2.10.0" > "2.9.1"), everywhere: the engine records `version_key` with each
run, the store orders by it (SQL sees zero-padded text, so no function needs
registering), and the query layer matches user-given prefixes with `matches`.
"""
import re

_VERSION = re.compile(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:\.?(a|b|rc|dev)(\d*))?")
# Pre-releases sort before the release they lead to: dev < a < b < rc < final.
_PRE_RANK = {"dev": "0", "a": "1", "b": "2", "rc": "3", None: "9"}


def version_key(version):
    """A string that sorts like the version: "2.10.0" > "2.9.1" > "2.9.1.dev20250101".

    "2.5.1+cu121" -> "0002.0005.0001.9"; the local part (+cpu, +git…) is ignored.
    Zero-padded text, so SQLite (and Datasette) order versions without any
    registered function. None for anything that is not a version.
    """
    match = _VERSION.match((version or "").strip())
    if not match:
        return None
    major, minor, patch, pre, pre_n = match.groups()
    key = ".".join(f"{int(x or 0):04d}" for x in (major, minor, patch))
    key += "." + _PRE_RANK[pre]
    if pre:
        key += f"{int(pre_n or 0):010d}"   # nightlies: .dev20250101
    return key


def sort_key(version):
    """For sorted(): versions in version order, anything else first."""
    return version_key(version) or ""


def major_version(version):
    match = re.match(r"\d+", version or "")
    return match.group(0) if match else None


def public(version):
    """The version without its local part: "2.13.0+cpu" -> "2.13.0"."""
    return (version or "").split("+", 1)[0]


def matches(version, prefix):
    """Whether `version` is what a user means by `prefix`: '2.5.1+cpu' matches
    '2.5', '2.5.1' and '2.5.1+cpu', not '2.50'. An empty prefix matches anything."""
    if not prefix:
        return True
    version = version or ""
    return (version == prefix or public(version) == prefix
            or public(version).startswith(prefix + "."))


def same_release(known, version):
    """The version among `known` that stands for `version`, or None: the same
    string first, else the same public version ("2.13.0+cpu" finds "2.13.0")."""
    if version in known:
        return version
    return next((v for v in known if public(v) == public(version)), None)
