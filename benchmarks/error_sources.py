"""Where a case's error comes from: one (op, dtype)'s samples, forward or backward,
computed on the target and on the CPU, in the dtype and "wide then rounded", against
the float64 truth. It prints, per output (or gradient), each side's error in units of
the verdict's floors, so a mismatch can be told apart from a kernel that rounds an
intermediate, or from an answer that depends on a random draw (DRAWS > 1 repeats the
call under other seeds and gives the spread of its error).

    python benchmarks/error_sources.py --device cuda --op nn.functional.batch_norm --dtype float16 --backward
    python benchmarks/error_sources.py --device cuda --op svd_lowrank --dtype complex64 --draws 8

Columns: target (the op in the dtype on the target), cpu (the same on the CPU),
target wide (the target computing in float32/complex64, rounded to the dtype once at
the end: what a kernel that keeps its intermediates wide would give), and where the
worst target element sits: its truth, CPU and target values.
"""
import argparse
import sys

import torch
from torch.utils._pytree import tree_flatten, tree_map

from mpsprobe.engine import backward as bw
from mpsprobe.engine.verdict import floors
from mpsprobe.ops import opinfo as catalogue
from mpsprobe.ops import samples as sample_tools


def _wide_of(dtype):
    if dtype.is_complex:
        return torch.complex64 if dtype != torch.complex128 else dtype
    return torch.float32 if dtype != torch.float64 else dtype


def _cast(args, src, dst):
    return tree_map(lambda x: x.detach().to(dst).requires_grad_(x.requires_grad)
                    if isinstance(x, torch.Tensor) and x.dtype == src else x, args)


def _ratio(x, truth, dtype):
    atol, rtol = floors(dtype)
    wide = torch.complex128 if truth.is_complex() else torch.float64
    x, truth = x.detach().cpu().to(wide), truth.detach().cpu().to(wide)
    finite = torch.isfinite(x) & torch.isfinite(truth)
    if not bool(finite.any()):
        return float("nan"), None
    diff = (x - truth).abs()
    scaled = torch.where(finite, diff / (atol + rtol * truth.abs()), torch.zeros_like(diff, dtype=torch.float64))
    worst = int(scaled.reshape(-1).argmax())
    return float(scaled.max()), worst


def _outputs(op, args, backward, positions, grad_outputs, device):
    """The op's outputs (forward) or gradients (backward) for `args` on `device`."""
    args = sample_tools.to_device(args, device)
    if not backward:
        out = bw._call(op, args)
        return [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
    out = bw._call(op, args)
    outputs = bw._picked(out, positions)
    moved = [g.to(device=device, dtype=o.dtype) for g, o in zip(grad_outputs, outputs)]
    return list(bw._gradients(outputs, bw._grad_inputs(args), moved))


def explain(op, key, dtype, sample, backward, device, draws):
    cpu_args = sample_tools.call_args(sample)
    wide = _wide_of(dtype)
    positions = grad_outputs = None
    if backward:
        out = bw._call(op, cpu_args)
        positions = bw._grad_outputs(out)
        if not positions or not bw._grad_inputs(cpu_args):
            print("    no gradient to take")
            return
        import zlib
        outs = bw._picked(out, positions)
        grad_outputs = bw._seeded_grad_outputs(
            outs, zlib.crc32(f"{key}|{dtype}|{sample_tools.summarize(sample)}".encode()))

    def run(args, on, cast_back=None, seed=None):
        if seed is not None:
            torch.manual_seed(seed)
        got = _outputs(op, args, backward, positions, grad_outputs, on)
        return [g.to(cast_back) if cast_back is not None and g.dtype != cast_back and
                (g.is_floating_point() or g.is_complex()) else g for g in got]

    truth_dtype = torch.complex128 if dtype.is_complex else torch.float64
    truth = run(_cast(cpu_args, dtype, truth_dtype), "cpu")
    cpu = run(cpu_args, "cpu")
    target = run(cpu_args, device)
    widened = run(_cast(cpu_args, dtype, wide), device, cast_back=dtype) if wide != dtype else None
    for i, (g, c, t) in enumerate(zip(truth, cpu, target)):
        if not (g.is_floating_point() or g.is_complex()):
            continue
        r_t, worst = _ratio(t, g, dtype)
        r_c, _ = _ratio(c, g, dtype)
        line = f"    {'gradient' if backward else 'output'} {i} {tuple(g.shape)}: target {r_t:.3g}x, cpu {r_c:.3g}x"
        if widened is not None:
            r_w, _ = _ratio(widened[i], g, dtype)
            same = bool(torch.equal(widened[i].cpu(), t.cpu()))
            line += f", target wide {r_w:.3g}x{' (identical to target)' if same else ''}"
        if draws > 1:
            spread = [_ratio(run(cpu_args, "cpu", seed=s)[i], g, dtype)[0] for s in range(draws)]
            line += f"; cpu over {draws} draws {min(spread):.3g}x..{max(spread):.3g}x"
            spread_t = [_ratio(run(cpu_args, device, seed=s)[i], g, dtype)[0] for s in range(draws)]
            line += f"; target over {draws} draws {min(spread_t):.3g}x..{max(spread_t):.3g}x"
        print(line)
        if worst is not None:
            at = lambda x: x.detach().cpu().reshape(-1)[worst].item()
            print(f"      worst element {worst}: truth {at(g):.6g}, cpu {at(c):.6g}, target {at(t):.6g}"
                  + (f", target wide {at(widened[i]):.6g}" if widened is not None else ""))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--op", required=True, help="OpInfo op id, e.g. nn.functional.batch_norm")
    parser.add_argument("--dtype", required=True)
    parser.add_argument("--backward", action="store_true")
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--draws", type=int, default=1, help="repeat under this many seeds (random algorithms)")
    args = parser.parse_args(argv)
    opinfos = [o for o in catalogue.load_op_db() if catalogue.op_key(o) == args.op]
    if not opinfos:
        sys.exit(f"no OpInfo op {args.op!r}")
    info = opinfos[0]
    dtype = catalogue.parse_dtype(args.dtype)
    print(f"{args.op} {args.dtype} {'backward' if args.backward else 'forward'} on {args.device} "
          f"(torch {torch.__version__}); floors {floors(dtype)}")
    for n, sample in enumerate(catalogue.samples(info, dtype, args.samples, requires_grad=args.backward)):
        print(f"  sample {n}: {sample_tools.summarize(sample, 160)}")
        try:
            explain(info.op, args.op, dtype, sample, args.backward, args.device, args.draws)
        except Exception as e:
            print(f"    raised {type(e).__name__}: {str(e).splitlines()[0][:150]}")


if __name__ == "__main__":
    main()
