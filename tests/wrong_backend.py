"""WRONG: test-only targets that answer trivially, or in a reduced precision.

It is NOT a measurement of anything. It stands in for a device whose kernels
are wrong in the ways a tolerance policy must never accept, or right in a
reduced-precision mode it must accept:

- "zeros":  every aten op returns zeros of its output's shape and dtype;
- "input":  every aten op returns its first tensor argument where that has the
            output's shape and dtype (zeros otherwise): "the input unchanged";
- "tf32":   matmul and convolution inputs rounded to TF32's 10-bit mantissa,
            eval-mode batch norm returns (C,)-shaped saved statistics as CUDA
            does, and the target reports TF32 as on (as a CUDA device would);
- "tf32_wrong": as "tf32", but matmul and convolution inputs rounded to 4
            bits: beyond what TF32 allows;
- "phase":  right, but eigenvectors, singular vectors and QR's Q columns (with
            R's rows) turned by another phase (a sign when real) per vector, as
            another LAPACK may return: real ones flipped in sign, complex ones rotated;
- "reorder": right, but cumsum in float16 sums each prefix smallest term first, every
            running sum rounded to float16: another valid summation order;
- "coarse_sum": as "reorder", with the terms rounded to 5 mantissa bits: wrong;
- "winograd_wgrad", "fft_wgrad": right, but convolution_backward's weight gradient
            (3x3 kernel, stride 1, padding 1) computed in float32 by a transformed
            algorithm as cuDNN may pick one: Winograd F(4x4, 3x3)'s matrices (Lavin
            and Gray, 2016) used for the weight gradient, or FFT correlation;
- "wgrad_off", "wgrad_dropped": as "winograd_wgrad", but 2 % too large, or with
            the term of the first output position of every batch element left out: wrong;
- "int4_order": right, but the int4 weight-only matmul computed as a GPU kernel may:
            each weight dequantized in the input's dtype (rounded there), the
            products summed in float32 from the last to the first, the output rounded;
- "int4_coarse": as "int4_order", with the dequantized weights cut to 1 mantissa bit: wrong;
- "int4_bf16_only": as "int4_order" in bfloat16; any other dtype refused with CUDA's
            own text (int4mm.cu's TORCH_CHECK(A.dtype() == at::kBFloat16));
- "redraw": right, but every op that draws (dropout, bernoulli, rand, ...)
            draws from another seed: other, equally valid random values, as
            a device with another generator returns.

WRONG (the environment variable) picks the behaviour for `--backend
tests/wrong_backend.py`; tests build targets directly with WrongTarget(kind).
Through --backend, TF32 follows the settings as on a CUDA device: on until
`--strict-precision` sets float32 matmul precision to "highest".
"""
import contextlib
import os

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from mpsprobe.engine.aten import aten_name
from mpsprobe.engine.devices import Target
from mpsprobe.engine.precision import family_of, round_to_mantissa

_TF32_MODES = {"device": "cuda", "cuda.matmul.allow_tf32": True, "cudnn.allow_tf32": True,
               "float32_matmul_precision": "high"}


# Moving a sample to the target runs these; they stay right, so the inputs are the sample's.
_MOVES = ("aten::_to_copy", "aten::copy_", "aten::set_", "aten::as_strided", "aten::empty", "aten::clone",
          "aten::detach", "aten::lift_fresh", "aten::alias", "aten::_neg_view", "aten::_conj", "aten::view")


def _first_tensor(args):
    return next((x for x in tree_flatten(args)[0] if isinstance(x, torch.Tensor)), None)


_REDRAWS = [0]


class _Wrong(TorchDispatchMode):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = aten_name(func)
        if self.kind == "redraw" and torch.Tag.nondeterministic_seeded in func.tags:
            # counted across contexts (one per draw): each draw from a seed of its own
            _REDRAWS[0] += 1
            torch.manual_seed(7919 * _REDRAWS[0] + 1)
        if self.kind.startswith("tf32") and family_of(name) and func._schema.is_mutable is False:
            bits = 10 if self.kind == "tf32" else 4

            def rounded(x):
                if isinstance(x, torch.Tensor) and x.dtype == torch.float32:
                    return round_to_mantissa(x, bits)
                return x
            args, kwargs = tree_map(rounded, (args, kwargs))
        if self.kind in _WGRADS and name.startswith("aten::convolution_backward"):
            out = func(*args, **kwargs)
            if out[1] is None or not _winograd_shape(*args[:10]):
                return out
            return out[0], _weight_gradient(self.kind, args[0], args[1]), out[2]
        if self.kind in ("reorder", "coarse_sum") and name.startswith("aten::cumsum") \
                and args[0].dtype == torch.float16:
            return _reordered_cumsum(args[0], args[1], 10 if self.kind == "reorder" else 5)
        if self.kind.startswith("int4"):
            if name.startswith("aten::_convert_weight_to_int4pack_for_cpu"):
                return args[0].clone()  # the 4-bit values as they are: the matmul below reads them
            if name.startswith("aten::_weight_int4pack_mm_for_cpu"):
                return _int4_mm(self.kind, *args)
            return func(*args, **kwargs)
        out = func(*args, **kwargs)
        if name.startswith(_MOVES):
            return out
        if self.kind == "phase":
            return _turned(name, out)
        if self.kind == "redraw" or self.kind in _WGRADS:
            return out
        if self.kind.startswith("tf32"):
            if name.startswith("aten::native_batch_norm") and not args[5] and out[1].numel() == 0:
                channels = args[0].shape[1]
                stats = torch.zeros(channels, dtype=torch.float32)
                return out[0], stats, stats.clone()
            return out
        first = _first_tensor(args)

        def wrong(x):
            if not isinstance(x, torch.Tensor) or not (x.is_floating_point() or x.is_complex()):
                return x
            if self.kind == "input" and isinstance(first, torch.Tensor) \
                    and first.shape == x.shape and first.dtype == x.dtype:
                return first.clone()
            return torch.zeros_like(x)
        return tree_map(wrong, out)


# Winograd F(4, 3) (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks"):
# y = A^T [(G g) * (B^T d)]. Its transpose computes a 3-tap weight gradient from 4 positions
# of the output gradient and 6 of the input: gw = G^T [(A go) * (B^T x)].
_BT = torch.tensor([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
                    [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]], dtype=torch.float32)
_G = torch.tensor([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
                   [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]], dtype=torch.float32)
_AT = torch.tensor([[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0],
                    [0, 1, -1, 8, -8, 1]], dtype=torch.float32)
_WGRADS = ("winograd_wgrad", "fft_wgrad", "wgrad_off", "wgrad_dropped")


def _winograd_shape(grad_out, x, weight, bias_sizes, stride, padding, dilation, transposed, output_padding,
                    groups):
    return (x.dtype == torch.float32 and x.dim() == 4 and tuple(weight.shape[-2:]) == (3, 3)
            and list(stride) == [1, 1] and list(padding) == [1, 1] and list(dilation) == [1, 1]
            and not transposed and groups == 1 and x.shape[-1] % 4 == 0 and x.shape[-2] % 4 == 0)


def _weight_gradient(kind, grad_out, x):
    """The weight gradient of a 3x3, stride-1, padding-1 convolution, in float32, by `kind`."""
    padded = torch.nn.functional.pad(x, (1, 1, 1, 1))
    if kind == "fft_wgrad":
        h, w = padded.shape[-2:]
        spectra = torch.einsum("nohw,nihw->oihw", torch.fft.rfft2(grad_out, s=(h, w)).conj(),
                               torch.fft.rfft2(padded, s=(h, w)))
        return torch.fft.irfft2(spectra, s=(h, w))[..., :3, :3].contiguous()
    if kind == "wgrad_dropped":
        grad_out = grad_out.clone()
        grad_out[:, :, 0, 0] = 0
    tiles_x = padded.unfold(2, 6, 4).unfold(3, 6, 4)          # (N, C, tiles, tiles, 6, 6)
    tiles_g = grad_out.unfold(2, 4, 4).unfold(3, 4, 4)        # (N, O, tiles, tiles, 4, 4)
    summed = torch.einsum("notwab,nitwab->oiab", _AT.T @ tiles_g @ _AT, _BT @ tiles_x @ _BT.T)
    out = _G.T @ summed @ _G
    return out * 1.02 if kind == "wgrad_off" else out


def _reordered_cumsum(x, dim, bits):
    x = round_to_mantissa(x.to(torch.float32), bits).to(torch.float16).movedim(dim, -1)
    out = torch.empty_like(x)
    for i in range(x.shape[-1]):
        # the prefix's terms from the smallest to the largest
        terms = x[..., :i + 1].gather(-1, x[..., :i + 1].abs().argsort(dim=-1, stable=True))
        acc = terms[..., 0]
        for j in range(1, i + 1):
            acc = (acc.to(torch.float32) + terms[..., j].to(torch.float32)).to(torch.float16)
        out[..., i] = acc
    return out.movedim(-1, dim)


INT4_REFUSAL = ("Expected A.dtype() == at::kBFloat16 to be true, but got false.  (Could this error message be "
                "improved?  If so, please report an enhancement request to PyTorch.)")


def _int4_mm(kind, x, q, group, scales_and_zeros):
    if kind == "int4_bf16_only" and x.dtype != torch.bfloat16:
        raise RuntimeError(INT4_REFUSAL)
    scales, zeros = (scales_and_zeros[..., i].T.repeat_interleave(group, dim=1) for i in (0, 1))
    weight = (q - 8).to(x.dtype) * scales + zeros          # each step rounded in x's dtype
    if kind == "int4_coarse":
        weight = round_to_mantissa(weight, 1)
    return (x.float().flip(-1) @ weight.float().flip(-1).T).to(x.dtype)


def _phase(vectors):
    k = vectors.shape[-1]
    if vectors.is_complex():
        angles = torch.linspace(0.5, 2.5, k, dtype=torch.float64)
        return torch.polar(torch.ones_like(angles), angles).to(vectors.dtype)
    return torch.tensor([(-1.0) ** (j + 1) for j in range(k)], dtype=vectors.dtype)


def _turned(name, out):
    if name in ("aten::_linalg_eigh.default", "aten::_linalg_eigh", "aten::linalg_eig"):
        values, vectors = out[0], out[1]
        return values, vectors * _phase(vectors)
    if name.startswith("aten::_linalg_svd") and out[0].numel():
        u, s, vh = out
        k = s.shape[-1]
        phase = _phase(u[..., :k])
        u = torch.cat([u[..., :k] * phase, u[..., k:]], dim=-1)
        # resolved: inside a dispatch mode a lazy conj view multiplies as if unconjugated
        vh = torch.cat([vh[..., :k, :] * phase.conj().resolve_conj().unsqueeze(-1), vh[..., k:, :]], dim=-2)
        return u, s, vh
    if name == "aten::linalg_qr" and out[1].numel():
        q, r = out
        k = min(r.shape[-2:])
        phase = _phase(r[..., :k, :k])
        if q.numel():
            q = torch.cat([q[..., :k] * phase, q[..., k:]], dim=-1)
        r = torch.cat([r[..., :k, :] * phase.conj().resolve_conj().unsqueeze(-1), r[..., k:, :]], dim=-2)
        return q, r
    return out


class WrongTarget(Target):
    def __init__(self, kind, follow_settings=False):
        super().__init__("cpu")
        self.kind = kind
        self.follow_settings = follow_settings

    def _tf32(self):
        return self.kind.startswith("tf32") and not (
            self.follow_settings and torch.get_float32_matmul_precision() == "highest")

    @property
    def device_name(self):
        return f"WRONG ({self.kind}, test-only)"

    def context(self):
        if self.kind.startswith("tf32") and not self._tf32():
            return contextlib.nullcontext()
        return _Wrong(self.kind)

    def precision_modes(self):
        return dict(_TF32_MODES) if self._tf32() else super().precision_modes()


def make_target():
    kind = os.environ.get("WRONG", "zeros")
    if kind.startswith("tf32"):
        torch.set_float32_matmul_precision("high")  # TF32 on, as CUDA's cuDNN has it by default
    return WrongTarget(kind, follow_settings=True)
