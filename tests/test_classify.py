"""Reading MPS's own words: the texts of aten/src/ATen/mps/MPSFallback.mm."""
from mpsprobe.engine.classify import classify_error, fallback_ops

WARNING = ("The operator 'aten::{}' is not currently supported on the MPS backend and will "
           "fall back to run on the CPU. This may have performance implications.")
NOT_IMPLEMENTED = ("The operator 'aten::{}' is not currently implemented for the MPS device. "
                   "If you want this op to be added in priority during the prototype phase of "
                   "this feature, please comment on https://github.com/pytorch/pytorch/issues/77764.")


def test_fallback_warnings_name_their_ops_once_each_in_order():
    messages = [WARNING.format("_linalg_svd.U"), "unrelated", WARNING.format("im2col"),
                WARNING.format("_linalg_svd.U")]
    assert fallback_ops(messages) == ["aten::_linalg_svd.U", "aten::im2col"]


def test_not_implemented_names_the_aten_op():
    status, aten_op, _ = classify_error(NotImplementedError(NOT_IMPLEMENTED.format("histc")))
    assert (status, aten_op) == ("unsupported", "aten::histc")


def test_missing_kernel_on_any_backend():
    text = "Could not run 'aten::_foo.out' with arguments from the 'CUDA' backend. This could be"
    assert classify_error(NotImplementedError(text))[:2] == ("unsupported", "aten::_foo.out")


def test_dtype_refusals_are_unsupported():
    for text in ('"addmm_cuda" not implemented for \'ComplexHalf\'',
                 "getCudnnDataTypeFromScalarType() not supported for Long",
                 "HalfTensor is not supported",
                 "Cannot convert a MPS Tensor to float64 dtype as the MPS framework doesn't "
                 "support float64. Please use float32 instead."):
        assert classify_error(RuntimeError(text))[0] == "unsupported"


def test_anything_else_is_an_error():
    status, aten_op, reason = classify_error(RuntimeError("shape '[2]' is invalid for input of size 3"))
    assert (status, aten_op) == ("error", None) and "RuntimeError" in reason
