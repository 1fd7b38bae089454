"""The files PyTorch declares MPS support in, from the installed torch or a wheel.

A wheel is a zip: any platform's wheel (a macOS arm64 one included) can be
read on any machine without installing it, so declarations of torch versions
other than the installed one cost one download each.
"""
import email.parser
import os
import zipfile
from dataclasses import dataclass, field

from mpsprobe.errors import MpsprobeError
from . import presence, python_kernels

NATIVE_FUNCTIONS = "torchgen/packaged/ATen/native/native_functions.yaml"
COMMON_MPS = "torch/testing/_internal/common_mps.py"


class WheelError(MpsprobeError):
    """The path is not a readable torch wheel."""


@dataclass
class TorchFiles:
    """Where one torch version's declaration files came from, and their text (None: absent)."""
    torch_version: str
    origin: str                  # "installed" or the wheel's file name
    native_functions: str = None
    common_mps: str = None
    # {member: text} of the Python files read as data: torch.library MPS
    # registrations (python_kernels.py) and the modules that define Python ops
    # (presence.py).
    python: dict = field(default_factory=dict)

    def missing(self, member):
        where = "the installed torch" if self.origin == "installed" else self.origin
        return f"{where} (torch {self.torch_version}) has no {member}"


def wanted_python(member):
    """Whether a member of torch is one of the Python files the declarations read."""
    return python_kernels.is_registration_file(member) or member in presence.PYTHON_MODULES


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def installed():
    """The declaration files of the torch this Python imports (no torch import needed)."""
    import importlib.metadata
    import importlib.util
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        raise WheelError("torch is not installed in this Python") from None
    files = TorchFiles(version, "installed")
    for attr, package, member in (("native_functions", "torchgen", NATIVE_FUNCTIONS),
                                  ("common_mps", "torch", COMMON_MPS)):
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = os.path.dirname(list(spec.submodule_search_locations)[0])
        path = os.path.join(root, member)
        if os.path.exists(path):
            setattr(files, attr, _read(path))
        if package == "torch":
            files.python = _installed_python(root)
    return files


def _installed_python(root):
    members = list(presence.PYTHON_MODULES)
    for folder in python_kernels.REGISTRATION_DIRS:
        for where, _, names in os.walk(os.path.join(root, folder)):
            members += [os.path.relpath(os.path.join(where, n), root).replace(os.sep, "/")
                        for n in names]
    return {m: _read(os.path.join(root, m)) for m in members
            if wanted_python(m) and os.path.isfile(os.path.join(root, m))}


def wheel_version(archive, path):
    """The Version: field of the wheel's METADATA."""
    metadata = [n for n in archive.namelist()
                if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
    if not metadata:
        raise WheelError(f"{path} has no *.dist-info/METADATA: not a wheel")
    headers = email.parser.Parser().parsestr(archive.read(metadata[0]).decode("utf-8", "replace"))
    if headers.get("Name", "").lower() != "torch" or not headers.get("Version"):
        raise WheelError(f"{path} is a wheel of {headers.get('Name')!r}, not torch")
    return headers["Version"]


def from_wheel(path):
    """The declaration files inside a torch wheel file, without installing it."""
    path = str(path)
    if not os.path.isfile(path):
        raise WheelError(f"{path}: no such file")
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise WheelError(f"{path} is not a wheel (zip) file: {e}") from None
    with archive:
        files = TorchFiles(wheel_version(archive, path), os.path.basename(path))
        names = set(archive.namelist())
        for attr, member in (("native_functions", NATIVE_FUNCTIONS), ("common_mps", COMMON_MPS)):
            if member in names:
                setattr(files, attr, archive.read(member).decode("utf-8"))
        files.python = {member: archive.read(member).decode("utf-8", "replace")
                        for member in names if wanted_python(member)}
    return files
