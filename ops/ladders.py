"""Op speed ladders: the default op set, at sizes that mean something.

Per-case micro timing runs OpInfo's sample inputs, which are tiny, so it
measures kernel-launch latency. A ladder instead times one op over a climbing
series of sizes ("rungs"), so the size from which the target beats the CPU
(the crossover) can be read off.

Two kinds of ladder:

* **size ladders** for elementwise ops, reductions, FFTs and square matmul:
  a geometric series of element counts (1e2 … 1e8 for elementwise and
  reductions, 1 and 3 per decade), so the crossover is known within a factor
  of about 3;
* **layer ladders** for layers of real models (ResNet-50, a BERT-base layer,
  a ViT-B/16 block, an LSTM word language model, DeepLabV3, DenseNet-121,
  R3D-18, RAFT): the layer's shape is fixed and the batch climbs
  (`BATCHES`), so the crossover is a batch size. Each record's `source`
  names the model and the layer the shape comes from.

A record is declarative, like PyTorch's OpInfo: the callable, its fixed
keyword arguments, the rungs (input specs per rung), which inputs need a
gradient (none: no backward), and a cost model (FLOPs per forward call where
the arithmetic is known; bytes moved default to reading every input and
writing the output once, a lower bound that the engine computes from the
tensors themselves). `build` makes a rung's inputs on a device from a seeded
CPU generator, so the CPU and the target get the same values.

Every rung of the default set keeps its largest tensor under 1 GiB at
float32; callers cap the top rung further (`max_size`, `max_batch`) for
CPU-friendly runs.
"""
import math
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch
import torch.nn.functional as F

# Batch sizes of layer ladders: small enough to find a small-batch crossover,
# large enough to reach the sizes training uses.
BATCHES = (1, 8, 32, 128)

# Sizes of elementwise and reduction ladders: 1 and 3 per decade, 1e2 … 1e8.
SIZES = tuple(m * 10 ** e for e in range(2, 9) for m in (1, 3) if m * 10 ** e <= 10 ** 8)

# Row length of the 2-D inputs of size ladders: reductions run over the last
# dimension, like a softmax over a vocabulary or a row of activations.
ROW = 1000

GiB = 1 << 30


@dataclass(frozen=True)
class TensorSpec:
    """One input tensor: its shape and how its values are drawn.

    kind: "normal" (standard normal, the ladder's dtype), "positive"
    (uniform in [0.5, 1.5): log, divisors, variances), "unit" (uniform in
    [-1, 1): sampling grids), "bool" (a fair coin), "index" (int64 in
    [0, high): embedding indices).
    """
    shape: tuple
    kind: str = "normal"
    high: int = 0

    @property
    def numel(self):
        return math.prod(self.shape)


@dataclass(frozen=True)
class Rung:
    """One step of a ladder.

    size: elements in the main (first) input, what the ladder climbs;
    batch: the batch size of a layer ladder (None for size ladders);
    largest: elements in the largest tensor one call makes, input or output
    (what the memory cap is checked against); flops: per forward call, None
    where not modelled.
    """
    inputs: tuple
    batch: Optional[int] = None
    largest: int = 0
    flops: Optional[float] = None
    label: str = ""

    @property
    def size(self):
        return self.inputs[0].numel

    @property
    def shape(self):
        return "x".join(map(str, self.inputs[0].shape))


def make_inputs(rung, dtype, device, generator):
    """The rung's inputs on `device`, drawn from `generator` (a CPU generator)."""
    dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype
    out = []
    for spec in rung.inputs:
        if spec.kind == "index":
            t = torch.randint(0, spec.high, spec.shape, generator=generator)
        elif spec.kind == "bool":
            t = torch.rand(spec.shape, generator=generator) < 0.5
        elif spec.kind == "positive":
            t = (torch.rand(spec.shape, generator=generator) + 0.5).to(dtype)
        elif spec.kind == "unit":
            t = (torch.rand(spec.shape, generator=generator) * 2 - 1).to(dtype)
        else:
            t = torch.randn(spec.shape, generator=generator).to(dtype)
        out.append(t.to(device))
    return tuple(out)


@dataclass(frozen=True)
class LadderOp:
    """One op's ladder.

    op(*inputs, **kwargs) is one call. grad: indices of the inputs that
    require a gradient; empty means no backward pass. backward_flops: FLOPs
    of the backward as a multiple of the forward's (2 for GEMM-like layers:
    one product for the input's gradient, one for the weight's); None where
    not modelled. bytes_moved(rung, itemsize): overrides the engine's default
    (every input read, the output written) where that is wrong, e.g. an
    embedding reads only the rows it gathers.
    """
    name: str
    family: str
    op: Callable
    rungs: tuple
    kwargs: dict = field(default_factory=dict)
    grad: tuple = ()
    backward_flops: Optional[float] = None
    bytes_moved: Optional[Callable] = None
    source: str = ""
    build: Callable = make_inputs

    def __post_init__(self):
        # Rungs climb by size (ties by batch), whatever order they were declared in:
        # the engine stops at the first rung that does not fit, and crossover reads upwards.
        object.__setattr__(self, "rungs", tuple(sorted(self.rungs, key=lambda r: (r.size, r.batch or 0))))

    @property
    def has_backward(self):
        return bool(self.grad)

    def __call__(self, *inputs):
        return self.op(*inputs, **self.kwargs)


# ---------------------------------------------------------------- size ladders

def _rows(n):
    return (n // ROW, ROW) if n >= ROW else (1, n)


def _size_rungs(kinds=("normal",)):
    # No FLOPs: these ops are bound by memory, so GB/s is the figure that means something.
    return tuple(Rung(inputs=tuple(TensorSpec(_rows(n), k) for k in kinds), largest=n) for n in SIZES)


def _unary(name, fn, kind="normal", **kwargs):
    return LadderOp(name, "elementwise", fn, _size_rungs(kinds=(kind,)), kwargs=kwargs, grad=(0,),
                    source="size ladder")


def _binary(name, fn, second="normal"):
    return LadderOp(name, "elementwise", fn, _size_rungs(kinds=("normal", second)), grad=(0, 1),
                    source="size ladder")


def _reduction(name, fn, grad=True, over="rows of 1000, reduced over the last dimension", **kwargs):
    return LadderOp(name, "reduction", fn, _size_rungs(), kwargs=kwargs, grad=(0,) if grad else (),
                    source=f"size ladder; {over}")


ELEMENTWISE = (
    _binary("add", torch.add),
    _binary("mul", torch.mul),
    _binary("div", torch.div, second="positive"),
    _unary("relu", torch.relu),
    _unary("gelu", F.gelu),
    _unary("silu", F.silu),
    _unary("sigmoid", torch.sigmoid),
    _unary("tanh", torch.tanh),
    _unary("exp", torch.exp),
    _unary("log", torch.log, kind="positive"),
    _unary("clamp", torch.clamp, min=-0.5, max=0.5),
    LadderOp("where", "elementwise", torch.where,
             _size_rungs(kinds=("bool", "normal", "normal")), grad=(1, 2), source="size ladder"),
)

REDUCTIONS = (
    _reduction("sum", torch.sum, over="the whole tensor to one number"),
    _reduction("mean", torch.mean, dim=-1),
    _reduction("amax", torch.amax, dim=-1),
    _reduction("softmax", torch.softmax, dim=-1),
    _reduction("log_softmax", torch.log_softmax, dim=-1),
    _reduction("argmax", torch.argmax, grad=False, dim=-1),
    _reduction("cumsum", torch.cumsum, dim=-1),
)


def _matmul_rungs():
    return tuple(Rung(inputs=(TensorSpec((n, n)), TensorSpec((n, n))), largest=n * n,
                      flops=2.0 * n ** 3, label=f"n={n}")
                 for n in (64, 128, 256, 512, 1024, 2048, 4096, 8192))


def _rfft_rungs():
    # 5/2 n log2 n: the usual count for a real FFT (half a complex one).
    return tuple(Rung(inputs=(TensorSpec((n,)),), largest=n, flops=2.5 * n * math.log2(n))
                 for n in (2 ** k for k in range(8, 27, 2)))


def _fft2_rungs():
    return tuple(Rung(inputs=(TensorSpec((n, n)),), largest=n * n,
                      flops=5.0 * n * n * math.log2(n * n), label=f"{n}x{n}")
                 for n in (32, 64, 128, 256, 512, 1024, 2048, 4096, 8192))


SIZE_LADDERS = (
    LadderOp("matmul", "matmul", torch.matmul, _matmul_rungs(), grad=(0, 1), backward_flops=2.0,
             source="square matmul ladder"),
    LadderOp("fft.rfft", "fft", torch.fft.rfft, _rfft_rungs(), grad=(0,),
             source="1-D signal ladder, powers of two (2^8 … 2^26)"),
    LadderOp("fft.fft2", "fft", torch.fft.fft2, _fft2_rungs(), grad=(0,),
             source="square image ladder (32² … 8192²)"),
)

# --------------------------------------------------------------- layer ladders


def _conv_out(size, k, s, p):
    return (size + 2 * p - k) // s + 1


def conv2d(name, source, c_in, c_out, hw, k, stride=1, padding=0, batches=BATCHES):
    """A conv2d layer (weight and bias inputs) at one spatial size, over a batch ladder."""
    out_hw = _conv_out(hw, k, stride, padding)
    rungs = []
    for b in batches:
        x = TensorSpec((b, c_in, hw, hw))
        w = TensorSpec((c_out, c_in, k, k))
        flops = 2.0 * b * c_out * out_hw * out_hw * c_in * k * k
        rungs.append(Rung(inputs=(x, w, TensorSpec((c_out,))), batch=b,
                          largest=max(x.numel, b * c_out * out_hw * out_hw), flops=flops, label=f"b{b}"))
    return LadderOp(name, "conv", F.conv2d, tuple(rungs), kwargs=dict(stride=stride, padding=padding),
                    grad=(0, 1, 2), backward_flops=2.0, source=source)


def conv3d(name, source, c_in, c_out, dhw, k, stride, padding, batches):
    d, h, w = dhw
    od, oh, ow = (_conv_out(n, kk, s, p) for n, kk, s, p in zip(dhw, k, stride, padding))
    rungs = []
    for b in batches:
        x = TensorSpec((b, c_in, d, h, w))
        out = b * c_out * od * oh * ow
        rungs.append(Rung(inputs=(x, TensorSpec((c_out, c_in) + tuple(k)), TensorSpec((c_out,))), batch=b,
                          largest=max(x.numel, out), flops=2.0 * out * c_in * math.prod(k), label=f"b{b}"))
    return LadderOp(name, "conv", F.conv3d, tuple(rungs), kwargs=dict(stride=stride, padding=padding),
                    grad=(0, 1, 2), backward_flops=2.0, source=source)


def linear(name, source, tokens, d_in, d_out, batches=BATCHES, family="linear"):
    """A linear layer over `tokens` positions per sample (1 for a classifier head)."""
    rungs = []
    for b in batches:
        lead = (b, tokens) if tokens > 1 else (b,)
        x = TensorSpec(lead + (d_in,))
        m = b * tokens
        rungs.append(Rung(inputs=(x, TensorSpec((d_out, d_in)), TensorSpec((d_out,))), batch=b,
                          largest=max(m * d_in, m * d_out, d_in * d_out), flops=2.0 * m * d_in * d_out,
                          label=f"b{b}"))
    return LadderOp(name, family, F.linear, tuple(rungs), grad=(0, 1, 2), backward_flops=2.0, source=source)


def batch_norm(name, source, channels, spatial, batches=BATCHES):
    """Training-mode batch norm (batch statistics, running stats updated), 2-D or 3-D."""
    c = (channels,)
    rungs = tuple(Rung(inputs=(TensorSpec((b, channels) + spatial), TensorSpec(c), TensorSpec(c, "positive"),
                               TensorSpec(c, "positive"), TensorSpec(c)),
                       batch=b, largest=b * channels * math.prod(spatial), label=f"b{b}")
                  for b in batches)
    return LadderOp(name, "norm", F.batch_norm, rungs, kwargs=dict(training=True), grad=(0, 3, 4),
                    source=source)


def layer_norm(name, source, d, seqs_batches):
    rungs = tuple(Rung(inputs=(TensorSpec((b, s, d)), TensorSpec((d,), "positive"), TensorSpec((d,))),
                       batch=b, largest=b * s * d, label=f"b{b} s{s}")
                  for b, s in seqs_batches)
    return LadderOp(name, "norm", _layer_norm, rungs, grad=(0, 1, 2), source=source)


def _layer_norm(x, weight, bias):
    return F.layer_norm(x, weight.shape, weight, bias)


def sdpa(name, source, heads, head_dim, seqs_batches):
    rungs = []
    for b, s in seqs_batches:
        q = TensorSpec((b, heads, s, head_dim))
        # QK^T and PV: two (s × d) · (d × s)-sized products per head.
        rungs.append(Rung(inputs=(q, q, q), batch=b, largest=max(q.numel, b * heads * s * s),
                          flops=4.0 * b * heads * s * s * head_dim, label=f"b{b} s{s}"))
    return LadderOp(name, "attention", F.scaled_dot_product_attention, tuple(rungs), grad=(0, 1, 2),
                    backward_flops=2.5, source=source)


def embedding(name, source, vocab, dim, index_shape):
    """index_shape(b) -> the index tensor's shape at batch b."""
    rungs = []
    for b in BATCHES:
        idx = TensorSpec(index_shape(b), "index", high=vocab)
        rungs.append(Rung(inputs=(idx, TensorSpec((vocab, dim))), batch=b,
                          largest=max(vocab * dim, idx.numel * dim), label=f"b{b}"))
    return LadderOp(name, "embedding", F.embedding, tuple(rungs), grad=(1,),
                    bytes_moved=_embedding_bytes, source=source)


def _embedding_bytes(rung, itemsize):
    idx = rung.inputs[0].numel
    return idx * 8 + 2 * idx * rung.inputs[1].shape[1] * itemsize   # indices, gathered rows, output


def _lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh):
    return torch.lstm_cell(x, (h, c), w_ih, w_hh, b_ih, b_hh)


def _lstm_layer(x, h, c, w_ih, w_hh, b_ih, b_hh):
    # The op nn.LSTM calls: one layer, unidirectional, sequence-first.
    return torch.lstm(x, (h, c), (w_ih, w_hh, b_ih, b_hh), True, 1, 0.0, True, False, False)


def lstm(name, source, hidden, seq, batches=BATCHES):
    """seq=None: one step of an LSTM cell; otherwise a whole layer over `seq` steps."""
    rungs = []
    for b in batches:
        x = TensorSpec((b, hidden) if seq is None else (seq, b, hidden))
        state = TensorSpec((b, hidden) if seq is None else (1, b, hidden))
        weights = (TensorSpec((4 * hidden, hidden)), TensorSpec((4 * hidden, hidden)),
                   TensorSpec((4 * hidden,)), TensorSpec((4 * hidden,)))
        steps = 1 if seq is None else seq
        rungs.append(Rung(inputs=(x, state, state) + weights, batch=b,
                          largest=max(x.numel, steps * b * 4 * hidden),
                          flops=2.0 * steps * b * 2 * hidden * 4 * hidden, label=f"b{b}"))
    return LadderOp(name, "rnn", _lstm_cell if seq is None else _lstm_layer, tuple(rungs),
                    grad=(0, 3, 4, 5, 6), backward_flops=2.0, source=source)


def _per_batch(name, family, fn, source, shape, batches=BATCHES, out_per_sample=None, grad=(0,), **kwargs):
    """A single-input layer whose input is (batch,) + shape."""
    rungs = tuple(Rung(inputs=(TensorSpec((b,) + shape),), batch=b,
                       largest=b * max(math.prod(shape), out_per_sample or 0), label=f"b{b}")
                  for b in batches)
    return LadderOp(name, family, fn, rungs, kwargs=kwargs, grad=grad, source=source)


def _seq_batches(seqs, batches=(1, 8, 32)):
    return tuple(sorted(((b, s) for b in batches for s in seqs), key=lambda bs: (bs[0] * bs[1], bs[0])))


R50 = "ResNet-50 (torchvision resnet50, ImageNet 224x224)"
RESNET50 = (
    conv2d("resnet50.conv1", f"{R50}: stem conv1, 7x7 stride 2, 3->64 at 224x224", 3, 64, 224, 7, 2, 3),
    batch_norm("resnet50.bn1", f"{R50}: stem bn1, 64 channels at 112x112", 64, (112, 112)),
    _per_batch("resnet50.maxpool", "pool", F.max_pool2d, f"{R50}: stem maxpool 3x3 stride 2, 64 channels at 112x112",
               (64, 112, 112), kernel_size=3, stride=2, padding=1),
    conv2d("resnet50.layer1.conv2", f"{R50}: layer1 bottleneck conv2, 3x3 64->64 at 56x56", 64, 64, 56, 3, 1, 1),
    conv2d("resnet50.layer2.conv2", f"{R50}: layer2 bottleneck conv2, 3x3 128->128 at 28x28", 128, 128, 28, 3, 1, 1),
    conv2d("resnet50.layer3.conv2", f"{R50}: layer3 bottleneck conv2, 3x3 256->256 at 14x14", 256, 256, 14, 3, 1, 1),
    conv2d("resnet50.layer4.conv2", f"{R50}: layer4 bottleneck conv2, 3x3 512->512 at 7x7", 512, 512, 7, 3, 1, 1),
    conv2d("resnet50.layer1.conv1", f"{R50}: layer1 bottleneck conv1 (blocks 2-3), 1x1 256->64 at 56x56",
           256, 64, 56, 1),
    conv2d("resnet50.layer1.conv3", f"{R50}: layer1 bottleneck conv3, 1x1 64->256 at 56x56", 64, 256, 56, 1),
    conv2d("resnet50.layer3.conv1", f"{R50}: layer3 bottleneck conv1 (blocks 2-6), 1x1 1024->256 at 14x14",
           1024, 256, 14, 1),
    _per_batch("resnet50.avgpool", "pool", F.adaptive_avg_pool2d, f"{R50}: avgpool, 2048 channels 7x7 -> 1x1",
               (2048, 7, 7), output_size=1),
    linear("resnet50.fc", f"{R50}: fc classifier, 2048->1000", 1, 2048, 1000),
)

BERT = "BERT-base (bert-base-uncased: hidden 768, 12 heads x 64, FFN 3072, vocab 30522)"
BERT_SB = _seq_batches((128, 512))


def _bert_linear(name, layer, d_in, d_out):
    # Linear cost depends only on tokens, so (batch, seq) rungs are ordered by tokens.
    rungs = tuple(Rung(inputs=(TensorSpec((b, s, d_in)), TensorSpec((d_out, d_in)), TensorSpec((d_out,))),
                       batch=b, largest=b * s * max(d_in, d_out), flops=2.0 * b * s * d_in * d_out,
                       label=f"b{b} s{s}")
                  for b, s in BERT_SB)
    return LadderOp(name, "linear", F.linear, rungs, grad=(0, 1, 2), backward_flops=2.0,
                    source=f"{BERT}: {layer}, seq 128 and 512")


BERT_LAYER = (
    _bert_linear("bert.attention.qkv", "self-attention Q, K, V projections fused (768->2304)", 768, 2304),
    _bert_linear("bert.intermediate.dense", "FFN up-projection 768->3072", 768, 3072),
    _bert_linear("bert.output.dense", "FFN down-projection 3072->768", 3072, 768),
    layer_norm("bert.layernorm", f"{BERT}: LayerNorm over 768, seq 128 and 512", 768, BERT_SB),
    LadderOp("bert.attention.softmax", "attention", torch.softmax,
             tuple(Rung(inputs=(TensorSpec((b, 12, s, s)),), batch=b, largest=b * 12 * s * s, label=f"b{b} s{s}")
                   for b, s in BERT_SB),
             kwargs=dict(dim=-1), grad=(0,), source=f"{BERT}: softmax over the attention scores (b, 12, s, s)"),
    sdpa("bert.attention.sdpa", f"{BERT}: scaled_dot_product_attention, 12 heads x 64, seq 128 and 512",
         12, 64, BERT_SB),
    embedding("bert.embeddings.word", f"{BERT}: word embeddings 30522x768 at seq 128", 30522, 768,
              lambda b: (b, 128)),
)

VIT = "ViT-B/16 (torchvision vit_b_16: 224x224, 16x16 patches, 196+1 = 197 tokens, hidden 768, 12 heads)"
VIT_BLOCK = (
    conv2d("vit_b16.patch_embed", f"{VIT}: conv_proj patch embedding, 16x16 stride 16, 3->768", 3, 768, 224, 16, 16),
    layer_norm("vit_b16.ln_1", f"{VIT}: encoder block ln_1, 197 tokens x 768", 768,
               tuple((b, 197) for b in BATCHES)),
    sdpa("vit_b16.attention.sdpa", f"{VIT}: self-attention, 12 heads x 64 over 197 tokens", 12, 64,
         tuple((b, 197) for b in BATCHES)),
    linear("vit_b16.mlp.fc1", f"{VIT}: encoder block MLP first linear, 768->3072 over 197 tokens", 197, 768, 3072),
)

LSTM_LM = ("LSTM word language model (pytorch/examples word_language_model on WikiText-2: "
           "33278 tokens, emsize = nhid = 650, bptt 35)")
LSTM_MODEL = (
    embedding("lstm_lm.encoder", f"{LSTM_LM}: encoder embedding 33278x650, (35, batch) indices", 33278, 650,
              lambda b: (35, b)),
    lstm("lstm_lm.cell", f"{LSTM_LM}: one LSTM cell step, 650->650", 650, None),
    lstm("lstm_lm.rnn", f"{LSTM_LM}: one LSTM layer over 35 steps, 650 hidden", 650, 35),
    linear("lstm_lm.decoder", f"{LSTM_LM}: decoder 650->33278 over 35 steps", 35, 650, 33278),
)

R3D = "R3D-18 (torchvision r3d_18, Kinetics clips 3x16x112x112)"
RAFT = "RAFT (optical flow, Sintel 368x496 at 1/8: 46x62 = 2852 positions, 9x9 lookup window)"


def _grid_sample_rungs(batches=(1, 8, 32)):
    # CorrBlock samples each position's correlation map (1, 46, 62) at a 9x9 window.
    n = 46 * 62
    return tuple(Rung(inputs=(TensorSpec((b * n, 1, 46, 62)), TensorSpec((b * n, 9, 9, 2), "unit")), batch=b,
                      largest=b * n * 46 * 62, label=f"b{b}")
                 for b in batches)


OTHER_LAYERS = (
    _per_batch("densenet121.transition1.pool", "pool", F.avg_pool2d,
               "DenseNet-121 (torchvision densenet121): transition1 avg_pool 2x2 stride 2, 128 channels at 56x56",
               (128, 56, 56), kernel_size=2, stride=2),
    _per_batch("deeplabv3.upsample", "resample", F.interpolate,
               "DeepLabV3-ResNet50 (torchvision deeplabv3_resnet50): bilinear upsampling of 21 class logits, "
               "28x28 (output stride 8) -> 224x224", (21, 28, 28), out_per_sample=21 * 224 * 224,
               size=(224, 224), mode="bilinear", align_corners=False),
    conv3d("r3d_18.stem", f"{R3D}: stem conv3d (3,7,7) stride (1,2,2), 3->64 at 16x112x112", 3, 64, (16, 112, 112),
           (3, 7, 7), (1, 2, 2), (1, 3, 3), batches=(1, 8, 32)),
    conv3d("r3d_18.layer1.conv", f"{R3D}: layer1 conv3d 3x3x3, 64->64 at 16x56x56", 64, 64, (16, 56, 56),
           (3, 3, 3), (1, 1, 1), (1, 1, 1), batches=(1, 8, 32)),
    batch_norm("r3d_18.bn", f"{R3D}: BatchNorm3d, 64 channels at 16x56x56", 64, (16, 56, 56), batches=(1, 8, 32)),
    LadderOp("raft.corr_lookup", "resample", F.grid_sample, _grid_sample_rungs(),
             kwargs=dict(mode="bilinear", padding_mode="zeros", align_corners=True), grad=(0, 1),
             source=f"{RAFT}: CorrBlock bilinear lookup, grid_sample of (b*2852, 1, 46, 62) at 9x9 points"),
)

DEFAULT = ELEMENTWISE + REDUCTIONS + SIZE_LADDERS + RESNET50 + BERT_LAYER + VIT_BLOCK + LSTM_MODEL + OTHER_LAYERS
BY_NAME = {r.name: r for r in DEFAULT}
FAMILIES = tuple(dict.fromkeys(r.family for r in DEFAULT))


def select(names=None, families=None, records=DEFAULT):
    """Records by name (exact) and/or family; unknown names raise KeyError."""
    if names:
        wanted = [BY_NAME[n] for n in names]
    else:
        wanted = list(records)
    if families:
        wanted = [r for r in wanted if r.family in families]
    return wanted
