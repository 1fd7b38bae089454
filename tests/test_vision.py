"""torchvision's ops as probes (ops/vision.py): skipped, saying why, where torchvision does not
import; otherwise built and run as any module probe (here through a stand-in torchvision.ops
whose functions are plain torch, since this torch has no torchvision beside it)."""
import sys
import types
from pathlib import Path

import pytest
import torch

from mpsprobe.engine.execute import run_case
from mpsprobe.ops import opinfo, vision
from mpsprobe.ops.modules import ProbeUnavailable

sys.path.insert(0, str(Path(__file__).parent))
from wrong_backend import WrongTarget  # noqa: E402

PROBES = {p.name: p for p in vision.probes()}


def test_every_requested_op_is_a_probe_of_its_own():
    assert set(PROBES) == {"torchvision.nms", "torchvision.roi_align", "torchvision.roi_pool",
                           "torchvision.ps_roi_align", "torchvision.deform_conv2d"}
    assert {p.source for p in PROBES.values()} == {"module"}
    assert all(p.reaches[0].startswith("torchvision::") for p in PROBES.values())
    listed = {p["op"] for p in opinfo.list_pairs(["torchvision.*"], None, opinfo.with_module_probes([]))}
    assert listed == set(PROBES)


@pytest.mark.slow
def test_without_torchvision_each_pass_is_one_skip_saying_why(tmp_path, run_cli, rows, monkeypatch):
    monkeypatch.setitem(sys.modules, "torchvision", None)   # import fails as where it is absent
    with pytest.raises(ProbeUnavailable, match="torchvision does not import beside torch"):
        opinfo.samples(PROBES["torchvision.nms"], torch.float32, 1)
    path = tmp_path / "tv.db"
    result = run_cli("run", "--db", path, "--device", "cpu", "--ops", "torchvision.nms,torchvision.roi_align",
                     "--dtypes", "float32", "--samples", 1, "--no-timing", "--workers", 1)
    assert result.exit_code == 0, result.output
    found = rows(path, "SELECT op_id, pass, status, reason_kind, reason FROM results ORDER BY op_id, pass")
    if any(r["status"] != "skip" for r in found):
        pytest.skip("torchvision imports in the workers here")
    assert [(r["op_id"], r["pass"]) for r in found] == [
        ("torchvision.nms", "forward"), ("torchvision.roi_align", "backward"), ("torchvision.roi_align", "forward")]
    assert all(r["reason_kind"] == "reference_failed" and "torchvision does not import" in r["reason"]
               for r in found)


def _stand_in():
    """torchvision.ops in plain torch: greedy nms, and pooling ops reduced to what their
    arguments allow; enough to run the records' calls and judge them."""
    ops = types.ModuleType("torchvision.ops")

    def nms(boxes, scores, iou_threshold):
        order, keep = scores.argsort(descending=True), []
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        for i in order.tolist():
            lo = torch.maximum(boxes[i, :2], boxes[keep, :2]) if keep else None
            hi = torch.minimum(boxes[i, 2:], boxes[keep, 2:]) if keep else None
            if keep:
                inter = (hi - lo).clamp_min(0).prod(-1)
                if ((inter / (area[i] + area[keep] - inter)) > iou_threshold).any():
                    continue
            keep.append(i)
        return torch.tensor(keep, dtype=torch.int64)

    def pooled(input, boxes, output_size, *rest):
        size = output_size if isinstance(output_size, tuple) else (output_size, output_size)
        picked = input[boxes[:, 0].long()]
        return torch.nn.functional.adaptive_avg_pool2d(picked, size) * boxes[:, 1:2, None, None].sigmoid()

    def deform_conv2d(input, offset, weight, bias, padding=(0, 0), mask=None):
        out = torch.nn.functional.conv2d(input, weight, bias, padding=padding)
        return out * (mask.mean(1, keepdim=True) if mask is not None else 1) + offset.mean() * 0
    ops.nms, ops.roi_align, ops.roi_pool, ops.ps_roi_align = nms, pooled, pooled, pooled
    ops.deform_conv2d = deform_conv2d
    package = types.ModuleType("torchvision")
    package.ops = ops
    return package, ops


@pytest.mark.parametrize("name", sorted(PROBES))
def test_with_torchvision_the_records_build_run_and_judge(name, monkeypatch):
    package, ops = _stand_in()
    monkeypatch.setitem(sys.modules, "torchvision", package)
    monkeypatch.setitem(sys.modules, "torchvision.ops", ops)
    probe = PROBES[name]
    for dtype in (torch.float32,):
        samples = opinfo.samples(probe, dtype, 3)
        assert samples
        for sample in samples:
            right = run_case(probe.op, dtype, sample, WrongTarget("redraw"), op_key=name, timing=False)
            assert right["status"] == "pass", right["reason"]
            wrong = run_case(probe.op, dtype, sample, WrongTarget("zeros"), op_key=name, timing=False)
            if name != "torchvision.nms":   # indices: zeros are not floats, nms is checked exactly
                assert wrong["status"] == "mismatch", wrong["reason"]
