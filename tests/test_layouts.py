"""Input layouts (ops/layouts.py): each forward sample also run transposed, strided, expanded,
channels_last and at a storage offset, a case of its own that `layout` names."""
from pathlib import Path

import pytest
import torch

from mpsprobe.engine.plan import case_key, key_index
from mpsprobe.ops import layouts

LAYOUT_BUG = str(Path(__file__).parent / "layout_backend.py")


@pytest.mark.parametrize("layout", layouts.LAYOUTS)
def test_each_layout_holds_the_same_values_in_another_layout(layout):
    x = torch.randn(2, 3, 4, 5)
    laid = layouts.relaid(x, layout)
    expected = x[:1].expand_as(x) if layout == layouts.EXPANDED else x
    assert torch.equal(laid, expected)
    if layout == layouts.OFFSET:
        assert laid.is_contiguous() and laid.storage_offset() == layouts.OFFSET_ELEMENTS
    else:
        assert not laid.is_contiguous()
    assert laid.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()


def test_layouts_that_change_nothing_are_left_out():
    from torch.testing._internal.opinfo.core import SampleInput
    assert layouts.variants(SampleInput(torch.tensor(3.0))) == []
    found = [name for name, _ in layouts.variants(SampleInput(torch.randn(5)))]
    assert found == [layouts.STRIDED, layouts.EXPANDED, layouts.OFFSET]    # 1-D: no transpose, no channels_last


def test_a_layout_variant_has_a_case_key_of_its_own():
    assert case_key(2, "forward", "transposed") == "2@transposed"
    assert case_key(2, "backward") == "2|backward"
    assert key_index("2@transposed") == 2 and key_index(case_key(3)) == 3


def test_a_kernel_wrong_only_for_non_contiguous_input_is_caught_with_the_layout_named(run_cli, rows, tmp_path):
    plain, laid = tmp_path / "plain.db", tmp_path / "layouts.db"
    args = ["--backend", LAYOUT_BUG, "--ops", "nn.functional.softplus,nn.functional.gelu", "--dtypes", "float32",
            "--samples", 2, "--passes", "forward", "--no-timing", "--workers", 1]
    # Without layouts the bug is invisible: OpInfo's samples are contiguous.
    assert run_cli("run", "--db", plain, *args).exit_code == 0
    assert {r["status"] for r in rows(plain, "SELECT status FROM results")} == {"pass"}
    result = run_cli("run", "--db", laid, "--layouts", *args)
    assert result.exit_code == 0, result.output
    found = rows(laid, "SELECT r.case_id, r.status, r.layout, r.reason_kind, c.layout AS case_layout "
                       "FROM results r JOIN cases c ON c.id = r.case_id")
    by_layout = {}
    for r in found:
        assert r["layout"] == r["case_layout"]
        by_layout.setdefault(r["layout"], set()).add(r["status"])
    assert by_layout[None] == {"pass"}
    assert by_layout[layouts.OFFSET] == {"pass"}               # contiguous at an offset: right
    for layout in (layouts.TRANSPOSED, layouts.STRIDED, layouts.EXPANDED, layouts.CHANNELS_LAST):
        if layout in by_layout:
            assert by_layout[layout] == {"mismatch"}, (layout, found)
    assert {layouts.TRANSPOSED, layouts.STRIDED, layouts.EXPANDED} <= set(by_layout)
    assert any(r["case_id"].endswith("@transposed") for r in found)
    # The roll-up condemns the op, and the run says which layout: the matrix shows a mismatch.
    worst = rows(laid, "SELECT op_id, status FROM op_dtype_status")
    assert {w["op_id"]: w["status"] for w in worst} == {"nn.functional.softplus": "mismatch",
                                                         "nn.functional.gelu": "mismatch"}
    # The same command again resumes the finished run: no case recorded twice.
    before = len(found)
    assert run_cli("run", "--db", laid, "--layouts", *args).exit_code == 0
    assert rows(laid, "SELECT count(*) AS n FROM results")[0]["n"] == before


def test_where_the_cpu_answers_otherwise_on_a_layout_than_on_its_twin_there_is_no_ground_truth():
    # torch 2.13's CPU nanmedian reads an expanded input's storage as if it were contiguous: the CPU
    # cannot be the reference for that layout, and must not condemn (or clear) a target there.
    from torch.testing._internal.opinfo.core import SampleInput
    from mpsprobe.engine.devices import Target
    from mpsprobe.engine.execute import run_case

    def median(x):
        return torch.nanmedian(x, 0).values
    base = torch.tensor([1.5, 2.0, 3.0, 4.0, 5.0])
    variant = SampleInput(base[:1].expand(5))      # five times 1.5, over base's storage
    twin = layouts.reference(variant)
    assert torch.equal(twin.input, variant.input) and twin.input.is_contiguous()
    assert median(twin.input).item() == 1.5 and median(variant.input).item() != 1.5
    result = run_case(median, torch.float32, variant, Target("cpu"), timing=False, reference=twin)
    assert result["status"] == "skip" and result["reason_kind"] == "no_unique_answer", result
    assert "differs from its answer on the same values laid out contiguously" in result["reason"]


def test_a_layout_the_cpu_refuses_is_a_reference_failure_not_the_targets_error():
    from torch.testing._internal.opinfo.core import SampleInput
    from mpsprobe.engine.devices import Target
    from mpsprobe.engine.execute import run_case
    variant = dict(layouts.variants(SampleInput(torch.randn(4, 3))))[layouts.EXPANDED]
    for nondeterministic in (False, True):      # a random op's draws are not compared, its refusal is
        result = run_case(lambda x: x.exponential_(), torch.float32, variant, Target("cpu"), timing=False,
                          reference=layouts.reference(variant), nondeterministic=nondeterministic)
        assert result["status"] == "skip" and result["reason_kind"] == "reference_failed", result
