"""In-place and out= cases: the op's other forms, each a case of its own.

Both run through execute.run_case, so they are judged exactly as the forward:
an in-place variant returns the input it wrote into (its "output"), and the
out= form returns the tensors it was handed. Where the CPU itself refuses the
form for a sample (an in-place op whose result would need another dtype, or
would broadcast into the input), the reference fails and the case is a skip
with the CPU's message.
"""
import torch
from torch.utils._pytree import tree_map

from mpsprobe.ops import samples as sample_tools
from mpsprobe.vocabulary import INPLACE, REASON_KINDS, SKIP
from . import judge
from .execute import run_case

NO_UNIQUE_ANSWER = dict(zip(REASON_KINDS, REASON_KINDS))["no_unique_answer"]


def _unwritten_like(t):
    """A buffer for out=: NaN where a value can say "never written", else zeros."""
    if not isinstance(t, torch.Tensor):
        return t
    buffer = torch.empty_like(t, memory_format=torch.contiguous_format)
    return buffer.fill_(float("nan")) if (t.is_floating_point() or t.is_complex()) else buffer.zero_()


def out_form(op):
    """`op` called as a user calls its out= form: buffers of the result's shape and
    dtype (allocated from an out-of-place call on the same device) passed as `out`;
    the buffers are what it returns."""
    def call(inp, *args, **kwargs):
        buffers = tree_map(_unwritten_like, op(inp, *args, **kwargs))
        op(inp, *args, **kwargs, out=buffers)
        return buffers
    return call


def run_variant_case(fn, pass_, dtype, sample, target, op_key, **options):
    """A result dict for the in-place variant or the out= form `fn` on one sample."""
    args = sample_tools.call_args(sample)
    if judge.random_sample(op_key, args):
        what = "in-place variant" if pass_ == INPLACE else "out= form"
        return {"status": SKIP, "reason_kind": NO_UNIQUE_ANSWER, "check_kind": "none",
                "reason": f"a random sample: the {what}'s draws are not judged (the distribution "
                          "check draws through the out-of-place op)"}
    return run_case(fn, dtype, sample, target, op_key=op_key, **options)
