"""In-place and out= cases: the op's other forms, each a case of its own.

Both run through execute.run_case, so they are judged exactly as the forward:
an in-place variant returns the input it wrote into (its "output"), and the
out= form returns the tensors it was handed. Where the CPU itself refuses the
form for a sample (an in-place op whose result would need another dtype, or
would broadcast into the input), the reference fails and the case is a skip
with the CPU's message. A random sample is judged as the forward's is, by the
distribution of many draws, made through the same form (distributions.make_draw).
"""
from torch.utils._pytree import tree_map

from mpsprobe.ops import samples as sample_tools
from .execute import run_case


def out_form(op):
    """`op` called as a user calls its out= form: buffers of the result's shape and
    dtype (allocated from an out-of-place call on the same device) passed as `out`;
    the buffers are what it returns."""
    def call(inp, *args, **kwargs):
        buffers = tree_map(sample_tools.unwritten_like, op(inp, *args, **kwargs))
        op(inp, *args, **kwargs, out=buffers)
        return buffers
    return call


def run_variant_case(fn, pass_, dtype, sample, target, op_key, **options):
    """A result dict for the in-place variant or the out= form `fn` on one sample; a random
    sample is judged by the distribution of draws made through the same form."""
    return run_case(fn, dtype, sample, target, op_key=op_key, draw_form=pass_, **options)
