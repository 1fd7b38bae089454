"""The error a correct kernel may make on a module probe, derived, per output element.

A module probe whose kernel may legitimately compute otherwise than the CPU
(a recurrent layer in cuDNN's TF32 mode, a quantized matmul summed in another
order) carries an `error_bound(args, dtype, cpu_out, modes)`: {output position:
(precision.Applicable, allowance)}, the allowance being the most a correct
kernel may differ from the CPU's answer there, derived from the inputs, the
dtype's rounding and the target's precision settings, never a tuned constant.
The verdict then passes within it and names the mode, as for the OpInfo
matmuls and convolutions (judge.precision_allowance).

Recurrent layers (nn.RNN, nn.GRU, nn.LSTM). The layer is rerun in float64,
carrying beside each value a bound on how far the target's may be from it, to
first order in the unit roundoffs (the second-order terms are below float64's
own rounding of these bounds):

- each gate pre-activation W_ih x + b_ih + W_hh h + b_hh is a sum of K =
  input + hidden + 2 products: its rounding is precision.mode_error_bound of
  the mode the target's recurrent kernels run in (TF32: inputs cut to 10
  bits), or, in full precision, precision.any_order_bound (any summation
  order); the errors of x and h already made propagate through |W|;
- sigmoid and tanh pass an error e on at most their steepest slope within
  e of the value (mean value theorem; at most 1/4 and 1), and each adds a
  few units of rounding (FUNCTION_ULPS) of its own; a product
  a b errs |a| e_b + |b| e_a, a sum e_a + e_b, each plus its own rounding.

Weight-only int4 linear: y = x (dequantized W)^T, where W's 4-bit values q
become (q - 8) scale + zero in the input's dtype. Each dequantized weight is
at most two roundings (u each) from the exact one, relative to |q - 8||scale|
+ |zero|, so mode_error_bound with the dtype's mantissa as "input bits"
covers it (its 2u + u^2 per product), the float32 accumulation in any order
included; plus the output's rounding to the dtype. The target is judged
against the exact product (the probe's float64 truth is the definition).
"""
import torch

from mpsprobe.engine import precision

FUNCTION_ULPS = 4  # rounding of sigmoid and tanh, in units of the dtype's roundoff


def _unit(dtype):
    return torch.finfo(dtype).eps / 2


class _Bounded:
    """A float64 value and a bound on the target's error in it."""
    def __init__(self, value, error):
        self.value, self.error = value, error

    def __add__(self, other):
        return _Bounded(self.value + other.value, self.error + other.error)

    def __mul__(self, other):
        return _Bounded(self.value * other.value,
                        self.value.abs() * other.error + other.value.abs() * self.error)

    def rounded(self, u):
        return _Bounded(self.value, self.error + u * self.value.abs())


def _nearest_to_zero(b):
    """The smallest |z| within the error bound of b: where sigmoid's and tanh's slopes,
    which fall with |z|, are steepest over the interval the target's z lies in."""
    return (b.value.abs() - b.error).clamp_min(0)


def _sigmoid(b, u):
    steepest = torch.sigmoid(_nearest_to_zero(b))
    slope = steepest * (1 - steepest)
    return _Bounded(torch.sigmoid(b.value), slope * b.error + FUNCTION_ULPS * u)


def _tanh(b, u):
    slope = 1 - torch.tanh(_nearest_to_zero(b)) ** 2
    return _Bounded(torch.tanh(b.value), slope * b.error + FUNCTION_ULPS * u)


def _gates_of(b, hidden):
    """The gates stacked in b (each `hidden` wide), bounded one by one."""
    return [_Bounded(v, e) for v, e in zip(b.value.split(hidden, -1), b.error.split(hidden, -1))]


def _ones_minus(b):
    return _Bounded(1 - b.value, b.error)


class _Gates:
    """Gate pre-activations W_ih x + b_ih + W_hh h + b_hh, each bounded: the rounding of
    their sums (the target's mode, or any order) plus the errors of x and h through |W|."""
    def __init__(self, mode, dtype, outputs):
        self.mode, self.dtype, self.outputs = mode, dtype, outputs

    def __call__(self, pairs, biases):
        value = sum(x.value @ w.T for w, x in pairs) + sum(biases)
        abs_sum = sum(x.value.abs() @ w.abs().T for w, x in pairs) + sum(b.abs() for b in biases)
        propagated = sum(x.error @ w.abs().T for w, x in pairs)
        k = sum(w.shape[1] for w, _ in pairs) + len(biases)
        if self.mode.input_bits is None:
            rounding = precision.any_order_bound(self.mode, k, abs_sum, value.abs(), self.dtype,
                                                 outputs=self.outputs)
        else:
            sq_sum = sum((x.value ** 2) @ (w ** 2).T for w, x in pairs) + sum(b ** 2 for b in biases)
            max_term = (sum((x.value ** 4) @ (w ** 4).T for w, x in pairs) + sum(b ** 4 for b in biases)) ** 0.25
            rounding = precision.mode_error_bound(self.mode, k, abs_sum, sq_sum, max_term, value.abs(),
                                                  outputs=self.outputs)
        return _Bounded(value, rounding + propagated + _unit(self.dtype) * value.abs())


def _cell(kind, gates, x, h, c, weights, u):
    """One step of `kind`'s cell: (h, c) bounded (c None but for LSTM)."""
    w_ih, w_hh, b_ih, b_hh = weights
    hidden = w_hh.shape[1]
    if kind == "RNN":
        return _tanh(gates([(w_ih, x), (w_hh, h)], [b_ih, b_hh]), u), None
    if kind == "LSTM":
        z = gates([(w_ih, x), (w_hh, h)], [b_ih, b_hh])
        i, f, g, o = _gates_of(z, hidden)
        c = (_sigmoid(f, u) * c + _sigmoid(i, u) * _tanh(g, u)).rounded(u)
        return (_sigmoid(o, u) * _tanh(c, u)).rounded(u), c
    # GRU: n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h' = (1 - z) n + z h
    split = _gates_of(gates([(w_ih, x)], [b_ih]), hidden)
    split_h = _gates_of(gates([(w_hh, h)], [b_hh]), hidden)
    r = _sigmoid((split[0] + split_h[0]).rounded(u), u)
    z = _sigmoid((split[1] + split_h[1]).rounded(u), u)
    n = _tanh((split[2] + (r * split_h[2]).rounded(u)).rounded(u), u)
    return ((_ones_minus(z) * n).rounded(u) + (z * h).rounded(u)).rounded(u), None


def recurrent_mode(modes, dtype):
    """The reduced-precision mode the target's recurrent kernels run in for `dtype`, else the
    freedom of any summation order in float32 (or float64) accumulation."""
    active = [m for m in precision.active_modes(modes or {}) if m.family == precision.RNN and dtype in m.dtypes]
    if active:
        return active[0]
    return precision.MODES["fp64_any_order" if dtype == torch.float64 else "fp32_any_order"]


def recurrent_bounds(kind, args, dtype, modes):
    """(mode, [output, h_n (, c_n)] as _Bounded): nn.`kind` (RNN, GRU, LSTM) rerun in float64
    on `args` as modules._recurrent takes them, (x, (params, h0), {num_layers, bidirectional}),
    batch first, each output with its bound."""
    x, (params, h0), options = args[0], args[1], args[2]
    layers, directions = options.get("num_layers", 1), 2 if options.get("bidirectional") else 1
    mode, u = recurrent_mode(modes, dtype), _unit(dtype)
    wide = {k: v.detach().to(torch.float64) for k, v in params.items()}
    h0, c0 = (h0 if kind == "LSTM" else (h0, None))
    h0 = h0.detach().to(torch.float64)
    c0 = c0.detach().to(torch.float64) if c0 is not None else None
    batch, steps, _ = x.shape
    gates_per_step = wide["weight_hh_l0"].shape[0]
    # Every sum the layer makes, for the union bound (GRU sums a gate's input and hidden parts apart).
    gates = _Gates(mode, dtype, outputs=2 * layers * directions * steps * batch * gates_per_step)
    seq = [_Bounded(t, torch.zeros_like(t)) for t in x.detach().to(torch.float64).unbind(1)]
    last_h, last_c = [], []
    for layer in range(layers):
        outs = []
        for d in range(directions):
            suffix = f"_l{layer}" + ("_reverse" if d else "")
            weights = [wide[f"{name}{suffix}"] for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
            index = layer * directions + d
            h = _Bounded(h0[index], torch.zeros_like(h0[index]))
            c = _Bounded(c0[index], torch.zeros_like(c0[index])) if c0 is not None else None
            order = range(steps - 1, -1, -1) if d else range(steps)
            out = [None] * steps
            for t in order:
                h, c = _cell(kind, gates, seq[t], h, c, weights, u)
                out[t] = h
            outs.append(out)
            last_h.append(h)
            last_c.append(c)
        seq = [_Bounded(torch.cat([o[t].value for o in outs], -1), torch.cat([o[t].error for o in outs], -1))
               for t in range(steps)]
    output = _Bounded(torch.stack([s.value for s in seq], 1), torch.stack([s.error for s in seq], 1))
    finals = [output, _Bounded(torch.stack([h.value for h in last_h]), torch.stack([h.error for h in last_h]))]
    if kind == "LSTM":
        finals.append(_Bounded(torch.stack([c.value for c in last_c]), torch.stack([c.error for c in last_c])))
    return mode, finals


def recurrent_error_bound(kind):
    """error_bound for nn.`kind`: each output's bound, under the mode that governs it."""
    def bound(args, dtype, cpu_out, modes):
        mode, finals = recurrent_bounds(kind, args, dtype, modes)
        k = args[0].shape[-1] + args[1][0]["weight_hh_l0"].shape[1] + 2   # a gate's sum, first layer
        applicable = precision.Applicable(mode, kind.lower(), k)
        return {i: (applicable, b.error) for i, b in enumerate(finals)}
    return bound


_DEQUANTIZED = {torch.bfloat16: "bf16_dequantized", torch.float16: "fp16_dequantized",
                torch.float32: "fp32_dequantized"}


def int4_dequantized(weight_int4, scales_and_zeros, group):
    """(exact dequantized weight [n, k], |q - 8||scale| + |zero| [n, k]) in float64, as
    `_weight_int4pack_mm` defines it: (q - 8) * scale + zero per group of `group` along k."""
    q = weight_int4.to(torch.float64) - 8
    scales = scales_and_zeros[..., 0].to(torch.float64).T.repeat_interleave(group, dim=1)   # [n, k]
    zeros = scales_and_zeros[..., 1].to(torch.float64).T.repeat_interleave(group, dim=1)
    return q * scales + zeros, q.abs() * scales.abs() + zeros.abs()


def int4_error_bound(group):
    """error_bound for modules.int4_linear: (x, (weight_int4, scales_and_zeros), {})."""
    def bound(args, dtype, cpu_out, modes):
        x, (weight, scales_and_zeros) = args[0], args[1]
        mode = precision.MODES[_DEQUANTIZED[dtype]]
        exact, magnitude = int4_dequantized(weight, scales_and_zeros, group)
        a = x.detach().to(torch.float64)
        y = a @ exact.T
        k = a.shape[-1]
        allowed = precision.mode_error_bound(
            mode, k, a.abs() @ magnitude.T, (a ** 2) @ (magnitude ** 2).T,
            ((a ** 4) @ (magnitude ** 4).T) ** 0.25, y.abs(), outputs=y.numel()) + _unit(dtype) * y.abs()
        return {0: (precision.Applicable(mode, "_weight_int4pack_mm", k), allowed)}
    return bound
