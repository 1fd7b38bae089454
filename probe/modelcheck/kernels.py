"""What a Mac runs for what the CPU traced, said in the row.

`check` traces the model on the CPU: there is no MPS on other systems, and
fake tensors on an "mps" device stop at the kernels PyTorch picks per device
(attention's backend choice asserts on them). The trace takes the generic
paths a non-CPU device takes (capture.portable_dispatch); what stays
device-specific is mapped here, from PyTorch's MPS sources, and every row it
touches says it was mapped, not traced:

- generic ops MPS routes to a kernel of its own (`aten::convolution` runs
  `aten::_mps_convolution`): a note on the row, answered from the op's cases;
- a module or function MPS runs as one kernel where the generic path runs
  several ops (nn.LSTM runs `aten::_lstm_mps`): a row of its own beside them,
  answered from the database like any op (`?` until something probed it);
- CPU-only kernels (in an op list captured for the CPU) and what a Mac runs instead.
"""
import sys

# PyTorch's sources for each mapping (under aten/src/ATen/native/).
_CONV = "mps/operations/Convolution.mm"
_RNN = "mps/operations/RnnOps.mm"
_ATTENTION = "mps/operations/Attention.mm"

# (generic aten op, kernel variant's transposed flag) -> the MPS kernel it runs.
ROUTED = {
    ("aten::convolution", "transposed=False"): "aten::_mps_convolution",
    ("aten::convolution", "transposed=True"): "aten::_mps_convolution_transpose",
    ("aten::convolution_backward", "transposed=False"): "aten::mps_convolution_backward",
    ("aten::convolution_backward", "transposed=True"): "aten::mps_convolution_transpose_backward",
}

# CPU-only kernels -> what a Mac runs instead.
CPU_ONLY = {
    "aten::_native_multi_head_attention": "the generic MultiheadAttention path (in_proj linear, "
                                          "aten::_scaled_dot_product_attention_math_for_mps, out_proj linear)",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "aten::_scaled_dot_product_attention_math_for_mps",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward": "the math attention's backward ops",
    "aten::mkldnn_rnn_layer": "aten::_lstm_mps", "aten::mkldnn_rnn_layer_backward": "aten::lstm_mps_backward",
    "aten::mkldnn_convolution": "aten::_mps_convolution",
    "aten::_slow_conv2d_forward": "aten::_mps_convolution",
    "aten::_nnpack_spatial_convolution": "aten::_mps_convolution",
    "aten::slow_conv3d_forward": "aten::_mps_convolution",
    "aten::_slow_conv2d_backward.output_mask": "aten::mps_convolution_backward",
}

MAPPED = "mapped from the CPU's trace, not traced on MPS"


def routed_note(aten_op, variants):
    """The row's note for a generic op MPS runs as a kernel of its own, or None."""
    kernels = sorted({ROUTED[(aten_op, flag)] for v in variants for flag in v.split()[1:]
                      if (aten_op, flag) in ROUTED})
    if not kernels:
        return None
    return f"on MPS: runs as {' / '.join(kernels)} ({MAPPED}; {_CONV})"


def cpu_only_note(aten_op):
    instead = CPU_ONLY.get(aten_op)
    return f"a CPU-only kernel: a Mac runs {instead} instead ({MAPPED})" if instead else None


class FusedCalls:
    """Records, while active, the calls MPS runs as one kernel of its own (nn.LSTM's,
    scaled_dot_product_attention's), with the dtype, the module (`where()`) and the line
    (`source()`) of each: the two functions are wrapped for the capture's duration (a
    TorchFunctionMode would not see the calls nested in MultiheadAttention's).

    `calls`: {(MPS kernel, dtype): [count, {place: n}, {line: n}, note]}.
    """

    def __init__(self, where, source, train):
        self.calls = {}
        self._where, self._source, self._train = where, source, train
        self._restore = []

    def __enter__(self):
        import torch
        import torch.nn.functional as F
        for owner, name, record in ((torch._VF, "lstm", self._lstm),
                                    (F, "scaled_dot_product_attention", self._attention)):
            real = getattr(owner, name)
            self._restore.append((owner, name, owner.__dict__.get(name)))
            setattr(owner, name, _recording(real, record))
        return self

    def __exit__(self, *exc):
        for owner, name, before in reversed(self._restore):
            if before is None:
                delattr(owner, name)     # looked up through the module's __getattr__ again
            else:
                setattr(owner, name, before)
        self._restore.clear()

    def _lstm(self, args, kwargs, frame):
        import torch
        if args and isinstance(args[0], torch.Tensor) and args[0].is_floating_point():
            note = f"on MPS: nn.LSTM runs as this kernel, not the cell ops the CPU ran ({MAPPED}; {_RNN})"
            self._add("aten::_lstm_mps", args[0], note, frame)
            if self._train and torch.is_grad_enabled():
                self._add("aten::lstm_mps_backward", args[0], f"on MPS: nn.LSTM's backward ({MAPPED}; {_RNN})", frame)

    def _attention(self, args, kwargs, frame):
        dropout = kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0)
        if args and not dropout:
            self._add("aten::_scaled_dot_product_attention_math_for_mps", args[0],
                      "on MPS: scaled_dot_product_attention without dropout runs as this kernel (where its "
                      f"MPS conditions hold), not the math ops the CPU ran ({MAPPED}; {_ATTENTION})", frame)

    def _add(self, kernel, tensor, note, frame):
        dtype = str(tensor.dtype).replace("torch.", "")
        entry = self.calls.setdefault((kernel, dtype), [0, {}, {}, note])
        entry[0] += 1
        for table, value in ((entry[1], self._where()), (entry[2], self._source(frame))):
            if value:
                table[value] = table.get(value, 0) + 1


def _recording(real, record):
    def call(*args, **kwargs):
        record(args, kwargs, sys._getframe(1))   # the caller's frame: the line in the model's code
        return real(*args, **kwargs)
    return call


def fused_calls(where, source, train):
    return FusedCalls(where, source, train)
