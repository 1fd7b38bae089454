"""Whether an op of our OpInfo list exists at all in another torch release.

The OpInfo list is the installed torch's; a wheel of another version may
predate some of its ops (`hash_tensor` is not in torch 2.8). Such an op is
declared absent only when the release's own files say so, statically and
conservatively:

- an op named after a Python module's function (nn.functional.X, linalg.X,
  fft.X, special.X, sparse.X) is judged by that module alone, when the
  release has it: absent when the word `X` appears nowhere in it, present
  otherwise (defined in Python there, whatever aten function it calls);
- any other op whose aten function we can name (the OpInfo's aten_name, or
  the `N` of `torch.ops.aten.N…` / `torch.N`) and which the installed
  torch's native_functions.yaml has: absent when no overload of `N` is in
  the release's yaml and torch/functional.py (Python-level torch functions)
  does not mention `N` either.

Anything else (an op we cannot map to a file, a module missing from the
wheel) is given no verdict here: it keeps whatever the other declarations say.
What an op decomposes into is not followed: a decomposition can differ between
releases, so it cannot prove an op absent.
"""
import re

# The Python modules that define ops, by the OpInfo name prefix that reaches them.
MODULE_OF_PREFIX = {
    "nn.functional.": "torch/nn/functional.py",
    "linalg.": "torch/linalg/__init__.py",
    "fft.": "torch/fft/__init__.py",
    "special.": "torch/special/__init__.py",
    "sparse.": "torch/sparse/__init__.py",
}
TORCH_FUNCTIONS = "torch/functional.py"
PYTHON_MODULES = tuple(MODULE_OF_PREFIX.values()) + (TORCH_FUNCTIONS,)
# How every note of an absent op begins.
ABSENT = "not in this release"


def aten_base(opinfo):
    """The base name of the aten function an OpInfo calls, when its aten_name says it plainly."""
    name = getattr(opinfo, "aten_name", None) or opinfo.name
    for prefix in ("torch.ops.aten.", "torch."):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    base = name.split(".", 1)[0]
    return base if re.fullmatch(r"\w+", base) else None


def python_home(opinfo):
    """(module member, function name) for an OpInfo named after a Python module's function."""
    for prefix, member in MODULE_OF_PREFIX.items():
        if opinfo.name.startswith(prefix):
            name = opinfo.name[len(prefix):]
            return (member, name) if re.fullmatch(r"\w+", name) else None
    return None


def _mentions(text, word):
    return re.search(rf"\b{re.escape(word)}\b", text) is not None


class Release:
    """What one release has, to tell which of our OpInfo ops it lacks."""

    def __init__(self, torch_version, yaml_names, python_files, known_names):
        """`yaml_names`: base names in the release's native_functions.yaml;
        `python_files`: {member: text} from the release; `known_names`: base
        names in the yaml of the torch whose OpInfo list is used."""
        self.torch_version = torch_version
        self.yaml_names, self.python, self.known = set(yaml_names), python_files, set(known_names)

    def absent(self, opinfo):
        """(source, note) when the release lacks the op, else None (no verdict)."""
        home = python_home(opinfo)
        if home and home[0] in self.python:
            if _mentions(self.python[home[0]], home[1]):
                return None                 # defined in Python there, whatever it calls
            return (home[0], f"{ABSENT}: {home[1]} is not in torch "
                             f"{self.torch_version}'s {home[0]}")
        base = aten_base(opinfo)
        if base and base in self.known and base not in self.yaml_names:
            functional = self.python.get(TORCH_FUNCTIONS)
            if functional is None or not _mentions(functional, base):
                return ("native_functions.yaml",
                        f"{ABSENT}: aten {base} is absent from torch "
                        f"{self.torch_version}'s native_functions.yaml")
        return None
