"""Does svd_lowrank's gradient depend on its random projection? Figures for the closing note.

For each OpInfo sample of svd_lowrank in complex64 (the H200's backward mismatch),
on the CPU: the gradient through the canonical (gauge-fixed) outputs, as the probe's
backward case takes it, with the reference's draw (seed 42, as OpInfo's
wrapper_set_seed) and with 200 other draws. Printed per sample: the error of the
reference draw against its complex128 truth, the other draws' errors against
theirs as multiples of it (median, 90th percentile, max), and how far apart two
draws' complex128 gradients are (0 up to rounding: the gradient itself is unique).

    python benchmarks/svd_lowrank_draws.py [--draws 200]
"""
import argparse
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _common import machine_line  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=200)
    options = parser.parse_args()
    from torch.testing._internal.common_methods_invocations import op_db
    from mpsprobe.engine import ambiguity
    op = next(o for o in op_db if o.name == "svd_lowrank")
    samples = list(op.sample_inputs("cpu", torch.complex64, requires_grad=True))
    print(machine_line())
    print("| sample | q | reference draw's error | other draws' error / it: median, 90 %, max | "
          "complex128 gradients of two draws differ by |")
    print("|---|---|---|---|---|")

    def gradient(sample, dtype, seed, reference):
        def wide(x):
            return x.detach().to(dtype) if isinstance(x, torch.Tensor) and x.is_complex() else x
        inp = wide(sample.input).requires_grad_()
        args = [wide(a) for a in sample.args]
        kwargs = {k: wide(v) for k, v in sample.kwargs.items()}
        real_seed = torch.manual_seed
        torch.manual_seed = lambda _: real_seed(seed)   # the draw OpInfo's wrapper would fix at 42
        try:
            out = op.op(inp, *args, **kwargs)
        finally:
            torch.manual_seed = real_seed
        if reference is None:
            return tuple(x.detach() for x in out)
        fixed = ambiguity.gauge_fixed("svd_lowrank", out, reference)
        g = torch.Generator().manual_seed(1)
        loss = sum((f * torch.randn(f.shape, dtype=f.dtype, generator=g).conj()).real.sum() for f in fixed)
        return torch.autograd.grad(loss, inp)[0].to(torch.complex128)

    for i, sample in enumerate(samples):
        reference = gradient(sample, torch.complex64, 42, None)
        exact = ambiguity.lowrank_exact("svd_lowrank", (sample.input,) + tuple(sample.args), sample.kwargs,
                                        reference, torch.complex64)
        if not exact:
            continue   # below the rank: already no unique answer, whatever the precision
        own = (gradient(sample, torch.complex64, 42, reference)
               - gradient(sample, torch.complex128, 42, reference)).abs().max().item()
        ratios = sorted((gradient(sample, torch.complex64, s, reference)
                         - gradient(sample, torch.complex128, s, reference)).abs().max().item() / own
                        for s in range(options.draws))
        spread = (gradient(sample, torch.complex128, 1, reference)
                  - gradient(sample, torch.complex128, 2, reference)).abs().max().item()
        print(f"| {i} | {sample.kwargs.get('q')} | {own:.2e} | {statistics.median(ratios):.1f}, "
              f"{ratios[int(0.9 * len(ratios))]:.1f}, {ratios[-1]:.1f} | {spread:.1e} |")


if __name__ == "__main__":
    main()
