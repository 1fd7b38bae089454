"""MPS kernels that torch registers from Python, read from its source as data.

Not every MPS kernel is in native_functions.yaml: some are registered at
import time through `torch.library`, e.g.

    _lib = _Library("aten", "IMPL")                       # torch/backends/mps (2.1 .. 2.8)
    _lib.impl("native_group_norm", native_group_norm, "MPS")

    mps_lib = torch.library.Library("aten", "IMPL", "MPS")   # torch/_refs/linalg
    mps_lib.impl("aten::linalg_lu_solve.out", linalg_lu_solve_out_mps)

The files are parsed (never imported): a `Library("aten", "IMPL"[, key])`
assigned to a name, then `name.impl(op, fn[, key])` calls on it, count as an
MPS kernel of `op` when the call's key, or else the library's, is MPS. A key
that is not a literal cannot be decided and is not counted.
"""
import ast

# Where torch registers MPS kernels from Python; every .py file under these is read.
REGISTRATION_DIRS = ("torch/backends/mps/", "torch/_refs/")


def is_registration_file(member):
    return member.endswith(".py") and member.startswith(REGISTRATION_DIRS)


def _literal(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _arg(call, index, keyword):
    if len(call.args) > index:
        return call.args[index]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def _is_library(call):
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in ("Library", "_Library") and _literal(_arg(call, 0, "ns")) == "aten" \
        and _literal(_arg(call, 1, "kind")) == "IMPL"


def aten_name(op):
    """'linalg_lu_solve.out' for 'aten::linalg_lu_solve.out'; the default overload has no dot."""
    return op.split("::", 1)[1] if op.startswith("aten::") else op


def registrations(text, filename):
    """[(aten name, line)] of every MPS kernel `text` registers through torch.library."""
    try:
        tree = ast.parse(text, filename=filename)
    except SyntaxError:
        return []
    libraries = {}                                   # {variable: the library's own dispatch key}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) \
                and _is_library(node.value):
            key = _arg(node.value, 2, "dispatch_key")
            for target in node.targets:
                if isinstance(target, ast.Name):
                    libraries[target.id] = _literal(key) if key is not None else ""
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "impl" and isinstance(node.func.value, ast.Name)
                and node.func.value.id in libraries):
            continue
        op = _literal(_arg(node, 0, "op_name"))
        key_node = _arg(node, 2, "dispatch_key")
        key = _literal(key_node) if key_node is not None else libraries[node.func.value.id]
        if op and key and key.upper() == "MPS":
            found.append((aten_name(op), node.lineno))
    return found


def mps_kernels(python_files):
    """{aten name: "file:line"} of the MPS kernels registered by `python_files` ({member: text})."""
    kernels = {}
    for member in sorted(python_files):
        if is_registration_file(member):
            for name, line in registrations(python_files[member], member):
                kernels.setdefault(name, f"{member}:{line}")
    return kernels
