"""Module-level probes: what only a module, an optimizer step or a training-mode layer reaches.

OpInfo probes functions one call at a time; some MPS kernels are reached only
from a module or an optimizer (`fused=True` Adam runs `_fused_adam_`, dropout
in training `bernoulli_.float`, nn.LSTM `_lstm_mps` on MPS). Each probe here is
a declarative record: its name (the op id, `module.…`), the dtypes it runs in,
how to build its inputs (CPU tensors, seeded by the sweep), the call, and how
to judge it (by value against the CPU, or, for a random op, by distribution
through `judge_as`). A probe quacks like an OpInfo, so the engine runs it as
any op: isolated workers, the CPU reference, the target, one verdict. Its op
row says source 'module'.

A call must build everything it needs from its arguments, on their device:
the same call runs on the CPU and on the target.
"""
from dataclasses import dataclass, field

import torch

from mpsprobe.ops import module_bounds

SOURCE = "module"
PREFIX = "module."

F32, F16, BF16 = torch.float32, torch.float16, torch.bfloat16


class ProbeUnavailable(Exception):
    """A probe's library cannot be used here (torchvision absent): its cases are skips saying so."""


@dataclass
class ModuleProbe:
    name: str                      # the op id
    call: object                   # call(input, *args, **kwargs) -> outputs
    build: object                  # build(dtype, requires_grad) -> [(input, args, kwargs)]
    dtypes: tuple
    reaches: tuple                 # aten functions it is written to reach (on MPS)
    judge_as: str = None           # the op whose judging rules apply (a random op's distribution)
    differentiable: bool = False   # has a backward pass (gradients of the inputs that require grad)
    note: str = ""                 # what the probe cannot do on this torch, or how it differs by device
    # error_bound(args, dtype, cpu_out, modes) -> {output position: (Applicable, allowance)}: the
    # most a correct kernel may differ from the CPU, derived (ops/module_bounds.py), or None.
    error_bound: object = None
    source: str = SOURCE
    # What the engine reads of an OpInfo.
    variant_test_name: str = ""
    supports_out: bool = False
    inplace_variant: object = None
    extra: dict = field(default_factory=dict)

    @property
    def op(self):
        return self.call

    @property
    def aten_name(self):
        return self.reaches[0] if self.reaches else self.name

    @property
    def supports_autograd(self):
        return self.differentiable

    def supported_dtypes(self, device_type):
        return set(self.dtypes)

    def supported_backward_dtypes(self, device_type):
        return set(self.dtypes) if self.differentiable else set()

    def sample_inputs(self, device, dtype, requires_grad=False):
        from torch.testing._internal.opinfo.core import SampleInput
        for inp, args, kwargs in self.build(dtype, requires_grad):
            yield SampleInput(inp, args=tuple(args), kwargs=dict(kwargs))


def _leaf(t, requires_grad):
    return t.detach().requires_grad_(requires_grad) if t.is_floating_point() else t


# --- optimizers: two steps of a fresh optimizer on given parameters and gradients ----------

def _optimizer_step(kind, impl, params, grads, lr=0.01, **options):
    """The parameters after two steps of torch.optim.`kind` (fused or foreach), as a list."""
    leaves = [p.detach().clone().requires_grad_() for p in params]
    for leaf, g in zip(leaves, grads):
        leaf.grad = g.detach().clone()
    optimizer = getattr(torch.optim, kind)(leaves, lr=lr, **{impl: True}, **options)
    for _ in range(2):
        optimizer.step()
    return [leaf.detach() for leaf in leaves]


def _optimizer_inputs(dtype, requires_grad):
    shapes = [(4, 3), (7,), (2, 3, 5)]
    params = [torch.randn(s, dtype=dtype) for s in shapes]
    grads = [torch.randn(s, dtype=dtype) for s in shapes]
    return [(params, (grads,), {})]


def _optimizer(kind, impl, options):
    def step(params, grads):
        return _optimizer_step(kind, impl, params, grads, **options)
    step.__name__ = f"{kind.lower()}_{impl}_step"
    return step


_OPTIMIZERS = {
    # name: (torch.optim class, options, the fused kernel)
    "adam": ("Adam", {"weight_decay": 0.01}, "_fused_adam_"),
    "adamw": ("AdamW", {"weight_decay": 0.01}, "_fused_adamw_"),
    "adam_amsgrad": ("Adam", {"amsgrad": True}, "_fused_adam_"),
    "sgd": ("SGD", {"momentum": 0.9, "nesterov": True}, "_fused_sgd_"),
}


def _optimizer_probes():
    found = []
    for name, (kind, options, fused) in _OPTIMIZERS.items():
        found.append(ModuleProbe(f"{PREFIX}optim.{name}.fused", _optimizer(kind, "fused", options),
                                 _optimizer_inputs, (F32, F16), (fused,)))
        foreach = "_foreach_add_.Scalar" if kind != "SGD" else "_foreach_add_.List"
        found.append(ModuleProbe(f"{PREFIX}optim.{name}.foreach", _optimizer(kind, "foreach", options),
                                 _optimizer_inputs, (F32, F16), (foreach,)))
    return found


# --- GradScaler: unscale the gradients (finding infs), then update the scale ----------------

def amp_unscale_and_update(grads, scale, growth_tracker):
    """GradScaler's two kernels as `unscale_` and `update` call them: the unscaled gradients,
    whether an inf/NaN was found, the new scale and growth tracker."""
    grads = [g.clone() for g in grads]
    scale, growth_tracker = scale.clone(), growth_tracker.clone()
    found_inf = torch.zeros(1, dtype=torch.float32, device=scale.device)
    # 1/scale in float32 is exact for the powers of two a scale holds (MPS has no float64).
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found_inf, scale.reciprocal())
    torch._amp_update_scale_(scale, growth_tracker, found_inf, 2.0, 0.5, 2)
    return grads, found_inf, scale, growth_tracker


def _amp_inputs(dtype, requires_grad):
    samples = []
    for poison in (None, float("inf"), float("nan")):
        grads = [torch.randn(4, 3, dtype=dtype) * 1024, torch.randn(9, dtype=dtype) * 1024]
        if poison is not None:
            grads[1][3] = poison
        # A growth tracker one step from growing: a finite step doubles the scale.
        samples.append((grads, (torch.tensor([1024.0]), torch.tensor([1], dtype=torch.int32)), {}))
    return samples


# --- recurrent modules, through functional_call so their weights are the sample's -------------

def _recurrent(kind):
    def run(x, params, h0, **options):
        module = getattr(torch.nn, kind)(x.shape[-1], h0[0].shape[-1] if kind == "LSTM" else h0.shape[-1],
                                         batch_first=True, **options)
        module = module.to(device=x.device, dtype=x.dtype)
        return torch.func.functional_call(module, params, (x, h0))
    run.__name__ = f"{kind.lower()}_forward"
    return run


def _recurrent_inputs(kind):
    def build(dtype, requires_grad):
        samples = []
        for layers, bidirectional in ((1, False), (2, True)):
            module = getattr(torch.nn, kind)(4, 5, num_layers=layers, bidirectional=bidirectional,
                                             batch_first=True)
            params = {k: _leaf(v.detach().to(dtype), requires_grad) for k, v in module.named_parameters()}
            x = _leaf(torch.randn(2, 3, 4, dtype=dtype), requires_grad)
            h = torch.randn(layers * (2 if bidirectional else 1), 2, 5, dtype=dtype)
            h0 = (h, torch.randn_like(h)) if kind == "LSTM" else h
            samples.append((x, (params, h0), {"num_layers": layers, "bidirectional": bidirectional}))
        return samples
    return build


# --- layers ---------------------------------------------------------------------------------

def dropout_train(x, p, training):
    """nn.Dropout in training mode (`training` is always True here; F.dropout's signature, so
    the sample is judged by dropout's distribution check)."""
    module = torch.nn.Dropout(p)
    return module.train(training)(x)


def _dropout_inputs(dtype, requires_grad):
    return [(_leaf(torch.randn(64, 64, dtype=dtype), requires_grad), (), {"p": p, "training": True})
            for p in (0.5, 0.1)]


def rms_norm(x, normalized_shape, weight, eps):
    return torch.nn.functional.rms_norm(x, normalized_shape, weight, eps)


def _rms_norm_inputs(dtype, requires_grad):
    return [(_leaf(torch.randn(3, 5, 16, dtype=dtype), requires_grad),
             ((16,), _leaf(torch.rand(16, dtype=dtype) + 0.5, requires_grad), 1e-6), {}),
            (_leaf(torch.randn(4, 8, dtype=dtype), requires_grad), ((8,), None, None), {})]


def embedding_bag_training(indices, weight, offsets, mode, per_sample_weights=None):
    """nn.EmbeddingBag with a weight that requires grad (as in training): `_embedding_bag`,
    where an inference call runs `_embedding_bag_forward_only`."""
    with torch.enable_grad():
        leaf = weight.detach().requires_grad_()
        out = torch.nn.functional.embedding_bag(indices, leaf, offsets, mode=mode,
                                                per_sample_weights=per_sample_weights)
    return out.detach()


def _embedding_bag_inputs(dtype, requires_grad):
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
    offsets = torch.tensor([0, 3, 3, 6])            # an empty bag included
    weight = torch.randn(10, 6, dtype=dtype)
    return [(indices, (weight, offsets, mode), {}) for mode in ("sum", "mean", "max")] + [
        (indices, (weight, offsets, "sum"), {"per_sample_weights": torch.rand(8, dtype=dtype)})]


def weight_norm(v, g, dim):
    return torch._weight_norm(v, g, dim)


def _weight_norm_inputs(dtype, requires_grad):
    v = _leaf(torch.randn(6, 5, dtype=dtype), requires_grad)
    return [(v, (_leaf(torch.rand(6, 1, dtype=dtype) + 0.5, requires_grad), 0), {}),
            (v, (_leaf(torch.rand(1, 5, dtype=dtype) + 0.5, requires_grad), 1), {})]


# --- weight-only quantized linear layers ----------------------------------------------------

def int8_linear(x, weight, scales):
    """Weight-only int8 linear: x @ (weight * scales[:, None]).T, in x's dtype."""
    return torch._weight_int8pack_mm(x, weight, scales)


def _int8_inputs(dtype, requires_grad):
    return [(torch.randn(m, 64, dtype=dtype), (torch.randint(-128, 128, (32, 64), dtype=torch.int8),
                                               torch.rand(32, dtype=dtype) / 64 + 1e-3), {})
            for m in (1, 5)]


INT4_GROUP, INT4_INNER_K_TILES = 32, 2


def int4_linear(x, weight_int4, scales_and_zeros):
    """Weight-only int4 linear (group size 32), from 4-bit values held in an int32 [n, k].

    Packed the way each device's kernel wants it, as PyTorch's own tests pack it
    (test/test_linalg.py, test__int4_mm): the CPU's `_convert_weight_to_int4pack_for_cpu`
    and `_weight_int4pack_mm_for_cpu` (the CPU has no `_weight_int4pack_mm`), elsewhere
    `_convert_weight_to_int4pack` on two values a byte and `_weight_int4pack_mm`.
    """
    if x.dtype == torch.float64:
        # No kernel takes float64: the float64 truth is the definition itself, exactly.
        return x @ module_bounds.int4_dequantized(weight_int4, scales_and_zeros, INT4_GROUP)[0].T
    if x.device.type == "cpu":
        packed = torch._convert_weight_to_int4pack_for_cpu(weight_int4, INT4_INNER_K_TILES)
        return torch._weight_int4pack_mm_for_cpu(x, packed, INT4_GROUP, scales_and_zeros)
    as_bytes = (weight_int4[:, ::2] << 4 | weight_int4[:, 1::2]).to(torch.uint8)
    packed = torch._convert_weight_to_int4pack(as_bytes, INT4_INNER_K_TILES)
    return torch._weight_int4pack_mm(x, packed, INT4_GROUP, scales_and_zeros)


def _int4_inputs(dtype, requires_grad):
    n, k = 64, 256
    scales = torch.rand(k // INT4_GROUP, n, 1) / 8 + 0.01
    zeros = torch.randn(k // INT4_GROUP, n, 1) / 8
    return [(torch.randn(m, k, dtype=dtype), (torch.randint(0, 16, (n, k), dtype=torch.int32),
                                              torch.cat([scales, zeros], dim=2).to(dtype)), {})
            for m in (1, 4)]


def probes():
    """Every module probe, in a stable order."""
    found = _optimizer_probes() + [
        ModuleProbe(f"{PREFIX}amp.grad_scaler", amp_unscale_and_update, _amp_inputs, (F32, F16),
                    ("_amp_foreach_non_finite_check_and_unscale_", "_amp_update_scale_")),
        ModuleProbe(f"{PREFIX}nn.LSTM", _recurrent("LSTM"), _recurrent_inputs("LSTM"), (F32, F16),
                    ("_lstm_mps", "lstm_mps_backward"), differentiable=True,
                    error_bound=module_bounds.recurrent_error_bound("LSTM")),
        ModuleProbe(f"{PREFIX}nn.GRU", _recurrent("GRU"), _recurrent_inputs("GRU"), (F32, F16),
                    ("gru.input",), differentiable=True, error_bound=module_bounds.recurrent_error_bound("GRU")),
        ModuleProbe(f"{PREFIX}nn.RNN", _recurrent("RNN"), _recurrent_inputs("RNN"), (F32, F16),
                    ("rnn_tanh.input",), differentiable=True, error_bound=module_bounds.recurrent_error_bound("RNN")),
        ModuleProbe(f"{PREFIX}nn.Dropout.train", dropout_train, _dropout_inputs, (F32, F16, BF16),
                    ("bernoulli_.float",), judge_as="nn.functional.dropout"),
        ModuleProbe(f"{PREFIX}nn.RMSNorm", rms_norm, _rms_norm_inputs, (F32, F16, BF16),
                    ("_fused_rms_norm",), differentiable=True),
        ModuleProbe(f"{PREFIX}nn.EmbeddingBag.train", embedding_bag_training, _embedding_bag_inputs,
                    (F32, F16), ("_embedding_bag",)),
        ModuleProbe(f"{PREFIX}nn.utils.weight_norm", weight_norm, _weight_norm_inputs, (F32, F16),
                    ("_weight_norm_interface", "_weight_norm_interface_backward"), differentiable=True),
        ModuleProbe(f"{PREFIX}quant.int8_weight_linear", int8_linear, _int8_inputs, (F32, F16, BF16),
                    ("_weight_int8pack_mm",)),
        ModuleProbe(f"{PREFIX}quant.int4_weight_linear", int4_linear, _int4_inputs, (BF16, F16, F32),
                    ("_weight_int4pack_mm", "_convert_weight_to_int4pack"),
                    error_bound=module_bounds.int4_error_bound(INT4_GROUP),
                    note="the CPU reference runs _weight_int4pack_mm_for_cpu (its CPU twin): the "
                         "CPU has no _weight_int4pack_mm kernel"),
    ]
    return found
