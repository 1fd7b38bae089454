"""The OpInfo source: PyTorch's own declarative op database as our catalogue.

`torch.testing._internal.common_methods_invocations.op_db` is an internal API
that shifts between torch versions, so everything read from it goes through
`getattr` with a default, and a missing piece degrades one op, not the run.
"""
import contextlib
import fnmatch
import itertools
import sys
import traceback
import zlib

import torch

from mpsprobe.ops.catalogue import CatalogueError, suggest  # noqa: F401 (suggest: for callers)
from mpsprobe.ops import catalogue as plain


# Ops whose values are random or uninitialised: only shape, dtype and device
# of their outputs can be compared.
NONDETERMINISTIC_PATTERNS = (
    "empty*", "new_empty*", "*empty_like", "empty_strided", "empty_permuted",
    "rand*", "normal*", "bernoulli*", "multinomial", "uniform", "exponential",
    "geometric", "cauchy", "log_normal", "*dropout*", "nn.functional.rrelu",
    "randint*", "randn*", "*random*",
    "pca_lowrank", "svd_lowrank",  # randomised algorithms
)

# Outputs whose values are not unique, by output position: indices when the
# input has ties (sort is not stable by default; mode's value too), and
# eigenvector/singular vector signs or phases. Devices may legitimately differ
# there, so those outputs are checked for shape, dtype and device only.
AMBIGUOUS_OUTPUTS = {
    "argsort": (0,), "sort": (1,), "topk": (1,), "kthvalue": (1,), "mode": (0, 1),
    "median": (1,), "nanmedian": (1,),
    "max.reduction_with_dim": (1,), "min.reduction_with_dim": (1,),
    "linalg.eig": (1,), "linalg.eigh": (1,), "linalg.svd": (0, 2), "svd": (0, 2),
}

# OpInfos that cannot be judged against a CPU reference: jiterator ops compile
# CUDA source at run time and exist on no other device.
EXCLUDED_PATTERNS = ("jiterator_*",)


def load_op_db():
    """PyTorch's OpInfo list, or a CatalogueError saying why it cannot be read."""
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except ModuleNotFoundError as e:
        raise CatalogueError(
            f"PyTorch's OpInfo database needs the '{e.name}' package: pip install {e.name}"
        ) from None
    except Exception as e:  # an internal API: any shape of failure is possible
        raise CatalogueError(
            f"cannot read PyTorch's OpInfo database in torch {torch.__version__}: "
            f"{type(e).__name__}: {e}") from None
    return [o for o in op_db
            if not any(fnmatch.fnmatchcase(o.name, p) for p in EXCLUDED_PATTERNS)]


def with_module_probes(opinfos):
    """The catalogue a sweep runs: OpInfo's ops, then the module-level probes (ops/modules.py),
    torchvision's ops (ops/vision.py), the samples generated for MPS kernels none of those
    reaches (ops/generated.py) and the large cases of `run --large` (ops/large.py)."""
    from mpsprobe.ops import generated, large, modules, vision
    return list(opinfos) + modules.probes() + vision.probes() + generated.probes() + large.probes()


def op_key(opinfo):
    """The op's id: its OpInfo name, plus ".variant" for variant entries."""
    variant = getattr(opinfo, "variant_test_name", "") or ""
    return f"{opinfo.name}.{variant}" if variant else opinfo.name


def dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def parse_dtype(name):
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise CatalogueError(f"unknown dtype: {name!r}")
    return dtype


def ambiguous_outputs(key):
    return AMBIGUOUS_OUTPUTS.get(key, ())


def is_nondeterministic(key):
    return any(fnmatch.fnmatchcase(key, p) for p in NONDETERMINISTIC_PATTERNS)


def reference_dtypes(opinfo):
    """Every dtype the op supports on the CPU: what we try on the target.

    Deliberately not what the op declares for the target: learning that is the point.
    """
    try:
        return sorted(opinfo.supported_dtypes("cpu"), key=dtype_name)
    except Exception:
        return sorted(getattr(opinfo, "dtypes", ()) or (), key=dtype_name)


def describe(opinfos):
    """The catalogue as plain data (ops/catalogue.py): per op its id, OpInfo name,
    variant, aten name, CPU dtypes and the passes it has in each; with this torch's
    dtype names (aliases too: "float" is float32) and build."""
    from mpsprobe.vocabulary import PASSES
    rows = []
    for o in opinfos:
        dtypes = reference_dtypes(o)
        rows.append({"op": op_key(o), "name": o.name, "source": getattr(o, "source", "opinfo"),
                     "variant": getattr(o, "variant_test_name", "") or "",
                     "aten_name": getattr(o, "aten_name", None) or o.name,
                     "dtypes": [dtype_name(d) for d in dtypes],
                     "passes": {dtype_name(d): passes(o, d, PASSES) for d in dtypes}})
    names = {name: dtype_name(value) for name, value in vars(torch).items() if isinstance(value, torch.dtype)}
    return {"format": plain.FORMAT, "torch_version": torch.__version__,
            "torch_git": getattr(torch.version, "git_version", ""), "dtype_names": names, "ops": rows}


def catalogue(pattern="", opinfos=None):
    """`mpsprobe ops`'s rows (catalogue.search), read from OpInfo and the module probes."""
    return plain.search(describe(with_module_probes(load_op_db()) if opinfos is None else opinfos), pattern)


def list_pairs(ops=None, dtypes=None, opinfos=None, passes=None):
    """The (op, dtype) pairs to probe (catalogue.pairs), read from OpInfo and the module probes."""
    return plain.pairs(describe(with_module_probes(load_op_db()) if opinfos is None else opinfos),
                       ops, dtypes, passes)


def pair_seed(op, dtype):
    """A seed fixed by the pair alone, so samples match across runs and shards."""
    return zlib.crc32(f"{op}|{dtype}".encode())


def samples(opinfo, dtype, cap, requires_grad=False):
    """The first `cap` sample inputs of the op for `dtype`, on the CPU, seeded: the
    same samples with and without `requires_grad` (set where OpInfo says)."""
    with _light_bookkeeping():
        torch.manual_seed(pair_seed(op_key(opinfo), dtype_name(dtype)))
        generated = opinfo.sample_inputs("cpu", dtype, requires_grad=requires_grad)
        return list(itertools.islice(generated, cap))


def _test_fn_on_stack():
    """common_utils.extract_test_fn without reading source files: the same walk up
    the stack for a unittest.TestCase's test method (None outside a test)."""
    import unittest
    try:
        frame = sys._getframe(1)
        while frame is not None:
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, unittest.TestCase):
                *_, cls_name, test_name = candidate.id().rsplit(".", 2)
                if cls_name == type(candidate).__name__ and test_name.startswith("test"):
                    return getattr(candidate, test_name).__func__
            frame = frame.f_back
    except Exception:
        pass
    return None


@contextlib.contextmanager
def _light_bookkeeping():
    """Sample generation without its bookkeeping's cost, samples unchanged.

    OpInfo looks for the running test with inspect.stack() (which reads the
    source of every frame) on each sample_inputs call, and reseeds torch before
    each sample; torch.manual_seed queues a seed for every lazily initialised
    device (CUDA, XPU, MTIA) with a formatted stack trace, kept only for an
    error message should that device fail to start later. Together they were
    most of a sample's generation time. Here the test is looked for without
    reading source, and the queued seeds keep no trace; every seed is still set.
    """
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core
    original = common_utils.extract_test_fn
    patched = [m for m in (common_utils, core) if getattr(m, "extract_test_fn", None) is original]
    format_stack = traceback.format_stack
    for module in patched:
        module.extract_test_fn = _test_fn_on_stack
    traceback.format_stack = lambda *args, **kwargs: []
    try:
        yield
    finally:
        traceback.format_stack = format_stack
        for module in patched:
            module.extract_test_fn = original


def differentiable(opinfo, dtype):
    """Whether the op has a backward pass to probe in `dtype`: it supports autograd
    and the dtype is floating or complex (complex only where OpInfo allows it)."""
    if not getattr(opinfo, "supports_autograd", False):
        return False
    if dtype.is_complex:
        try:
            return dtype in opinfo.supported_backward_dtypes("cpu")
        except Exception:
            return False
    return dtype.is_floating_point


def variant(opinfo, pass_):
    """The callable a pass runs: the in-place variant, or the op itself for out= and the
    compiled pass (which compiles it) (None: none)."""
    from mpsprobe.vocabulary import INPLACE, OUT
    if pass_ == INPLACE:
        return getattr(opinfo, "inplace_variant", None) or _inplace_keyword(opinfo.op)
    if pass_ == OUT:
        return opinfo.op if getattr(opinfo, "supports_out", False) else None
    return opinfo.op


def _inplace_keyword(op):
    """`op` with inplace=True, for functions that take it (F.relu: aten::relu_) but whose
    OpInfo names no in-place variant; None for others."""
    import inspect
    try:
        if "inplace" not in inspect.signature(op).parameters:
            return None
    except (TypeError, ValueError):
        return None

    def inplace(inp, *args, **kwargs):
        return op(inp, *args, **dict(kwargs, inplace=True))
    return inplace


def compilable(opinfo):
    """Whether the op has a compiled pass: every OpInfo op with a forward but the random and
    uninitialised ones (Inductor draws from its own generator: no value to compare).

    Not the other sources: a module probe builds its module, parameters and optimizer inside
    the call, so compiling it would judge that set-up (its `requires_grad_` and `nn.Parameter`
    break the graph) rather than the step a user compiles; a generated record calls one aten
    overload directly, often writing into its arguments, which no user code compiles as such.
    """
    return getattr(opinfo, "source", "opinfo") == "opinfo" and not is_nondeterministic(op_key(opinfo))


def passes(opinfo, dtype, wanted):
    """The passes of `wanted` (vocabulary.PASSES order) the op has in `dtype`."""
    from mpsprobe.vocabulary import BACKWARD, COMPILED, FORWARD
    if getattr(opinfo, "large", False):
        return [FORWARD] if FORWARD in wanted else []   # `run --large`: one forward case, built on the target
    found = []
    for pass_ in wanted:
        if pass_ == COMPILED:
            if compilable(opinfo):
                found.append(pass_)
        elif pass_ == FORWARD or (pass_ == BACKWARD and differentiable(opinfo, dtype)) \
                or (pass_ not in (FORWARD, BACKWARD) and variant(opinfo, pass_) is not None):
            found.append(pass_)
    return found


_index = (None, 0, {})  # the OpInfo list last searched, its length, {op key: its first entry}


def find(opinfos, key):
    global _index
    listed, length, by_key = _index
    if listed is not opinfos or length != len(opinfos):
        by_key = {}
        for o in opinfos:
            by_key.setdefault(op_key(o), o)
        _index = (opinfos, len(opinfos), by_key)
    found = by_key.get(key)
    if found is None:
        raise CatalogueError(f"unknown op: {key!r}")
    return found
