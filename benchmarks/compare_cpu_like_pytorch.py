"""A stand-in for PyTorch's `TestCommon.test_compare_cpu`, built on PyTorch's own test harness.

The torch wheel ships `torch.testing._internal` (OpInfo, the `@ops` decorator,
`TestCase.assertEqual`) but not `test/test_ops.py`. Where that file cannot be
had for the installed torch, this module gives the same check: for each
OpInfo op without a NumPy reference (and each Python reference), in one dtype
the CPU and the device share, every reference input runs on the device and on
a CPU copy, and the outputs must agree with atol = rtol = 1e-3. The class is
named TestCommon so the OpInfo entries' own skips and expected failures for
test_compare_cpu apply, as they do upstream.

    python -m pytest benchmarks/compare_cpu_like_pytorch.py -k test_compare_cpu
"""
import torch
from torch.testing._internal.common_device_type import (
    OpDTypes, instantiate_device_type_tests, onlyCUDA, ops)
from torch.testing._internal.common_methods_invocations import ops_and_refs
from torch.testing._internal.common_utils import TestCase, run_tests

_NO_NUMPY_REF = [op for op in ops_and_refs if op.ref is None]


class TestCommon(TestCase):
    exact_dtype = True

    @onlyCUDA
    @ops(_NO_NUMPY_REF, dtypes=OpDTypes.any_common_cpu_cuda_one)
    def test_compare_cpu(self, device, dtype, op):
        def to_cpu(value):
            return value.to(device="cpu") if isinstance(value, torch.Tensor) else value

        for sample in op.reference_inputs(device, dtype):
            cpu_sample = sample.transform(to_cpu)
            on_device = op(sample.input, *sample.args, **sample.kwargs)
            on_cpu = op(cpu_sample.input, *cpu_sample.args, **cpu_sample.kwargs)
            on_device = sample.output_process_fn_grad(on_device)
            on_cpu = cpu_sample.output_process_fn_grad(on_cpu)
            self.assertEqual(on_device, on_cpu, atol=1e-3, rtol=1e-3)


instantiate_device_type_tests(TestCommon, globals())

if __name__ == "__main__":
    run_tests()
