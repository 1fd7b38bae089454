"""torchvision's detection ops as probes of their own: nms, roi_align, roi_pool, ps_roi_align,
deform_conv2d (op ids `torchvision.…`, source 'module').

They are module probes (ops/modules.py's records) whose calls go through torchvision.ops,
so they dispatch the `torchvision::` kernels a detection model reaches (torchvision has
MPS kernels for them). Listed whether or not torchvision imports, so a sweep's catalogue
does not depend on it; where it does not import beside this torch, each pair's one case
is a skip that says so (modules.ProbeUnavailable), never an error of the target.
"""
import torch

PREFIX = "torchvision."
F32, F16 = torch.float32, torch.float16


def torchvision_ops():
    """torchvision.ops, or modules.ProbeUnavailable saying why it cannot be used here."""
    from mpsprobe.ops.modules import ProbeUnavailable
    try:
        import torchvision.ops
    except Exception as e:   # absent, or built for another torch (its C++ ops fail to load)
        raise ProbeUnavailable(f"torchvision does not import beside torch {torch.__version__} "
                               f"({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}): "
                               "nothing to run on the CPU or the target") from None
    return torchvision.ops


def _boxes(n, size, dtype, with_batch_index=False, batches=2):
    """n boxes (x1, y1, x2, y2) inside a size x size image, optionally with the batch index
    as a first column (the [K, 5] form of the roi ops)."""
    corner = torch.rand(n, 2) * size * 0.6
    extent = torch.rand(n, 2) * size * 0.4 + 1
    boxes = torch.cat([corner, corner + extent], dim=1)
    if with_batch_index:
        boxes = torch.cat([torch.randint(0, batches, (n, 1)).float(), boxes], dim=1)
    return boxes.to(dtype)


def nms(boxes, scores, iou_threshold):
    return torchvision_ops().nms(boxes, scores, iou_threshold)


def _nms_inputs(dtype, requires_grad):
    torchvision_ops()
    # Distinct scores (a permutation's values): no tie decides which box is kept.
    return [(_boxes(n, 32, dtype), (torch.randperm(n).to(dtype) / n, threshold), {})
            for n, threshold in ((20, 0.5), (64, 0.3))]


def roi_align(input, boxes, output_size, spatial_scale, sampling_ratio, aligned):
    return torchvision_ops().roi_align(input, boxes, output_size, spatial_scale, sampling_ratio, aligned)


def roi_pool(input, boxes, output_size, spatial_scale):
    return torchvision_ops().roi_pool(input, boxes, output_size, spatial_scale)


def ps_roi_align(input, boxes, output_size, spatial_scale, sampling_ratio):
    return torchvision_ops().ps_roi_align(input, boxes, output_size, spatial_scale, sampling_ratio)


def _leaf(t, requires_grad):
    return t.detach().requires_grad_(requires_grad)


def _roi_inputs(kind):
    def build(dtype, requires_grad):
        torchvision_ops()
        channels = 8 if kind == "ps_roi_align" else 3   # position-sensitive: channels = C_out x 2 x 2
        feature = _leaf(torch.randn(2, channels, 16, 16, dtype=dtype), requires_grad)
        boxes = _boxes(6, 16, dtype, with_batch_index=True)
        if kind == "roi_align":
            return [(feature, (boxes, (4, 4), 1.0, 2, aligned), {}) for aligned in (False, True)]
        if kind == "roi_pool":
            return [(feature, (boxes, (3, 3), 1.0), {})]
        return [(feature, (boxes, (2, 2), 1.0, 2), {})]
    return build


def deform_conv2d(input, offset, weight, bias, mask):
    return torchvision_ops().deform_conv2d(input, offset, weight, bias, padding=(1, 1), mask=mask)


def _deform_inputs(dtype, requires_grad):
    torchvision_ops()
    x = _leaf(torch.randn(2, 4, 8, 8, dtype=dtype), requires_grad)
    weight = _leaf(torch.randn(6, 4, 3, 3, dtype=dtype) / 6, requires_grad)
    bias = _leaf(torch.randn(6, dtype=dtype), requires_grad)
    offset = _leaf(torch.randn(2, 2 * 9, 8, 8, dtype=dtype) / 2, requires_grad)
    mask = _leaf(torch.rand(2, 9, 8, 8, dtype=dtype), requires_grad)
    return [(x, (offset, weight, bias, None), {}), (x, (offset, weight, bias, mask), {})]


def probes():
    from mpsprobe.ops.modules import ModuleProbe
    return [
        ModuleProbe(f"{PREFIX}nms", nms, _nms_inputs, (F32, F16), ("torchvision::nms",)),
        ModuleProbe(f"{PREFIX}roi_align", roi_align, _roi_inputs("roi_align"), (F32, F16),
                    ("torchvision::roi_align", "torchvision::_roi_align_backward"), differentiable=True),
        ModuleProbe(f"{PREFIX}roi_pool", roi_pool, _roi_inputs("roi_pool"), (F32, F16),
                    ("torchvision::roi_pool", "torchvision::_roi_pool_backward"), differentiable=True),
        ModuleProbe(f"{PREFIX}ps_roi_align", ps_roi_align, _roi_inputs("ps_roi_align"), (F32, F16),
                    ("torchvision::ps_roi_align", "torchvision::_ps_roi_align_backward"), differentiable=True),
        ModuleProbe(f"{PREFIX}deform_conv2d", deform_conv2d, _deform_inputs, (F32, F16),
                    ("torchvision::deform_conv2d", "torchvision::_deform_conv2d_backward"), differentiable=True),
    ]
