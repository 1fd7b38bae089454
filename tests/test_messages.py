"""The MPS message catalogue: every family read right from its real text.

The texts are PyTorch's own, copied from its source at the tags each family
names (placeholders filled the way `c10::str` fills them: pieces joined with no
separator, `op.schema().operator_name()` printed as "aten::name.overload",
ScalarType printed as "Long", "Double", ...), or from public bug reports.
"""
import re

import pytest

from mpsprobe.engine import messages as m
from mpsprobe.engine.messages import (MESSAGE_FAMILIES, PRINTED, RAISED, WARNED, classify_message,
                                      crash_evidence, fallback_from_warning, normalise_macos, read_warning)
from mpsprobe.vocabulary import CRASH, ERROR, FALLBACK, REASON_KINDS, STATUSES, UNSUPPORTED

U, E, F, C = UNSUPPORTED, ERROR, FALLBACK, CRASH
TAIL_77764 = (" If you want this op to be added in priority during the prototype phase of this feature, please "
              "comment on https://github.com/pytorch/pytorch/issues/77764. As a temporary fix, you can set the "
              "environment variable `PYTORCH_ENABLE_MPS_FALLBACK=1` to use the CPU as a fallback for this op. "
              "WARNING: this will be slower than running natively on MPS.")
TAIL_141287 = (" If you want this op to be considered for addition please comment on "
               "https://github.com/pytorch/pytorch/issues/141287 and mention use-case, that resulted in missing op "
               "as well as commit hash 2236df1770800ffea5697b11b0bb0d910b2e59e1. As a temporary fix, you can set "
               "the environment variable `PYTORCH_ENABLE_MPS_FALLBACK=1` to use the CPU as a fallback for this op. "
               "WARNING: this will be slower than running natively on MPS.")
FALLING_BACK = "Falling back on CPU. This may have performance implications."

# (family, real text, status, reason kind, op, dtype, minimum macOS)
EXAMPLES = [
    # No kernel: the MPS error fallback in every wording, any namespace.
    ("not_implemented_1_12", "The operator 'aten::index.Tensor_out' is not current implemented for the MPS "
     "device." + TAIL_77764, U, "no_kernel", "aten::index.Tensor_out", None, None),
    ("not_implemented_77764", "The operator 'torchvision::nms' is not currently implemented for the MPS device."
     + TAIL_77764, U, "no_kernel", "torchvision::nms", None, None),
    ("not_implemented_77764", "The operator 'aten::upsample_bicubic2d.out' is not currently implemented for the "
     "MPS device." + TAIL_77764, U, "no_kernel", "aten::upsample_bicubic2d.out", None, None),
    ("not_implemented_141287", "The operator 'aten::_linalg_eigh.eigenvalues' is not currently implemented for "
     "the MPS device." + TAIL_141287, U, "no_kernel", "aten::_linalg_eigh.eigenvalues", None, None),
    ("not_implemented_mps", "The operator 'aten::_fft_r2c' is not currently implemented for the MPS device",
     U, "no_kernel", "aten::_fft_r2c", None, None),
    ("view_op_no_fallback", "The operator aten::view_as_complex appears to be a view operator, but it has no "
     "implementation for the backend \"mps:0\". View operators don't support since the tensor's storage cannot "
     "be shared across devices.", U, "no_kernel", "aten::view_as_complex", None, None),
    ("view_op_no_fallback", "The operator aten::unfold appears to be a view operator, but it has no "
     "implementation for the backend \"mps:0\". View operators don't support falling back to run on the CPU, "
     "since the tensor's storage cannot be shared across devices.", U, "no_kernel", "aten::unfold", None, None),
    ("dispatchstub_missing_mps", "DispatchStub: missing MPS kernel", U, "no_kernel", None, None, None),
    ("extension_no_mps_impl", "nms_impl: implementation for device mps:0 not found.", U, "no_kernel",
     "mmcv::nms_impl", None, None),
    # macOS gates.
    ("mps_needs_macos_12_3", "The MPS backend is supported on MacOS 12.3+.Current OS version can be queried "
     "using `sw_vers`", U, "macos_version", None, None, "12.3"),
    ("mps_needs_macos_13_or_14", "The MPS backend is supported on MacOS 13.0+.Current OS version can be queried "
     "using `sw_vers`", U, "macos_version", None, None, "13.0"),
    ("mps_needs_macos_13_or_14", "The MPS backend is supported on macOS 14.0+. Current OS version can be queried "
     "using `sw_vers`", U, "macos_version", None, None, "14.0"),
    ("bfloat16_needs_macos_14", "MPS BFloat16 is only supported on MacOS 14 or newer", U, "macos_version",
     None, "bfloat16", "14.0"),
    ("bfloat16_type_needs_macos_14", "MPS bfloat16 type is supported on MacOS 14.0 or newer.", U,
     "macos_version", None, "bfloat16", "14.0"),
    ("complex_needs_macos_14", "MPS complex types are only supported on MacOS 14.0 or newer.", U,
     "macos_version", None, "complex", "14.0"),
    ("complex_starting_macos_14", "Complex types are supported starting from MacOS 14.0+", U, "macos_version",
     None, "complex", "14.0"),
    ("complex_conj_needs_macos_14", "MPS complex tensors conjugation needs MacOS14+", U, "macos_version",
     "aten::conj", "complex", "14.0"),
    ("fft_needs_macos_14", "FFT operations are only supported on MacOS 14+", U, "macos_version", None, None,
     "14.0"),
    ("conv3d_needs_macos_13_2", "Conv3D is only supported on MPS for MacOS_13_2 or newer", U, "macos_version",
     None, None, "13.2"),
    ("floating_only_before_macos_14", "isin_Tensor_Tensor_out only works on floating types on MPS for pre "
     "MacOS_14_0. Received dtype: Long", U, "macos_version", "aten::isin", "int64", "14.0"),
    ("int64_needs_macos_13", "MPS: max_pool2d op with int64 input is supported natively starting from "
     "macOS 13.0.", U, "macos_version", "aten::max_pool2d", "int64", "13.0"),
    ("pow_int64_needs_macos_13_2", "MPS: power op with int64 input is supported natively starting from "
     "macOS 13.2", U, "macos_version", "aten::pow", "int64", "13.2"),
    ("uint8_needs_macos_13", "MPS support binary op with uint8 natively starting from macOS 13.0", U,
     "macos_version", None, "uint8", "13.0"),
    ("uint8_needs_macos_13", "MPS support unary op with uint8 natively starting from macOS 13.0", U,
     "macos_version", None, "uint8", "13.0"),
    ("multilayer_lstm_needs_macos_13", "Multi-layer LSTM support in MPS available only on MacOS 13 onwards", U,
     "macos_version", "aten::lstm", None, "13.0"),
    ("bmm_tiling_needs_macos_15", "Tiling of batch matmul for larger than 2**32 entries only available from "
     "MacOS15 onwards", U, "macos_version", "aten::bmm", None, "15.0"),
    ("scatter_reduce_int64_needs_macos_15", "scatter_reduce(amin/amax) on int64 requires macOS 15 or newer", U,
     "macos_version", "aten::scatter_reduce", "int64", "15.0"),
    # Fallbacks, as warnings: PyTorch's generic one, and the kernels' own.
    ("generic_cpu_fallback", "The operator 'aten::_linalg_svd.U' is not currently supported on the MPS backend "
     "and will fall back to run on the CPU. This may have performance implications.", F, "cpu_fallback",
     "aten::_linalg_svd.U", None, None),
    ("generic_cpu_fallback", "The operator 'torchvision::nms' is not currently supported on the MPS backend and "
     "will fall back to run on the CPU. This may have performance implications.", F, "cpu_fallback",
     "torchvision::nms", None, None),
    # TORCH_WARN(false, "The operator ", ...): c10::str prints the bool first.
    ("view_op_copied_to_cpu", "0The operator aten::view_as_complex appears to be a view operator, but it has no "
     "implementation for the backend \"mps:0\". View operators don't support falling back to run on the CPU, "
     "since the tensor's storage cannot be shared across devices.", F, "cpu_fallback", "aten::view_as_complex",
     None, None),
    ("nonzero_native_from_macos", "MPS: nonzero op is supported natively starting from macOS 13.0. "
     + FALLING_BACK, F, "kernel_fallback", "aten::nonzero", None, "13.0"),
    ("nonzero_native_from_macos", "MPS: nonzero op is supported natively starting from macOS 14.0. "
     + FALLING_BACK, F, "kernel_fallback", "aten::nonzero", None, "14.0"),
    ("nonzero_input_macos_14", "MPS: nonzero op is not natively supported for the provided input on MacOS14"
     + FALLING_BACK + "See github.com/pytorch/pytorch/issues/122916 for further info", F, "kernel_fallback",
     "aten::nonzero", None, "15.0"),
    ("median_native_from_macos_13", "MPS: median op is supported natively starting from macOS 13.0. "
     + FALLING_BACK, F, "kernel_fallback", "aten::median", None, "13.0"),
    ("grid_sampler_native_from_macos", "MPS: grid_sampler_2d op is supported natively starting from macOS 13.1. "
     + FALLING_BACK, F, "kernel_fallback", "aten::grid_sampler_2d", None, "13.1"),
    ("grid_sampler_native_from_macos", "MPS: grid_sampler_2d op is supported natively starting from macOS 13.2. "
     + FALLING_BACK, F, "kernel_fallback", "aten::grid_sampler_2d", None, "13.2"),
    ("pixel_shuffle_from_macos_13", "MPS: pixel_shuffle op is supported starting from macOS 13.0. "
     + FALLING_BACK, F, "kernel_fallback", "aten::pixel_shuffle", None, "13.0"),
    ("pixel_shuffle_from_macos_13", "MPS: pixel_unshuffle op is supported starting from macOS 13.0. "
     + FALLING_BACK, F, "kernel_fallback", "aten::pixel_unshuffle", None, "13.0"),
    ("unique_native_from_macos_13", "MPS: unique_consecutive op is supported natively starting from macOS 13.0. "
     + FALLING_BACK, F, "kernel_fallback", "aten::unique_consecutive", None, "13.0"),
    ("unique_native_from_macos_13", "MPS: _unique2 op is supported natively starting from macOS 13.0. "
     + FALLING_BACK, F, "kernel_fallback", "aten::_unique2", None, "13.0"),
    # torch 2.0 spelt it "performace".
    ("randperm_native_from_macos_13", "MPS: randperm op is supported natively starting from macOS 13.0. "
     "Falling back on CPU. This may have performace implications.", F, "kernel_fallback", "aten::randperm", None,
     "13.0"),
    ("upsample_scale_from_macos_13", "MPS: passing scale factor to upsample ops is supported natively starting "
     "from macOS 13.0. " + FALLING_BACK, F, "kernel_fallback", None, None, "13.0"),
    ("upsample_nearest_from_macos_13", "MPS: 'nearest' mode upsampling is supported natively starting from "
     "macOS 13.0. " + FALLING_BACK, F, "kernel_fallback", None, None, "13.0"),
    ("avg_pool_divisor_int64", "MPS: passing divisor to Average Pooling op with int64 input is not supported on "
     "MPS backend. " + FALLING_BACK, F, "kernel_fallback", "aten::avg_pool2d", "int64", None),
    ("cumulative_from_macos_13", "torch.cumsum supported by MPS on MacOS 13+, please upgrade", F,
     "kernel_fallback", "aten::cumsum", None, "13.0"),
    ("cumulative_from_macos_13", "cumsum_out_mps supported by MPS on MacOS 13+, please upgrade", F,
     "kernel_fallback", "aten::cumsum", None, "13.0"),
    ("topk_k16_from_macos_13", "torch.topk support for k>16 by MPS on MacOS 13+, please upgrade", F,
     "kernel_fallback", "aten::topk", None, "13.0"),
    ("inverse_from_macos_13", "torch.linalg_inv_ex.inverse is supported by MPS on MacOS 13+, please upgrade. "
     "Falling back to CPU.", F, "kernel_fallback", "aten::linalg_inv_ex", None, "13.3"),
    ("sort_from_macos_13", "torch.sort is supported by MPS on MacOS 13+, please upgrade. Falling back to CPU", F,
     "kernel_fallback", "aten::sort", None, "13.0"),
    ("linalg_qr_size_fallback", "linalg_qr: MPS implementation is currently limited to min(m,n) <= 512, falling "
     "back to CPU.", F, "kernel_fallback", "aten::linalg_qr", None, None),
    # Notices: known warnings that are not fallbacks.
    ("multilayer_lstm_cell_notice", "Native multi-layer LSTM support in MPS available only on MacOS 13 onwards. "
     "Falling back to LSTMCell iteration. This may have performance implications.", None, None, "aten::lstm",
     None, "13.0"),
    ("int64_downcast_notice", "MPS: no support for int64 for min_max, downcasting to a smaller data type "
     "(int32/float32). Native support for int64 has been added in macOS 13.3.", None, None, "aten::min_max",
     "int64", "13.3"),
    ("int64_cast_int32_notice", "MPS: no support for int64 repeats mask, casting it to int32. Support has been "
     "added in macOS 13.3", None, None, None, "int64", None),
    ("mm_metal_dispatch_notice", "MPS mm implementation has a known issue with this shape, dtype and slice. "
     "Dispatching to metal implementation instead. This may impact performance.", None, None, "aten::mm", None,
     None),
    # dtypes.
    ("float64_from_mps", "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't support "
     "float64. Please use float32 instead.", U, "dtype", None, "float64", None),
    ("float64_to_mps", "Cannot convert a float64 Tensor to MPS as the MPS framework doesn't support float64. "
     "Please use float32 instead.", U, "dtype", None, "float64", None),
    ("float64_not_supported", "float64 is not supported on MPS", U, "dtype", None, "float64", None),
    ("bfloat16_not_supported", "BFloat16 is not supported on MPS", U, "dtype", None, "bfloat16", None),
    ("dtype_not_convertible", "Trying to convert ComplexFloat to the MPS backend but it does not have support "
     "for that dtype.", U, "dtype", None, "complex64", None),
    ("convolution_floating_only", "Convolution is supported only for Floating types", U, "dtype",
     "aten::convolution", None, None),
    # int4mm.cu: TORCH_CHECK(A.dtype() == at::kBFloat16) with no message of its own.
    ("int4pack_mm_bfloat16_only", "Expected A.dtype() == at::kBFloat16 to be true, but got false.  (Could "
     "this error message be improved?  If so, please report an enhancement request to PyTorch.)", U, "dtype",
     "aten::_weight_int4pack_mm", None, None),
    ("quantized_mm_float_only", "_weight_int4pack_mm_mps : expect A to be either 32-bit or 16-bit float "
     "tensor.", U, "dtype", "aten::_weight_int4pack_mm", None, None),
    ("quantized_mm_float_only", "_weight_int8pack_mm_mps : expect A to be either 32-bit or 16-bit float "
     "tensor.", U, "dtype", "aten::_weight_int8pack_mm", None, None),
    ("int64_input_refused", "MPS does not support cumsum op with int64 input", U, "dtype", "aten::cumsum",
     "int64", None),
    ("int64_input_refused", "MPS does not support sigmoid op with int64 input", U, "dtype", "aten::sigmoid",
     "int64", None),
    ("dot_int64_refused", "MPS: dot op doesn't support int64 input", U, "dtype", "aten::dot", "int64", None),
    ("scalar_type_refused", "MPS does not support digamma_out op with scalar type: Double", U, "dtype",
     "aten::digamma", "float64", None),
    ("non_float_refused", "MPS device does not support linear for non-float inputs", U, "dtype", "aten::linear",
     None, None),
    ("non_float_refused", "MPS device does not support addr for non-float input", U, "dtype", "aten::addr",
     None, None),
    ("not_implemented_non_floating", "chebyshev_polynomial_t_mps not implemented for non-floating types", U,
     "dtype", "aten::chebyshev_polynomial_t", None, None),
    ("only_floating_implemented", "frac_out_mps is only implemented for floating types", U, "dtype",
     "aten::frac", None, None),
    ("complex_not_supported_for_mps", "log_softmax for complex is not supported for MPS", U, "dtype",
     "aten::log_softmax", "complex", None),
    ("complex_not_supported_for_mps", "Max pooling for complex is not supported for MPS", U, "dtype", None,
     "complex", None),
    ("complex_not_supported_for_mps", "log_softmax for bool is not supported for MPS", U, "dtype",
     "aten::log_softmax", "bool", None),
    ("complex_yet_not_supported", "gather(): Yet not supported for complex", U, "dtype", "aten::gather",
     "complex", None),
    ("linear_backward_weights_dtype", "mps_linear_backward: unsupported weights data type: Long", U, "dtype",
     "aten::linear_backward", "int64", None),
    ("index_reduce_dtype", "index_reduce for MPS does not support torch.long dtype", U, "dtype",
     "aten::index_reduce", "int64", None),
    ("sdpa_dtype", "scaled_dot_product_attention for MPS does not support dtype Long", U, "dtype",
     "aten::scaled_dot_product_attention", "int64", None),
    ("convtranspose3d_half", "ConvTranspose 3D with BF16 or FP16 types is not supported on MPS", U, "dtype",
     "aten::convolution", None, None),
    ("long_batch_norm", "Long batch norm is not supported with MPS", U, "dtype", "aten::native_batch_norm",
     "int64", None),
    ("histogram_float32_only", "histogram is only supported for float32", U, "dtype", "aten::histogram", None,
     None),
    ("lu_factor_complex", "linalg.lu_factor(): MPS doesn't support complex types.", U, "dtype",
     "aten::linalg_lu_factor", None, None),
    # Size limits.
    ("rank_over_16", "MPS supports tensors with dimensions <= 16, but got 17.", U, "size_limit", None, None, None),
    ("output_channels_65536", "Output channels > 65536 not supported at the MPS device. ", U, "size_limit",
     "aten::convolution", None, None),
    ("matmul_output_2_32", "Output dim sizes larger than 2**32 elements for matmul not supported on MPS device.",
     U, "size_limit", "aten::mm", None, None),
    ("masked_fill_2_32", "masked_fill not supported for tensors of more than 2**32 elements", U, "size_limit",
     "aten::masked_fill", None, None),
    ("mpsgraph_int_max_dims", "MPSGraph does not support tensor dims larger than INT_MAX", U, "size_limit", None,
     None, None),
    ("mpsgraph_int_max_dims", "MPSGaph does not support tensor dims larger than INT_MAX", U, "size_limit", None,
     None, None),
    ("nonzero_int_max", "nonzero is not supported for tensors with more than INT_MAX elements, See "
     "https://github.com/pytorch/pytorch/issues/51871", U, "size_limit", "aten::nonzero", None, None),
    ("indexing_16_indices", "Current limit allows up to 16 indices to be used in MPS indexing kernels", U,
     "size_limit", "aten::index", None, None),
    ("unfold_backward_16_dims", "unfold_backward_mps :Only up to 16-dim tensors supported", U, "size_limit",
     "aten::unfold_backward", None, None),
    ("invalid_buffer_size", "Invalid buffer size: 36.00 GB", U, "size_limit", None, None, None),
    # Arguments.
    ("adaptive_pool_divisible", "Adaptive pool MPS: input sizes must be divisible by output sizes. Non-divisible "
     "input sizes are not implemented on MPS device yet. For now, you can manually transfer tensor to cpu in "
     "this case. Please refer to [this issue](https://github.com/pytorch/pytorch/issues/96056)", U, "argument",
     "aten::adaptive_avg_pool2d", None, None),
    ("adaptive_pool_divisible", "Adaptive pool MPS: output sizes must be divisible by input sizes. Non-divisible "
     "input sizes are not implemented on MPS device yet. For now, you can manually transfer tensor to cpu in "
     "this case. Please refer to [this issue](https://github.com/pytorch/pytorch/issues/96056)", U, "argument",
     "aten::adaptive_avg_pool2d", None, None),
    ("adaptive_pool_multiples", "Adaptive pool MPS: If output is larger than input, output sizes must be "
     "multiples of input sizes", U, "argument", "aten::adaptive_avg_pool2d", None, None),
    ("adaptive_pool_mixed_sizes", "Adaptive pool MPS: Input height and width must both be greather than or equal "
     "to, or lesser than, output height and width", U, "argument", "aten::adaptive_avg_pool2d", None, None),
    ("adaptive_pool_mixed_sizes", "Adaptive pool MPS: Input height and width must both be greater than, or equal "
     "to, or lesser than output height and width", U, "argument", "aten::adaptive_avg_pool2d", None, None),
    ("grid_sampler_border_padding", "MPS: Unsupported Border padding mode", U, "argument",
     "aten::grid_sampler_2d", None, None),
    ("bicubic_interpolation", "MPS: Unsupported Bicubic interpolation", U, "argument", None, None, None),
    ("grid_sampler_3d_backward_modes", "grid_sampler_3d backward on MPS only supports bilinear and nearest "
     "interpolation", U, "argument", "aten::grid_sampler_3d", None, None),
    ("scatter_reduce_mean", "Scatter reduce mean mode not yet supported in MPS", U, "argument",
     "aten::scatter_reduce", None, None),
    ("sdpa_dropout", "scaled_dot_product_attention for MPS does not support dropout.", U, "argument",
     "aten::scaled_dot_product_attention", None, None),
    ("lu_factor_no_pivot", "linalg.lu_factor(): MPS doesn't allow pivot == False.", U, "argument",
     "aten::linalg_lu_factor", None, None),
    ("lstm_projections", "LSTM with projections is not currently supported with MPS.", U, "argument",
     "aten::lstm", None, None),
    ("topk_k_over_16", "Currently topk on mps works only for k<=16 ", U, "argument", "aten::topk", None, None),
    ("conv3d_unsupported", "Conv3D is not supported on MPS", U, "argument", "aten::convolution", None, None),
    ("conv3d_unsupported", "ConvTranspose 3D is not supported on MPS", U, "argument", "aten::convolution", None,
     None),
    # Memory and devices.
    ("mps_out_of_memory", "MPS backend out of memory (MPS allocated: 17.36 GB, other allocations: 613.56 MB, max "
     "allowed: 18.13 GB). Tried to allocate 192.00 MB on private pool. Use PYTORCH_MPS_HIGH_WATERMARK_RATIO=0.0 "
     "to disable upper limit for memory allocations (may cause system failure).", E, "out_of_memory", None, None,
     None),
    ("mps_alloc_failed", "Failed to allocate memory on MPS device", E, "out_of_memory", None, None, None),
    ("placeholder_storage", "Placeholder storage has not been allocated on MPS device!", E, "device_placement",
     None, None, None),
    ("passed_cpu_tensor", "Passed CPU tensor to MPS op", E, "device_placement", None, None, None),
    ("input_weight_devices", "Input type (MPSFloatType) and weight type (torch.FloatTensor) should be the same",
     E, "device_placement", None, None, None),
    ("input_weight_devices", "Input type (MPSBFloat16Type) and weight type (CPUBFloat16Type) should be the same "
     "or input should be a MKLDNN tensor and weight is a dense tensor", E, "device_placement", None, None, None),
    ("slow_conv2d_devices", "slow_conv2d_forward_mps: input(device='cpu') and weight(device=mps:0')  must be on "
     "the same device", E, "device_placement", "aten::_slow_conv2d_forward", None, None),
    # The generic patterns kept from classify.py.
    ("could_not_run", "Could not run 'aten::_foo.out' with arguments from the 'CUDA' backend. This could be "
     "because the operator doesn't exist for this backend", U, "no_kernel", "aten::_foo.out", None, None),
    ("kernel_dtype_not_implemented", "\"addmm_cuda\" not implemented for 'ComplexHalf'", U, "dtype", None,
     "complex32", None),
    ("cudnn_dtype", "getCudnnDataTypeFromScalarType() not supported for Long", U, "dtype", None, "int64", None),
    ("tensor_type_not_supported", "HalfTensor is not supported", U, "dtype", None, "float16", None),
    ("cuda_out_of_memory", "CUDA out of memory. Tried to allocate 2.00 GiB", E, "out_of_memory", None, None, None),
    ("generic_out_of_memory", "HIP out of memory. Tried to allocate 512.00 MiB", E, "out_of_memory", None, None,
     None),
    ("tensors_on_two_devices", "Expected all tensors to be on the same device, but found at least two devices, "
     "mps:0 and cpu!", E, "device_placement", None, None, None),
    ("argument_wants_cpu", "tensor_split expected tensor_indices_or_sections to be on cpu, but it's on mps:0", E,
     "device_placement", None, None, None),
    ("generic_dtype_refusal", "bincount is not supported for Bool", U, "dtype", None, "bool", None),
    ("generic_mps_refusal", "grad_scale and found_inf are not supported on MPS", U, "argument", None, None, None),
    # Crashes: a dead worker's last stderr line.
    ("uncaught_cpp_exception", "libc++abi: terminating due to uncaught exception of type c10::NotImplementedError: "
     "The operator 'aten::_linalg_eigh.eigenvalues' is not currently implemented for the MPS device."
     + TAIL_141287, C, "no_kernel", "aten::_linalg_eigh.eigenvalues", None, None),
    ("uncaught_cpp_exception", "libc++abi: terminating with uncaught exception of type c10::TypeError: Trying to "
     "convert ComplexFloat to the MPS backend but it does not have support for that dtype.", C, "dtype", None,
     "complex64", None),
    ("ndarray_over_2_32_bytes", "/AppleInternal/Library/BuildRoots/c651a45f-806e-11ed-a221-7ef33c48bc85/Library/"
     "Caches/com.apple.xbs/Sources/MetalPerformanceShaders/MPSCore/Types/MPSNDArray.mm:724: failed assertion "
     "`[MPSNDArray initWithDevice:descriptor:] Error: total bytes of NDArray > 2**32'", C, "size_limit", None,
     None, None),
    ("ndarray_over_2_32_bytes", "/AppleInternal/Library/BuildRoots/b11baf73-9ee0-11ef-b7b4-7aebe1f78c73/Library/"
     "Caches/com.apple.xbs/Sources/MetalPerformanceShaders/MPSCore/Types/MPSNDArray.mm:850: failed assertion "
     "`[MPSNDArray initWithDevice:descriptor:isTextureBacked:] Error: total bytes of NDArray > 2**32'", C,
     "size_limit", None, None, None),
    ("ndarray_dims_over_2_31", "MetalPerformanceShaders/MPSCore/Types/MPSNDArray.mm:705: failed assertion "
     "`[MPSTemporaryNDArray initWithDevice:descriptor:] Error: product of dimension sizes > 2**31'", C,
     "size_limit", None, None, None),
    ("mpsgraph_compile_error", "LLVM ERROR: Failed to infer result type(s).", C, "signal", None, None, None),
    ("mps_failed_assertion", "MPSNDArray.mm:124: failed assertion `[MPSNDArrayDescriptor sliceDimension:"
     "withSubrange:] error: subRange.start (6) is not less than length of dimension[0] (6)'", C, "signal", None,
     None, None),
]

IDS = [f"{family}-{i}" for i, (family, *_rest) in enumerate(EXAMPLES)]


def read(family_name, text):
    """What the module reads from `text`, through the reader for the family's channel."""
    channel = m.FAMILY[family_name].channel
    if channel == RAISED:
        return classify_message(text)
    if channel == WARNED:
        return read_warning(text)
    evidence = crash_evidence("Traceback (most recent call last):\n" + text + "\n")
    return evidence and m.Verdict(C, evidence["reason_kind"], evidence["op"], evidence["dtype"],
                                  evidence["min_macos"], evidence["family"])


@pytest.mark.parametrize("family, text, status, kind, op, dtype, min_macos", EXAMPLES, ids=IDS)
def test_each_family_reads_its_real_text(family, text, status, kind, op, dtype, min_macos):
    assert tuple(read(family, text)) == (status, kind, op, dtype, min_macos, family)


def test_every_family_has_an_example():
    covered = {family for family, *_ in EXAMPLES}
    missing = [f.name for f in MESSAGE_FAMILIES if f.name not in covered]
    assert not missing, f"families without a real text in EXAMPLES: {missing}"


def test_the_catalogue_is_large_and_well_formed():
    mps_families = [f for f in MESSAGE_FAMILIES if f.sources or f.reports]
    assert len(MESSAGE_FAMILIES) >= 60 and len(mps_families) >= 60
    for f in MESSAGE_FAMILIES:
        assert f.status is None or f.status in STATUSES
        assert f.reason_kind is None or f.reason_kind in REASON_KINDS
        assert f.title and "\n" not in f.title
        assert set(f.fields) <= {"op", "dtype", "min_macos", "mode", "what", "kernel", "backend", "exception",
                                 "message", "assertion", "detail"}, f.name
    # Every MPS-specific family says where its text comes from.
    for f in MESSAGE_FAMILIES:
        if f not in m._GENERIC:
            assert f.sources or f.reports, f.name


def test_each_reason_kind_of_a_refusal_or_fallback_has_a_family():
    kinds = {f.reason_kind for f in MESSAGE_FAMILIES}
    assert {"no_kernel", "dtype", "macos_version", "size_limit", "argument", "out_of_memory", "device_placement",
            "cpu_fallback", "kernel_fallback"} <= kinds


# --- fallback by meaning ---------------------------------------------------------------------------

@pytest.mark.parametrize("family, text, status, kind, op, dtype, min_macos",
                         [e for e in EXAMPLES if m.FAMILY[e[0]].channel == WARNED], ids=lambda v: str(v)[:40])
def test_catalogue_warnings_give_their_fallback(family, text, status, kind, op, dtype, min_macos):
    expected = (kind, op, min_macos) if status == FALLBACK else None
    assert fallback_from_warning(text) == expected


@pytest.mark.parametrize("text, op, min_macos", [
    ("MPS: frobnicate op falls back to the CPU for this input; this will be slow.", "aten::frobnicate", None),
    ("The operator 'torchvision::roi_align' is computed on the CPU when the input is channels-last.",
     "torchvision::roi_align", None),
    ("histogramdd: weight is moved to the CPU before macOS 15, which may have performance implications.",
     "aten::histogramdd", "15.0"),
    ("Falling back to CPU for this kernel.", None, None),
    ("some work of this op runs on the host", None, None),
    ("MPS: gridding is slow before macOS 14.4: falling back on CPU", None, "14.4"),
])
def test_unknown_wordings_that_say_the_work_ran_on_the_cpu_are_fallbacks(text, op, min_macos):
    assert fallback_from_warning(text) == ("kernel_fallback", op, min_macos)


@pytest.mark.parametrize("text", [
    "torch.nn.functional.upsample is deprecated. Use torch.nn.functional.interpolate instead.",
    "UserWarning: The given NumPy array is not writable, and PyTorch does not support non-writable tensors.",
    "`torch.cpu.amp.autocast(args...)` is deprecated. Please use `torch.amp.autocast('cpu', args...)` instead.",
    "Falling back to CPU profiling only.",
    ". Please note, that distributed operators can not fall back to CPU",
    "It uses View Ops default implementation to run. This may have performance implications.",
    "Converting mask without torch.bool dtype to bool; this will negatively affect performance.",
    "MPS: no support for int64 for min_max, downcasting to a smaller data type (int32/float32). Native support "
    "for int64 has been added in macOS 13.3.",
    "MPS mm implementation has a known issue with this shape, dtype and slice. Dispatching to metal "
    "implementation instead. This may impact performance.",
    "Native multi-layer LSTM support in MPS available only on MacOS 13 onwards. Falling back to LSTMCell "
    "iteration. This may have performance implications.",
    "",
])
def test_warnings_that_are_not_cpu_fallbacks(text):
    assert fallback_from_warning(text) is None


def test_fallback_ops_names_each_op_once_in_order():
    svd = ("The operator 'aten::_linalg_svd.U' is not currently supported on the MPS backend and will fall back "
           "to run on the CPU. This may have performance implications.")
    msgs = [svd, "unrelated", "MPS: nonzero op is supported natively starting from macOS 13.0. " + FALLING_BACK,
            svd, "Falling back to CPU for this kernel."]
    assert m.fallback_ops(msgs) == ["aten::_linalg_svd.U", "aten::nonzero"]


# --- exceptions with no known text ---------------------------------------------------------------

def test_two_mps_types_in_convolution_s_check_are_not_a_placement():
    # pytorch/pytorch#88978: uint8 input, float32 weight, both on MPS.
    text = "Input type (MPSByteType) and weight type (MPSFloatType) should be the same"
    assert classify_message(text, exc_type=RuntimeError)[:2] == (E, "bug")


def test_unknown_not_implemented_is_no_kernel_and_anything_else_a_bug():
    assert classify_message("no such thing", exc_type=NotImplementedError)[:2] == (U, "no_kernel")
    assert classify_message("no such thing", exc_type="c10::NotImplementedError")[:2] == (U, "no_kernel")
    assert classify_message("index 3 is out of bounds", exc_type=RuntimeError)[:2] == (E, "bug")
    assert classify_message("index 3 is out of bounds") is None


def test_classify_error_keeps_the_shape_of_classify():
    status, op, reason = m.classify_error(TypeError("MPS BFloat16 is only supported on MacOS 14 or newer"))
    assert (status, op) == (U, None) and "needs macOS 14.0" in reason and "bfloat16" in reason
    assert m.classify_error(RuntimeError("boom")) == (E, None, "RuntimeError on the target only")
    assert m.classify_error(NotImplementedError("boom"))[:2] == (U, None)


def test_the_engine_reads_target_texts_through_the_catalogue_only():
    from mpsprobe.engine import classify
    assert classify.classify_error is m.classify_error and classify.fallback_ops is m.fallback_ops
    assert classify.WANTS_CPU_ARGUMENT is m.FAMILY["argument_wants_cpu"].pattern


def test_classify_error_keeps_the_old_verdicts_and_reads_what_they_missed():
    kept = {"Could not run 'aten::_foo.out' with arguments from the 'CUDA' backend.": (U, "aten::_foo.out"),
            '"addmm_cuda" not implemented for \'ComplexHalf\'': (U, None),
            "getCudnnDataTypeFromScalarType() not supported for Long": (U, None),
            "HalfTensor is not supported": (U, None), "boom": (E, None)}
    for text, expected in kept.items():
        assert m.classify_error(RuntimeError(text))[:2] == expected, text
    # Once errors: a custom op's refusal re-raised as a RuntimeError, and a macOS gate.
    assert m.classify_error(RuntimeError(EXAMPLES[1][1]))[:2] == (U, "torchvision::nms")
    assert m.classify_error(TypeError("MPS BFloat16 is only supported on MacOS 14 or newer"))[0] == U


# --- crashes ---------------------------------------------------------------------------------------

def test_crash_evidence_keeps_the_line_and_the_op():
    tail = ("/Users/me/x.py:3: UserWarning: something\n"
            "libc++abi: terminating due to uncaught exception of type c10::NotImplementedError: The operator "
            "'aten::_linalg_eigh.eigenvalues' is not currently implemented for the MPS device." + TAIL_141287 + "\n"
            "zsh: abort      python x.py\n")
    evidence = crash_evidence(tail)
    assert evidence["op"] == "aten::_linalg_eigh.eigenvalues" and evidence["reason_kind"] == "no_kernel"
    assert evidence["line"].startswith("libc++abi: terminating") and evidence["family"] == "uncaught_cpp_exception"


def test_crash_evidence_of_a_metal_debug_assertion():
    # The shape of Metal's API-validation assertions; the wording after "failed assertion" varies.
    tail = ("-[MTLDebugComputeCommandEncoder setBuffer:offset:atIndex:]:1322: failed assertion `Set Buffer "
            "Validation\nbuffer must not be nil.'\n")
    evidence = crash_evidence(tail)
    assert evidence["family"] == "mps_failed_assertion" and evidence["reason_kind"] == "signal"
    assert evidence["op"] is None and "failed assertion" in evidence["line"]


def test_crash_evidence_of_an_uncaught_unknown_exception_is_a_signal_with_its_line():
    line = ("libc++abi: terminating with uncaught exception of type std::__1::system_error: mutex lock failed: "
            "Invalid argument")
    evidence = crash_evidence(line + "\n")
    assert (evidence["reason_kind"], evidence["op"], evidence["line"]) == ("signal", None, line)


# pytorch/pytorch#78879 (torch 1.12, macOS 12): a float32 tensor times a bool one on MPS.
MLIR_LOCATION = ('loc("mps_multiply"("(mpsFileLoc): /AppleInternal/Library/BuildRoots/b6051351-c030-11ec-96e9-'
                 '3e7866fcf3a1/Library/Caches/com.apple.xbs/Sources/MetalPerformanceShadersGraph/mpsgraph/'
                 'MetalPerformanceShadersGraph/Core/Files/MPSGraphUtilities.mm":219:0)):')
MLIR_ERROR = "error: input types 'tensor<5xf32>' and 'tensor<5xi1>' are not broadcast compatible"
LLVM_ERROR = "LLVM ERROR: Failed to infer result type(s)."


@pytest.mark.parametrize("before", [
    MLIR_LOCATION + " " + MLIR_ERROR + "\n",                       # as pytorch#78879 shows it
    MLIR_LOCATION + "\n" + MLIR_ERROR + "\n",                      # the error on a line of its own
    "Batch 1 out of 3:   0%|      | 0/60 [00:00<?, ?it/s]" + MLIR_LOCATION + " " + MLIR_ERROR + "\n",
])
def test_an_mpsgraph_compile_error_keeps_the_diagnostic_that_says_why(before):
    tail = "/Users/me/x.py:3: UserWarning: something\n" + before + LLVM_ERROR + "\nzsh: abort      python x.py\n"
    evidence = crash_evidence(tail)
    assert (evidence["family"], evidence["reason_kind"], evidence["op"]) == ("mpsgraph_compile_error", "signal", None)
    assert evidence["line"] == MLIR_LOCATION + " " + MLIR_ERROR + " " + LLVM_ERROR


def test_an_llvm_error_alone_is_kept_as_it_is():
    assert crash_evidence("warming up\n" + LLVM_ERROR + "\n")["line"] == LLVM_ERROR
    # A location with no error after it says nothing about this abort.
    assert crash_evidence(MLIR_LOCATION + "\nsomething else\n" + LLVM_ERROR)["line"] == LLVM_ERROR


def test_no_crash_evidence_in_ordinary_stderr():
    assert crash_evidence("") is None
    assert crash_evidence("Traceback (most recent call last):\n  File \"x.py\", line 1\nKeyError: 3\n") is None


# --- fields ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, version", [
    ("MacOS_13_2", "13.2"), ("macOS 14", "14.0"), ("MacOS 14.0", "14.0"), ("MacOS14+", "14.0"),
    ("MACOS_VER_13_3_PLUS", "13.3"), ("pre MacOS_14_0", "14.0"), ("MacOS15", "15.0"), ("12.3+", "12.3"),
    ("macOS 13.0. Falling back", "13.0"), ("", None), ("no version", None),
])
def test_macos_versions_are_normalised(text, version):
    assert normalise_macos(text) == version


def test_the_result_meanings_name_every_refusal_and_fallback_kind():
    for kind in ("no_kernel", "dtype", "macos_version", "size_limit", "argument", "out_of_memory",
                 "device_placement", "cpu_fallback", "kernel_fallback", "bug", "signal"):
        assert f"- {kind} (" in m.WHAT_A_RESULT_MEANS


def test_the_readme_lists_every_reason_kind_with_its_example():
    from pathlib import Path
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    section = readme[readme.index("## What a result means"):]
    section = section[:section.index("\n## ", 1)]
    assert m.WHAT_A_RESULT_MEANS.strip() in section
    listed = set(re.findall(r"^- ([\w, ]+) \(", m.WHAT_A_RESULT_MEANS, re.MULTILINE))
    listed = {kind for line in listed for kind in line.split(", ")}
    assert listed == set(REASON_KINDS)  # every reason kind of the vocabulary, and no other word
