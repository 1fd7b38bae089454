"""Version strings: ordering them and matching them, in one place.

Torch and OS versions are compared as versions, never as strings
("2.10.0" > "2.9.1"), everywhere: the engine records `version_key` with each
run, the store orders by it (SQL sees zero-padded text, so no function needs
registering), and the query layer matches user-given prefixes with `matches`.
"""
import re

from packaging.version import InvalidVersion, Version

# Pre-releases sort before the release they lead to: dev < a < b < rc < final < post.
_PRE_RANK = {"a": "1", "b": "2", "rc": "3"}


def _parse(version):
    """packaging's Version of `version`, or of its leading numbers ("14.4 (23E214)")."""
    text = (version or "").strip()
    try:
        return Version(text)
    except InvalidVersion:
        match = re.match(r"\d+(\.\d+)*", text)
        return Version(match.group(0)) if match else None


def version_key(version):
    """A string that sorts like the version (PEP 440, by packaging):
    "2.10.0" > "2.9.1" > "2.9.1.dev20250101", "2.1.0.post1" > "2.1.0".

    "2.5.1+cu121" -> "0002.0005.0001.9"; the local part (+cpu, +git…) is ignored.
    Zero-padded text, so SQLite (and Datasette) order versions without any
    registered function; the keys runs recorded before stay valid. A .devN of a
    pre- or post-release sorts with it (torch publishes none). None for anything
    that is not a version.
    """
    parsed = _parse(version)
    if parsed is None:
        return None
    release = (list(parsed.release) + [0, 0])[:3]
    key = ".".join(f"{x:04d}" for x in release) + "."
    if parsed.pre:
        key += _PRE_RANK[parsed.pre[0]] + f"{parsed.pre[1]:010d}"
    elif parsed.dev is not None and parsed.post is None:
        key += "0" + f"{parsed.dev:010d}"   # nightlies: .dev20250101
    else:
        key += "9"
    if parsed.post is not None:
        key += f"p{parsed.post:010d}"
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
