"""The `compiled` pass: an op's forward through torch.compile on the target.

One case: the op is wrapped in torch.compile (Inductor, its default mode) and
run on the target through execute.run_case, so it is judged by the same rules,
against the same CPU reference, as the eager forward; the aten ops recorded
are the eager op's own. What the compiled form adds:

- a compile that raises (Dynamo tracing, Inductor lowering, the generated
  code's own compiler) is `error`, reason kind `compile_failed`, with the
  exception's family and first line; an error raised by the compiled code once
  it runs is the target's, classified as the eager forward's would be;
- what the compiler left to eager is a `fallback` of its own kind,
  `compiled_fallback`, never a CPU fallback: a graph break (Dynamo's
  counters; the op it stopped at where it names one), an op Inductor has no
  lowering for, called as an aten kernel from the generated code (read in
  that code, which Inductor hands over on a cache hit too), or no graph at
  all. Ops Inductor deliberately calls as library kernels (extern_kernels.mm,
  convolution) are its design, not a fallback: named in the notes only;
- `compile_ms`, the first call's wall time, compiling included;
- for a case that passed, the compiled call's time (`target_ms`) against the
  eager op's (`eager_ms`) on the target, with the ratio's interval: at a speed
  ladder's rung (ops/ladders.py) where the op has one, else at the sample.

A random sample is not compiled: Inductor draws from its own generator, so the
compiled form's draws would need a distribution check of their own.
"""
import contextlib
import os
import re
import time

from mpsprobe.vocabulary import ERROR, FALLBACK, PASS, REASON_KIND, SKIP

COMPILE_BUDGET_S = 60.0      # a compiled case's default budget, compiling included (--compile-timeout)
SPEED_ELEMENTS = 1 << 22     # the speed comparison's input: the largest ladder rung up to this many elements
SPEED_REPS, SPEED_BUDGET_S = 9, 1.0   # each side: 9 timed calls (an interval needs 7), within about a second

COMPILED_SAMPLES = 1         # samples per (op, dtype) a compiled pass runs by default (each compiles anew)

COMPILE_FAILED = REASON_KIND["compile_failed"].name
COMPILED_FALLBACK = REASON_KIND["compiled_fallback"].name
NO_UNIQUE_ANSWER = REASON_KIND["no_unique_answer"].name

# Exceptions raised by the compiler itself, by the module that defines them.
_COMPILER_MODULES = ("torch._dynamo", "torch._inductor", "torch._subclasses", "torch.fx",
                     "triton", "torch._higher_order_ops")
# A fallback kernel as the generated (Python) wrapper calls it: torch.ops.ns.op.overload(.
_KERNEL_CALL = re.compile(r"\btorch\.ops\.(\w+)\.(\w+)\.(\w+)\(")
_EXTERN_CALL = re.compile(r"\bextern_kernels\.(\w+)\(")
_BREAK_OP = re.compile(r"\b(aten|prims)\.(\w+)\.(\w+)\b")
_BREAK_FUNCTION = re.compile(r"module: ([\w.]+), qualname: ([\w.<>]+)")

# OpInfo key -> the speed ladder (ops/ladders.py) that times it, where the names differ.
LADDER_OF = {"div.no_rounding_mode": "div", "nn.functional.relu": "relu", "nn.functional.gelu": "gelu",
             "nn.functional.silu": "silu", "nn.functional.conv2d": "resnet50.layer1.conv2",
             "nn.functional.linear": "bert.attention.qkv", "nn.functional.embedding": "bert.embeddings.word",
             "nn.functional.scaled_dot_product_attention": "bert.attention.sdpa",
             "nn.functional.max_pool2d": "resnet50.maxpool", "nn.functional.avg_pool2d":
             "densenet121.transition1.pool", "nn.functional.grid_sample": "raft.corr_lookup",
             "nn.functional.conv3d": "r3d_18.layer1.conv"}


def cache_env(torch_version, environ=None):
    """Environment for workers running compiled cases: Inductor's and Triton's caches under
    mpsprobe's cache root, one folder per torch version, kept across runs (a second sweep
    compiles little); compiling in the worker itself (a pool of compile processes would be
    killed with each case's process group). Whatever the environment already sets is kept."""
    from mpsprobe import cachedirs
    environ = os.environ if environ is None else environ
    folder = os.path.join(cachedirs.folder("inductor"), f"torch-{torch_version or 'unknown'}")
    wanted = {"TORCHINDUCTOR_CACHE_DIR": folder, "TRITON_CACHE_DIR": os.path.join(folder, "triton"),
              "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    return {k: v for k, v in wanted.items() if not environ.get(k)}


def samples_cap(config):
    """How many samples of a pair the compiled pass runs: --compiled-samples, at most --samples."""
    return max(1, min(config.get("samples", 3), config.get("compiled_samples", COMPILED_SAMPLES)))


def op_name(namespace, name, overload):
    """`aten::sort.stable`, or `aten::cumsum` for a default overload (aten.aten_name's spelling)."""
    return f"{namespace}::{name}" + ("" if overload == "default" else f".{overload}")


def is_view(namespace, name, overload):
    """Whether the op only makes a view (its schema returns an alias it does not write:
    `slice.Tensor(Tensor(a) self, ...) -> Tensor(a)`): no kernel runs, nothing is left to eager."""
    import torch
    try:
        schema = getattr(getattr(getattr(torch.ops, namespace), name), overload)._schema
    except (AttributeError, RuntimeError):
        return False
    returns = [r.alias_info for r in schema.returns]
    return bool(returns) and all(a is not None and not a.is_write for a in returns)


def fallback_kernels(codes):
    """(fallback kernels, library kernels) the generated wrapper code calls, each named once."""
    kernels, extern = [], []
    for code in codes:
        for line in code.splitlines():
            if line.lstrip().startswith("#"):
                continue   # Inductor's comments name the source graph's ops
            for namespace, name, overload in _KERNEL_CALL.findall(line):
                found = op_name(namespace, name, overload)
                # Inductor's own helpers (reinterpret_tensor, its RNG seeds) are not the op's kernels,
                # and a view (slice, permute, _conj) computes nothing.
                if namespace != "inductor" and not name.startswith("inductor_") and found not in kernels \
                        and not is_view(namespace, name, overload):
                    kernels.append(found)
            extern += [f"extern_kernels.{n}" for n in _EXTERN_CALL.findall(line) if f"extern_kernels.{n}" not in extern]
    return kernels, extern


def graph_breaks(reasons):
    """Names for Dynamo's graph-break reasons: the aten op a reason names (a data-dependent
    output shape), else `graph break: ` and its first line, with the function it would not
    trace where it names one (a function marked as skipped)."""
    named = []
    for reason in reasons:
        op, function = _BREAK_OP.search(reason), _BREAK_FUNCTION.search(reason)
        name = op_name(*op.groups()) if op else "graph break: " + (reason.strip().splitlines() or ["?"])[0][:160]
        if not op and function:
            name += f" ({'.'.join(function.groups())})"
        if name not in named:
            named.append(name)
    return named


def compile_error(exc):
    """(error_type, message) of a failed compile: the outer family and, where Dynamo wraps
    the compiler's own exception (BackendCompilerFailed), the inner one's family and line."""
    from .classify import first_line
    inner = getattr(exc, "inner_exception", None) or exc.__cause__
    if inner is not None and inner is not exc:
        return f"{type(exc).__name__}({type(inner).__name__})", f"{type(inner).__name__}: {first_line(inner)}"[:500]
    return type(exc).__name__, first_line(exc)[:500]


def _raised_by_compiler(exc):
    module = type(exc).__module__ or ""
    return any(module == m or module.startswith(m + ".") for m in _COMPILER_MODULES)


@contextlib.contextmanager
def _unseeded():
    """OpInfo's wrapper_set_seed without its torch.manual_seed, which Dynamo will not trace:
    OpInfo wraps sdpa, multi-head attention and others in it for their random samples, which
    this pass does not compile. Without this each would break its graph on the wrapper, not
    on the op."""
    from torch.testing._internal import common_methods_invocations as listed
    seeded = getattr(listed, "wrapper_set_seed", None)
    if seeded is None:
        yield
        return
    listed.wrapper_set_seed = lambda op, *args, **kwargs: op(*args, **kwargs)
    try:
        yield
    finally:
        listed.wrapper_set_seed = seeded


class CompiledForm:
    """The op under torch.compile, called as run_case calls an op; notes how the compile went.

    Inductor's generated code is collected as it is written or read back from the cache
    (GraphLowering.save_output_code), and Dynamo's graph breaks from its counters.
    """

    def __init__(self, op, target):
        import torch
        self.target = target
        self.graphs = 0
        self.compile_ms = None
        self.failed = None       # the exception of a compile that failed
        self.called = False      # whether the case got as far as calling it (not when the reference failed)
        self.codes = []
        self.breaks = []

        def backend(gm, example_inputs):
            from torch._inductor.compile_fx import compile_fx
            self.graphs += 1
            return compile_fx(gm, example_inputs)
        # fullgraph=False: a graph break is recorded as the fallback it is, not as a failure.
        self.compiled = torch.compile(lambda *args, **kwargs: op(*args, **kwargs), backend=backend)

    def __call__(self, inp, *rest, **kwargs):
        from torch.utils._python_dispatch import _disable_current_modes
        if self.failed is not None:
            raise self.failed    # asked again (a dispatch witness): the same failure, not a second compile
        first, self.called = self.compile_ms is None, True
        started = time.perf_counter()
        try:
            # The target's dispatch mode (a test backend's) stays out: the compiled form's
            # own behaviour comes from target.compiler().
            with _disable_current_modes(), self.target.compiler(), _unseeded():
                out = self.compiled(inp, *rest, **kwargs)
        except Exception as e:
            if first and _raised_by_compiler(e):
                self.failed = e
            raise
        if first:
            self.target.synchronize()
            self.compile_ms = (time.perf_counter() - started) * 1000.0
        return out

    @contextlib.contextmanager
    def watching(self):
        """Dynamo reset (its recompile limit is per process) and its counters cleared, generated
        code collected, while the case runs."""
        import torch._dynamo
        from torch._dynamo.utils import counters
        from torch._inductor.graph import GraphLowering
        torch._dynamo.reset()
        counters.clear()
        saved = GraphLowering.save_output_code
        GraphLowering.save_output_code = staticmethod(self.codes.append)
        # With CI set, Inductor raises on an implicit fallback for an op that has a
        # decomposition (a rule for PyTorch's own CI): on a CI runner every such
        # fallback would be recorded as a failed compile.
        ci = os.environ.pop("CI", None)
        try:
            yield
        finally:
            if ci is not None:
                os.environ["CI"] = ci
            GraphLowering.save_output_code = saved
            self.breaks = graph_breaks(list(counters["graph_break"]))
            torch._dynamo.reset()   # the next case starts from nothing

    def left_to_eager(self):
        """What the compiler left to eager kernels: graph breaks, fallback kernels, or the
        whole call when Dynamo captured no graph."""
        kernels, _ = fallback_kernels(self.codes)
        left = self.breaks + [k for k in kernels if k not in self.breaks]
        if not self.graphs and not left:
            left = ["no graph: Dynamo compiled nothing, the call ran eagerly"]
        return left


def run_compiled_case(op, dtype, sample, target, op_key, timing=True, aten_cache=None, modes=None):
    """A result dict (results-table fields) for the compiled form of `op` on one sample."""
    from mpsprobe.ops import samples as sample_tools
    from . import judge, rulebook
    from .execute import run_case
    started = time.perf_counter()
    rule, rule_args = rulebook.judged_as(op_key, sample_tools.call_args(sample))
    if rule and judge.random_sample(rule, rule_args):
        return {"status": SKIP, "check_kind": "none", "reason_kind": NO_UNIQUE_ANSWER,
                "reason": "a random sample: the compiled form draws from Inductor's own generator, "
                          "and its draws are not judged", "duration_s": time.perf_counter() - started}
    form = CompiledForm(op, target)
    with form.watching():
        result = run_case(op, dtype, sample, target, op_key=op_key, aten_cache=aten_cache, modes=modes,
                          timing=False, target_op=form)
    result = filed(result, form)
    # Timed only where it passed: a fallback's or a mismatch's speed says nothing of the compiled kernel.
    if timing and result["status"] == PASS:
        fields, where = speed(op, op_key, dtype, sample, target)
        result.update(fields)
        result["notes"] = dict(result.get("notes") or {}, compiled_timed_at=where)
    result["duration_s"] = time.perf_counter() - started
    return result


def filed(result, form):
    """run_case's result for the compiled form, with what the compile did filed into it."""
    if not form.called:
        return result   # nothing was compiled: the reference or the transfer decided the case
    notes = dict(result.get("notes") or {})
    kernels, extern = fallback_kernels(form.codes)
    notes["compiled"] = {k: v for k, v in (("graphs", form.graphs), ("graph_breaks", form.breaks),
                                           ("fallback_kernels", kernels), ("extern_kernels", extern)) if v}
    if form.failed is not None:
        error_type, message = compile_error(form.failed)
        keep = {k: result[k] for k in ("aten_ops", "aten_variants", "aten_dtypes") if k in result}
        return dict(keep, status=ERROR, reason_kind=COMPILE_FAILED, check_kind="none",
                    reason=f"torch.compile failed on the target: {error_type}",
                    error_type=error_type, message=message, notes=notes,
                    duration_s=result.get("duration_s"))
    left = form.left_to_eager()
    result = dict(result, compile_ms=form.compile_ms)
    if left and result["status"] == PASS:
        result.update(status=FALLBACK, reason_kind=COMPILED_FALLBACK, fallback_ops=left,
                      reason=f"the compiled form leaves {', '.join(left[:3])}{' …' if len(left) > 3 else ''} "
                             "to eager kernels on the target")
    elif left:
        notes["compiled_fallback"] = left   # a mismatch (or a CPU fallback) that also left work to eager
    result["notes"] = notes
    return result


# ------------------------------------------------------------------ speed

def ladder_for(op_key):
    """The speed ladder (ops/ladders.py) that times `op_key`, or None."""
    from mpsprobe.ops import ladders
    return ladders.BY_NAME.get(LADDER_OF.get(op_key, op_key))


def _speed_inputs(op, op_key, dtype, sample, target):
    """(eager callable, its arguments on the target, where): the ladder's rung when the op
    has a ladder and the dtype is floating, else the sample itself."""
    import torch
    from mpsprobe.ops import samples as sample_tools
    record = ladder_for(op_key)
    if record is not None and dtype.is_floating_point:
        rungs = [r for r in record.rungs if max(r.largest, r.size) <= SPEED_ELEMENTS]
        if rungs:
            rung = rungs[-1]
            generator = torch.Generator().manual_seed(0)
            with target.context():
                inputs = record.build(rung, dtype, target.torch_device, generator)
            return record, (inputs, (), {}), f"ladder {record.name} at {rung.label or rung.shape}"
    with target.context():
        inp, rest, kwargs = sample_tools.to_device(sample_tools.call_args(sample), target.torch_device)
    return op, ((inp,) + tuple(rest), (), kwargs), "the sample"


def speed(op, op_key, dtype, sample, target):
    """(fields, where): the compiled form's time against the eager op's on the target, as
    medians (eager_ms, target_ms), their ratio (compiled_speedup) and its interval from the two
    medians' intervals (ladder.median_interval); where it was timed, or why it was not."""
    import warnings
    from .ladder import Side, measure
    try:
        fn, (args, _, kwargs), where = _speed_inputs(op, op_key, dtype, sample, target)
        side = Side(target.torch_device)
        form = CompiledForm(fn, target)
        with form.watching(), warnings.catch_warnings():
            warnings.simplefilter("ignore")

            def eager():
                with target.context():
                    return fn(*args, **kwargs)
            form(*args, **kwargs)   # compiled for these inputs, outside the timing
            times = {}
            for name, call in (("eager", eager), ("compiled", lambda: form(*args, **kwargs))):
                times[name] = measure(call, side.timer, reps=SPEED_REPS, warmup=2, budget_s=SPEED_BUDGET_S)
    except Exception as e:
        from .classify import first_line
        return {}, f"not timed: {type(e).__name__}: {first_line(e)[:200]}"
    eager_m, compiled_m = times["eager"], times["compiled"]
    if not eager_m.times or not compiled_m.times:
        return {}, f"not timed: {SPEED_REPS} calls exceed {SPEED_BUDGET_S:g} s at {where}"
    fields = {"eager_ms": eager_m.median, "target_ms": compiled_m.median}
    if compiled_m.median > 0:
        fields["compiled_speedup"] = eager_m.median / compiled_m.median
    (e_lo, e_hi), (c_lo, c_hi) = eager_m.interval, compiled_m.interval
    if None not in (e_lo, e_hi, c_lo, c_hi) and c_lo > 0:
        fields["compiled_speedup_lo"], fields["compiled_speedup_hi"] = e_lo / c_hi, e_hi / c_lo
    return fields, where
