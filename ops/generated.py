"""Generated samples: the MPS kernels no OpInfo sample and no module probe reaches.

Each record names one aten overload (`all.out`, `__ilshift__.Scalar`,
`reflection_pad2d_backward.grad_input`) and is called through
`torch.ops.aten.<name>.<overload>` itself, so the aten op a case records is
that function. Its arguments are filled from the overload's schema: a tensor
gets a small random tensor of the case's dtype, an out= tensor one sized as
below, an optional argument None, an argument with a default its default; what the schema alone cannot make valid (indices,
sorted boundaries, shapes that must agree, a grad_output of the forward's
shape) is given per function in GENERATED, a compact table of overrides.

An out= tensor is made with the shape and dtype the overload's functional form
(`nonzero_static` for `nonzero_static.out`) returns on the CPU for the same
arguments, never empty: how a kernel resizes an empty out= tensor is no
contract anyone relies on, so no verdict may rest on it.

A written argument (in-place `self`, out=, a helper's buffers) is cloned
inside the call, so the CPU reference and the target each write a fresh
copy; what a kernel writes without returning it (`_cummax_helper`'s values,
`_fused_adam_`'s parameters, batch norm's running stats) is returned after
its result, so it is compared too. Random kernels are judged by the
distribution check of the OpInfo op whose draws run the same kernel
(`judge_as`), and left out where none does (coverage says why).

Records are ModuleProbes (ops/modules.py) of source 'generated', op ids
`generated.<aten function>`: the engine runs them as any op.
"""
import torch

from mpsprobe.ops.modules import BF16, F16, F32, ModuleProbe

SOURCE = "generated"
PREFIX = "generated."

I64, I32, U8, BOOL = torch.int64, torch.int32, torch.uint8, torch.bool
FLOATS = (F32, F16, BF16)
INTS = (I64, I32, U8)


# --- argument makers: maker(dtype, filled) -> value, `filled` the arguments made so far ----

def rand(*shape, low=-2.0, high=2.0):
    """Values in [low, high) in the case's dtype (integers for an integer dtype)."""
    def make(dtype, filled):
        if dtype.is_floating_point:
            return (torch.rand(shape) * (high - low) + low).to(dtype)
        return torch.randint(int(low), int(high), shape).to(dtype)
    return make


def distinct(*shape):
    """Distinct values (no ties: one sorted order, one median, one maximum), exact in half precision."""
    n = 1
    for s in shape:
        n *= s
    return lambda dtype, filled: (torch.randperm(n).reshape(shape) - n // 2).to(dtype)


def probs(*shape):
    return rand(*shape, low=0.1, high=0.9)


def positive(*shape):
    return rand(*shape, low=0.5, high=2.0)


def some_zeros(*shape):
    """0s and 1s, in the case's dtype, the first row all 1s: all/any, counts and nonzero have
    both answers to give."""
    def make(dtype, filled):
        t = torch.randint(0, 2, shape)
        t[0] = 1
        return t.to(dtype)
    return make


def small_ints(*shape, high=4):
    """Integers in [0, high) in the case's dtype: repeats, for unique, isin and stable sorts."""
    return lambda dtype, filled: torch.randint(0, high, shape).to(dtype)


def index(*shape, high):
    return lambda dtype, filled: torch.randint(0, high, shape)


def picks(n, k):
    """k distinct indices of n (no index written twice)."""
    return lambda dtype, filled: torch.randperm(n)[:k]


def mask(*shape):
    return lambda dtype, filled: torch.rand(shape) < 0.5


def scalar_tensor(value=None):
    """A 0-dim tensor: a fill value, or the grad_output of a mean-reduced loss."""
    return lambda dtype, filled: (torch.tensor(value) if value is not None else torch.rand(()) + 0.5).to(dtype)


def boundaries(n):
    """Sorted boundaries for bucketize/searchsorted/histogram."""
    return lambda dtype, filled: torch.linspace(-1.5, 1.5, n).to(dtype)


class _Out:
    """An out= tensor still to make: shaped and typed as the functional form's matching result."""


def out():
    return _Out()


def sized(*shape, dtype=None):
    """A zeroed buffer of a given size (helpers that expect their outputs sized)."""
    return lambda case_dtype, filled: torch.zeros(shape, dtype=dtype or case_dtype)


def forward_of(function, *names, item=None):
    """The output of another aten function on arguments already made (indices, buffers)."""
    def make(dtype, filled):
        result = _overload(function)(*[filled[n] for n in names])
        return result[item] if item is not None else result
    return make


def grad_like(function, *names):
    """A random grad_output of the shape `function` returns on the arguments made so far."""
    def make(dtype, filled):
        result = _overload(function)(*[filled[n] for n in names])
        result = result[0] if isinstance(result, (tuple, list)) else result
        return torch.randn(result.shape).to(dtype)
    return make


# --- the table: aten function -> overrides; dtypes, judging and notes where not the default ---

class G:
    """One generated record: the aten function, argument overrides, the dtypes it runs."""

    # `record`, not `self`: many schemas have an argument named self.
    def __init__(record, function, dtypes=FLOATS, judge_as=None, call=None, note="", order=(), out_of=None,
                 on_device=None, **args):
        record.function, record.dtypes, record.judge_as, record.call = function, dtypes, judge_as, call
        record.note = note
        # Arguments only the device can size, made on it before each call: on_device(bound) -> bound.
        record.on_device = on_device
        # An out= overload reached by the out= pass of `out_of`'s call (its arguments made from
        # out_of's schema): a random kernel whose draws must go through the out= form itself.
        record.out_of = out_of
        record.order = order   # the sample's positional order, when not the schema's (a call that reorders)
        record.args = args     # made in this order; a name the schema lacks is a helper, not passed


NCHW, NCDHW = (1, 2, 4, 4), (1, 2, 3, 3, 3)
POOL3D = dict(self=rand(1, 2, 4, 4, 4), kernel_size=[2, 2, 2], stride=[2, 2, 2], padding=[0, 0, 0],
              dilation=[1, 1, 1], ceil_mode=False)
NLL2D = dict(self=rand(2, 3, 4, 4), target=index(2, 4, 4, high=3), weight=None, reduction=1, ignore_index=-100)
LOSS_GRAD = dict(grad_output=scalar_tensor(), self=rand(3, 4), target=rand(3, 4), reduction=1)


def _shift(name, dtypes=INTS, **args):
    return G(name, dtypes, self=small_ints(3, 4, high=16), **args)


def _pad(name, dims, backward=False, **extra):
    """reflection/replication padding, forward or backward, 2-D (N, C, H, W) or 3-D."""
    shape, padding = (NCHW, [1, 1, 2, 0]) if dims == 2 else (NCDHW, [1, 1, 1, 0, 0, 1])
    args = dict(self=rand(*shape), padding=padding)
    if backward:
        args["grad_output"] = grad_like(name.split("_backward")[0], "self", "padding")
    return G(name, **args, **extra)


def _upsample(name, dims):
    """Nearest/exact/bicubic-aa upsampling out=, or its backward from the output's size."""
    shape, size = (NCHW, [6, 5]) if dims == 2 else (NCDHW, [5, 4, 5])
    if "backward" in name:
        return G(name, grad_output=rand(*shape[:2], *size), output_size=size, input_size=list(shape))
    if "bicubic" in name:   # antialiased bicubic: the CPU's kernel is float32/float64 only
        return G(name, (F32,), self=rand(*shape), output_size=size, align_corners=False)
    return G(name, self=rand(*shape), output_size=size)


def _set_storage(x, source):
    return x.clone().set_(source.untyped_storage())


def _set_storage_offset(x, source, storage_offset, size, stride):
    return x.clone().set_(source.untyped_storage(), storage_offset, size, stride)


def _set_tensor(x, source):
    return x.clone().set_(source)


def _set_empty(x):
    return x.clone().set_()


def _is_set_to(x, other):
    same = torch.ops.aten.is_set_to.default(x, x)
    different = torch.ops.aten.is_set_to.default(x, other)
    return torch.tensor([same, different], device=x.device)


def _reserve_as_pytorch_makes_it(bound):
    """_batch_norm_with_update's reserve, sized as PyTorch's own functional form sizes it
    (torch/_decomp/decompositions.py, _get_batch_norm_reserve_tensor): cuDNN's reserve space
    where cuDNN runs the batch norm, an empty uint8 tensor elsewhere."""
    x = bound["input"]
    backend = torch._C._select_batch_norm_backend(x, bound["weight"], bound["bias"], bound["running_mean"],
                                                  bound["running_var"], True, bound["eps"])
    size = (torch._C._get_cudnn_batch_norm_reserve_space_size(x, True)
            if backend == torch._C._BatchNormBackend.Cudnn else 0)
    if bound["reserve"].numel() == size:   # the CPU's size: nothing to allocate (nor to record)
        return bound
    return dict(bound, reserve=torch.empty(size, dtype=torch.uint8, device=x.device))


def _native_dropout(x, p, train):
    """The dropped output (judged by dropout's distribution: on MPS F.dropout draws through this
    kernel); the mask is not compared."""
    return torch.ops.aten.native_dropout.default(x, p, train)[0]


def _normal(mean, std, **kwargs):
    return torch.normal(mean, std, **kwargs)


def _normal_number_mean(std, mean, **kwargs):
    """normal.float_Tensor with the std first, as OpInfo's normal.number_mean lays it out."""
    return torch.normal(mean, std, **kwargs)


def _fused(kind):
    """A fused optimizer step with its learning rate as a tensor: params, grads and states as
    lists, the step count and lr tensors; returns every list it writes."""
    overload = getattr(torch.ops.aten, f"_fused_{kind}_").tensor_lr

    def step(params, grads, states, steps, lr):
        params, grads = [p.clone() for p in params], [g.clone() for g in grads]
        states = [[s.clone() for s in group] for group in states]
        if kind == "sgd":
            overload(params, grads, states[0], weight_decay=0.01, momentum=0.9, lr=lr, dampening=0.0,
                     nesterov=True, maximize=False, is_first_step=False)
        else:
            overload(params, grads, states[0], states[1], [], steps, lr=lr, beta1=0.9, beta2=0.999,
                     weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False)
        return params, states
    step.__name__ = f"fused_{kind}_tensor_lr"
    return step


def _fused_inputs(kind):
    def build(dtype):
        shapes = [(4, 3), (7,)]
        params = [torch.randn(s).to(dtype) for s in shapes]
        grads = [torch.randn(s).to(dtype) for s in shapes]
        states = [[torch.rand(s).to(dtype) for s in shapes] for _ in range(1 if kind == "sgd" else 2)]
        steps = [torch.tensor(3.0) for _ in shapes]
        return params, (grads, states, steps, torch.tensor(0.01))
    return build


GENERATED = [
    # Checks: a true condition must pass without raising (the case's output is then True).
    G("_assert_async", self=scalar_tensor(1.0)),
    G("_assert_async.msg", self=scalar_tensor(1.0), assert_msg="generated check"),
    G("native_dropout", (F32,), judge_as="nn.functional.dropout", call=_native_dropout,
      input=rand(64, 64), p=0.3, train=True, note="judged by dropout's distribution; the mask is not compared"),
    G("all.out", FLOATS + (I64, BOOL), self=some_zeros(3, 4), dim=1, out=out()),
    G("binary_cross_entropy.out", self=probs(3, 4), target=probs(3, 4), out=out()),
    G("binary_cross_entropy_backward.grad_input", grad_output=scalar_tensor(), self=probs(3, 4),
      target=probs(3, 4), grad_input=out()),
    G("clamp_max.out", self=rand(3, 4), max=0.5, out=out()),
    G("count_nonzero.dim_IntList", FLOATS + (I64, BOOL), self=some_zeros(3, 4), dim=[1]),
    G("_cummax_helper", self=distinct(3, 4), values=sized(3, 4), indices=sized(3, 4, dtype=I64), dim=1),
    G("_cummin_helper", self=distinct(3, 4), values=sized(3, 4), indices=sized(3, 4, dtype=I64), dim=1),
    # embedding_bag's sum mode: bags [1 2 4] [] [5 4 3] [2 9] of a 10-row table.
    G("_embedding_bag_dense_backward", (F32, F16), grad=rand(4, 6),
      indices=lambda d, f: torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]),
      offset2bag=lambda d, f: torch.tensor([0, 0, 0, 2, 2, 2, 3, 3]),
      bag_size=lambda d, f: torch.tensor([3, 0, 3, 2]), maximum_indices=lambda d, f: torch.zeros(4, dtype=I64),
      num_weights=10, scale_grad_by_freq=False, mode=0, per_sample_weights=None),
    G("eye.m_out", FLOATS + (I64, BOOL), n=3, m=4, out=out()),
    G("fill_.Tensor", FLOATS + (I64,), self=rand(3, 4), value=scalar_tensor(1.5)),
    G("_index_put_impl_", self=rand(5, 4), indices=lambda d, f: [torch.randperm(5)[:3]], values=rand(3, 4)),
    G("isin.Tensor_Scalar_out", (F32, I64), elements=small_ints(3, 4), test_element=2, out=out()),
    G("isin.Scalar_Tensor_out", (F32, I64), element=2, test_elements=small_ints(3, 4), out=out()),
    G("_logcumsumexp", self=rand(3, 5), dim=1),
    G("_logcumsumexp.out", self=rand(3, 5), dim=1, out=out()),
    G("max_pool2d", self=distinct(1, 2, 4, 4), kernel_size=[2, 2],
      note="the CPU decomposes max_pool2d into max_pool2d_with_indices (coverage counts this record "
           "through ops/coverage.py's MPS-only dispatch table); MPS runs its own kernel"),
    G("median.dim_values", self=distinct(3, 5), dim=1, values=out(), indices=out()),
    G("nanmedian.dim_values", self=distinct(3, 5), dim=1, values=out(), indices=out()),
    G("_native_batch_norm_legit.no_stats", input=rand(2, 3, 4), weight=positive(3), bias=rand(3),
      training=True, momentum=0.1, eps=1e-5),
    # float32 only: for a half-precision input the CPU requires statistics outs of the input's
    # dtype and CUDA float32 ones (what each one's functional form returns), so no one call is valid
    # on both; the functional record above runs every dtype.
    G("_native_batch_norm_legit.no_stats_out", (F32,), input=rand(2, 3, 4), weight=positive(3), bias=rand(3),
      training=True, momentum=0.1, eps=1e-5, out=out(), save_mean=out(), save_invstd=out()),
    G("range.out", (F32, I64), start=0, end=5, step=1, out=out()),
    G("repeat_interleave.Tensor", (I64,), repeats=lambda d, f: torch.tensor([1, 0, 2, 3])),
    G("_reshape_alias", self=rand(3, 4), size=[4, 3], stride=[3, 1]),
    G("prod.int_out", self=rand(3, 4, low=0.5, high=1.5), dim=1, out=out()),
    G("_unique", FLOATS + (I64,), self=small_ints(12), sorted=True, return_inverse=True),
    G("unique_dim", FLOATS + (I64,), self=lambda d, f: torch.randint(0, 2, (6, 2)).to(d), dim=0,
      sorted=True, return_inverse=True, return_counts=True),
    G("unique_dim_consecutive", FLOATS + (I64,), self=lambda d, f: torch.randint(0, 2, (6, 2)).to(d), dim=0,
      return_inverse=True, return_counts=True),
    G("_standard_gamma_grad", (F32,), self=positive(3, 4), output=positive(3, 4)),
    G("_dirichlet_grad", (F32,), x=probs(3, 4), alpha=positive(3, 4), total=rand(3, 4, low=2.0, high=4.0)),
    G("_batch_norm_with_update.out", (F32,), input=rand(2, 3, 4), weight=positive(3), bias=rand(3),
      running_mean=lambda d, f: torch.zeros(3, dtype=d), running_var=lambda d, f: torch.ones(3, dtype=d),
      momentum=0.1, eps=1e-5, out=out(), save_mean=out(), save_invstd=out(), reserve=out(),
      on_device=_reserve_as_pytorch_makes_it),
    G("norm.dtype_out", (F32,), self=rand(3, 4), p=2, dim=[1], keepdim=False, dtype=F32, out=out()),
    G("set_.source_Storage", call=_set_storage, self=rand(3, 4), source=rand(6)),
    G("set_.source_Storage_storage_offset", call=_set_storage_offset, self=rand(3, 4), source=rand(9),
      storage_offset=2, size=[2, 3], stride=[3, 1]),
    G("set_.source_Tensor", call=_set_tensor, self=rand(3, 4), source=rand(2, 5)),
    G("set_", call=_set_empty, self=rand(3, 4)),
    G("is_set_to", (F32,), call=_is_set_to, self=rand(3, 4), tensor=rand(3, 4)),
    G("masked_fill_.Tensor", FLOATS + (I64,), self=rand(3, 4), mask=mask(3, 4), value=scalar_tensor(1.0)),
    G("index_fill_.int_Tensor", FLOATS + (I64,), self=rand(3, 4), dim=1, index=picks(4, 2),
      value=scalar_tensor(1.0)),
    G("scatter.reduce_out", (F32, I64), self=rand(3, 4), dim=1,
      index=lambda d, f: torch.stack([torch.randperm(4)[:2] for _ in range(3)]), src=rand(3, 2),
      reduce="add", out=out()),
    G("scatter.value_reduce_out", (F32, I64), self=rand(3, 4), dim=1,
      index=lambda d, f: torch.stack([torch.randperm(4)[:2] for _ in range(3)]), value=3,
      reduce="multiply", out=out()),
    _shift("__lshift__.Scalar", other=2), _shift("__lshift__.Tensor", other=small_ints(3, 4)),
    _shift("__ilshift__.Scalar", other=2), _shift("__ilshift__.Tensor", other=small_ints(3, 4)),
    _shift("__rshift__.Scalar", other=2), _shift("__rshift__.Tensor", other=small_ints(3, 4)),
    _shift("__irshift__.Scalar", other=2), _shift("__irshift__.Tensor", other=small_ints(3, 4)),
    G("nonzero_static.out", FLOATS + (I64, BOOL), self=some_zeros(3, 4), size=8, out=out()),
    G("_cholesky_solve_helper", (F32,), self=rand(3, 2),
      A=lambda d, f: (torch.rand(3, 3).tril() + 2 * torch.eye(3)).to(d), upper=False),
    G("histogram.bins_tensor_out", (F32,), self=rand(20), bins=boundaries(5), hist=out(), bin_edges=out()),
    G("histogram.bins_tensor", (F32,), self=rand(20), bins=boundaries(5)),
    G("_histogramdd_from_bin_tensors", (F32,), self=rand(20, 2),
      bins=lambda d, f: [torch.linspace(-1.5, 1.5, 4).to(d), torch.linspace(-2, 2, 3).to(d)]),
    G("remainder.Scalar_Tensor", (F32, I64), self=5, other=lambda d, f: torch.randint(1, 4, (3, 4)).to(d)),
    G("sort.values_stable", FLOATS + (I64,), self=small_ints(3, 6), stable=True, values=out(),
      indices=out(), note="ties sorted stably: one answer"),
    G("normal.Tensor_float", (F32,), judge_as="normal", mean=rand(64, 64), std=0.5),
    G("normal.float_Tensor", (F32,), judge_as="normal.number_mean", call=_normal_number_mean,
      order=("std", "mean"), std=positive(64, 64), mean=0.5),
    G("normal.Tensor_float_out", (F32,), judge_as="normal", call=_normal, out_of="normal.Tensor_float",
      mean=rand(64, 64), std=0.5, note="reached and judged in the out= pass (torch.normal(..., out=))"),
    G("normal.float_Tensor_out", (F32,), judge_as="normal.number_mean", call=_normal_number_mean,
      out_of="normal.float_Tensor", order=("std", "mean"), std=positive(64, 64), mean=0.5,
      note="reached and judged in the out= pass (torch.normal(..., out=))"),
    G("bucketize.Scalar", (F32, I64), self=1, boundaries=lambda d, f: torch.tensor([-1, 0, 1, 2, 4]).to(d)),
    G("searchsorted.Scalar", (F32, I64), sorted_sequence=lambda d, f: torch.tensor([-1, 0, 1, 2, 4]).to(d),
      self=1),
    G("searchsorted.Scalar_out", (F32, I64), sorted_sequence=lambda d, f: torch.tensor([-1, 0, 1, 2, 4]).to(d),
      self=1, out=out()),
    G("mse_loss_backward.grad_input", **LOSS_GRAD, grad_input=out()),
    G("nll_loss2d_forward.output", (F32, BF16), **NLL2D, output=out(), total_weight=out()),
    G("nll_loss2d_forward", (F32, BF16), **NLL2D),
    G("nll_loss2d_backward.grad_input", (F32, BF16), grad_output=scalar_tensor(), **NLL2D,
      total_weight=forward_of("nll_loss2d_forward", *NLL2D, item=1), grad_input=out()),
    G("nll_loss2d_backward", (F32, BF16), grad_output=scalar_tensor(), **NLL2D,
      total_weight=forward_of("nll_loss2d_forward", *NLL2D, item=1)),
    G("smooth_l1_loss_backward.grad_input", **LOSS_GRAD, beta=1.0, grad_input=out()),
    G("huber_loss.out", self=rand(3, 4), target=rand(3, 4), out=out()),
    G("huber_loss_backward.out", **LOSS_GRAD, delta=1.0, grad_input=out()),
    G("glu_backward.grad_input", grad_output=rand(3, 2), self=rand(3, 4), dim=1, grad_input=out()),
    G("hardtanh.out", self=rand(3, 4), out=out()),
    G("hardtanh_backward.grad_input", grad_output=rand(3, 4), self=rand(3, 4), min_val=-1, max_val=1,
      grad_input=out()),
    G("hardswish.out", self=rand(3, 4, low=-4, high=4), out=out()),
    G("log_sigmoid_backward.grad_input", grad_output=rand(3, 4), self=rand(3, 4),
      buffer=forward_of("log_sigmoid_forward", "self", item=1), grad_input=out()),
    G("adaptive_avg_pool2d.out", self=rand(1, 2, 6, 6), output_size=[3, 4], out=out()),
    G("max_pool3d_with_indices.out", **dict(POOL3D, self=distinct(1, 2, 4, 4, 4)), out=out(), indices=out()),
    G("max_pool3d_with_indices_backward.grad_input", grad_output=rand(1, 2, 2, 2, 2),
      **dict(POOL3D, self=distinct(1, 2, 4, 4, 4)),
      indices=forward_of("max_pool3d_with_indices", *POOL3D, item=1), grad_input=out()),
    # Unpooling what max pooling (2x2, stride 2) kept: `pooled` and `kernel` are helpers, not arguments.
    G("max_unpool2d.out", pooled=distinct(1, 2, 4, 4), kernel=[2, 2],
      self=forward_of("max_pool2d_with_indices", "pooled", "kernel", item=0),
      indices=forward_of("max_pool2d_with_indices", "pooled", "kernel", item=1), output_size=[4, 4], out=out()),
    G("max_unpool3d.out", pooled=distinct(1, 2, 4, 4, 4), kernel=[2, 2, 2],
      self=forward_of("max_pool3d_with_indices", "pooled", "kernel", item=0),
      indices=forward_of("max_pool3d_with_indices", "pooled", "kernel", item=1), output_size=[4, 4, 4],
      stride=[2, 2, 2], padding=[0, 0, 0], out=out()),
    _pad("reflection_pad2d.out", 2, out=out()), _pad("reflection_pad2d", 2),
    _pad("reflection_pad2d_backward.grad_input", 2, backward=True, grad_input=out()),
    _pad("reflection_pad2d_backward", 2, backward=True),
    _pad("reflection_pad3d.out", 3, out=out()),
    _pad("reflection_pad3d_backward.grad_input", 3, backward=True, grad_input=out()),
    _pad("replication_pad2d_backward.grad_input", 2, backward=True, grad_input=out()),
    _pad("replication_pad3d.out", 3, out=out()),
    _pad("replication_pad3d_backward.grad_input", 3, backward=True, grad_input=out()),
    _pad("replication_pad3d_backward", 3, backward=True),
    _upsample("_upsample_bicubic2d_aa.out", 2), _upsample("upsample_nearest2d.out", 2),
    _upsample("_upsample_nearest_exact2d.out", 2), _upsample("upsample_nearest2d_backward.grad_input", 2),
    _upsample("_upsample_nearest_exact2d_backward.grad_input", 2),
    _upsample("upsample_nearest3d.out", 3), _upsample("_upsample_nearest_exact3d.out", 3),
    _upsample("upsample_nearest3d_backward.grad_input", 3),
    _upsample("_upsample_nearest_exact3d_backward.grad_input", 3),
    # col2im: 2 channels of 2x2 patches, 4 blocks, into a 4x4 image; im2col the reverse.
    G("col2im.out", self=rand(1, 8, 4), output_size=[4, 4], kernel_size=[2, 2], dilation=[1, 1],
      padding=[0, 0], stride=[2, 2], out=out()),
    G("im2col.out", self=rand(1, 2, 4, 4), kernel_size=[2, 2], dilation=[1, 1], padding=[0, 0],
      stride=[2, 2], out=out()),
]


# --- from a record to a probe -------------------------------------------------------------

def _overload(function):
    """torch.ops.aten's overload for 'name.overload' ('name': the default overload)."""
    name, _, overload = function.partition(".")
    return getattr(getattr(torch.ops.aten, name), overload or "default")


def _is_written(arg):
    return arg.alias_info is not None and arg.alias_info.is_write


def _unset(arg, dtype):
    """A value for an argument the table leaves to the schema."""
    if arg.has_default_value():
        return arg.default_value
    kind = str(arg.type)
    if kind.endswith("?"):
        return None
    if kind == "Tensor":
        return _Out() if _is_written(arg) else rand(3, 4)(dtype, {})
    simple = {"int": 1, "SymInt": 1, "float": 0.5, "bool": False, "Scalar": 2, "ScalarType": dtype}
    if kind in simple:
        return simple[kind]
    raise ValueError(f"no value for {arg.name} ({kind}): give it in the table")


def _outs(schema):
    """The out= arguments: written and returned (running statistics are written, not returned)."""
    written = [a for a in schema.arguments if _is_written(a)]
    return [next(a for a in written if set(a.alias_info.before_set) & set(r.alias_info.before_set))
            for r in schema.returns if r.alias_info and r.alias_info.is_write]


def _functional(schema):
    """The overload of the same function that returns what the out= overload `schema` writes:
    one return per out= tensor, every other argument of `schema` taken with the same type, none
    written that `schema` does not write too."""
    outs = {a.name for a in _outs(schema)}
    given = {a.name: str(a.type) for a in schema.arguments if a.name not in outs}
    packet = getattr(torch.ops.aten, schema.name.split("::")[-1])
    for name in packet.overloads():
        candidate = getattr(packet, name)._schema
        arguments = {a.name: a for a in candidate.arguments}
        if (len(candidate.returns) == len(outs) and set(given) <= set(arguments)
                and all(str(arguments[n].type) == t for n, t in given.items())
                and all(a.name in given or a.has_default_value() for a in candidate.arguments)
                and not any(_is_written(a) and not _is_written(_by_name(schema, a.name)) for a in candidate.arguments)):
            return getattr(packet, name)
    raise ValueError(f"{schema.name}.{schema.overload_name}: no functional form to size its out= tensors")


def _by_name(schema, name):
    return next(a for a in schema.arguments if a.name == name)


def _sized_outs(schema, filled, dtype):
    """Each out= tensor still to make, as the functional form returns it on the CPU (shape and
    dtype); a factory's (eye, range) in the case's dtype, which its out= tensor chooses. What the
    functional writes (running statistics) it writes into copies."""
    functional = _functional(schema)
    names = {a.name for a in functional._schema.arguments}
    given = {n: _fresh(v) for n, v in filled.items() if n in names}
    if "dtype" in names and "dtype" not in given:
        given["dtype"] = dtype
    result = functional(**given)
    results = result if isinstance(result, (tuple, list)) else (result,)
    for made, arg in zip(results, _outs(schema)):
        filled[arg.name] = torch.zeros(made.shape, dtype=made.dtype)


def _arguments(record, schema, dtype):
    """(positional values, keyword values) of one call, each made from the table or the schema."""
    filled = {}
    for name, value in record.args.items():
        filled[name] = value(dtype, filled) if callable(value) else value
    for arg in schema.arguments:
        if arg.name not in filled:
            filled[arg.name] = _unset(arg, dtype)
    if any(isinstance(v, _Out) for v in filled.values()):
        _sized_outs(schema, filled, dtype)
    names = [a.name for a in schema.arguments if not a.kwarg_only]
    names = list(record.order) + [n for n in names if n not in record.order]
    return [filled[n] for n in names], {a.name: filled[a.name] for a in schema.arguments if a.kwarg_only}


def _fresh(value):
    if isinstance(value, torch.Tensor):
        return value.clone()
    if isinstance(value, (list, tuple)):
        return type(value)(_fresh(v) for v in value)
    return value


def _caller(function, schema, on_device=None):
    """The overload called on the schema's arguments, each written one fresh; what it writes
    without returning comes back after its result (a check with no output: True, having passed)."""
    overload = _overload(function)
    positional = [a.name for a in schema.arguments if not a.kwarg_only]
    returned = set()
    for r in schema.returns:
        returned |= set(r.alias_info.before_set) if r.alias_info else set()
    written = [a.name for a in schema.arguments if _is_written(a)]
    unreturned = [a.name for a in schema.arguments
                  if _is_written(a) and not set(a.alias_info.before_set) & returned]

    def call(*args, **kwargs):
        bound = dict(zip(positional, args), **kwargs)
        bound = {n: _fresh(v) if n in written else v for n, v in bound.items()}
        if on_device:
            bound = on_device(bound)
        result = overload(*[bound[n] for n in positional], **{n: bound[n] for n in kwargs})
        extra = tuple(bound[n] for n in unreturned)
        if result is None or (isinstance(result, tuple) and not result):
            if extra:
                return extra
            device = next(v.device for v in bound.values() if isinstance(v, torch.Tensor))
            return torch.ones((), dtype=torch.bool, device=device)
        return (*result, *extra) if isinstance(result, tuple) else ((result, *extra) if extra else result)
    call.__name__ = function.replace(".", "_")
    return call


def _builder(record, schema):
    def build(dtype, requires_grad):
        positional, keywords = _arguments(record, schema, dtype)
        return [(positional[0], positional[1:], keywords)]
    return build


def _probe(record):
    schema = _overload(record.out_of or record.function)._schema
    return ModuleProbe(f"{PREFIX}{record.function}", record.call or _caller(record.function, schema, record.on_device),
                       _builder(record, schema), tuple(record.dtypes), (record.function,),
                       judge_as=record.judge_as, note=record.note, source=SOURCE,
                       supports_out=record.out_of is not None)


def _fused_probe(kind):
    build = _fused_inputs(kind)
    return ModuleProbe(f"{PREFIX}_fused_{kind}_.tensor_lr", _fused(kind),
                       lambda dtype, requires_grad: [(*build(dtype), {})],
                       (F32, F16), (f"_fused_{kind}_.tensor_lr",), source=SOURCE)


def probes():
    """Every generated record, in a stable order (the table's, then the fused optimizer steps)."""
    found = []
    for record in GENERATED:
        try:
            found.append(_probe(record))
        except (AttributeError, RuntimeError):
            continue   # an overload this torch does not have: coverage lists the function as left
    return found + [_fused_probe(kind) for kind in ("adam", "adamw", "sgd")]
