"""The whole pipeline over the fake MPS backend: each failure mode, classified."""
import json
import warnings

import pytest
import torch

import fake_mps as fake_backend


@pytest.fixture(scope="session")
def statuses(rows):
    def statuses(db, op, dtype):
        return [r["status"] for r in rows(
            db, "SELECT status FROM results WHERE op_id = ? AND dtype = ? ORDER BY case_id", (op, dtype))]
    return statuses


@pytest.mark.slow
def test_not_implemented_is_unsupported_with_the_aten_op(fake_mps_db, rows):
    for r in rows(fake_mps_db, "SELECT * FROM results WHERE op_id = 'histc' AND dtype != 'float64'"):
        assert r["status"] == "unsupported"
        assert r["aten_op"] == "aten::histc"
        assert r["error_type"] == "NotImplementedError"
        assert r["message"].startswith(
            "The operator 'aten::histc' is not currently implemented for the MPS device.")


@pytest.mark.slow
def test_fallback_is_seen_on_every_case_despite_warn_once(fake_mps_db, rows):
    # linalg_svd is on MPSFallback.mm's list of ops that always run on the CPU.
    found = rows(fake_mps_db, "SELECT * FROM results WHERE op_id = 'linalg.svd' AND dtype = 'float32'")
    assert len(found) >= 2  # several cases in one worker: TORCH_WARN_ONCE must not hide any
    for r in found:
        assert r["status"] == "fallback" and r["reason_kind"] == "cpu_fallback"
        assert json.loads(r["fallback_ops"]) == ["aten::linalg_svd"] and r["aten_op"] == "aten::linalg_svd"


@pytest.mark.slow
def test_wrong_numbers_in_one_dtype_only(fake_mps_db, rows, statuses):
    half = rows(fake_mps_db, "SELECT r.*, c.sample FROM results r JOIN cases c ON c.id = r.case_id "
                             "WHERE r.op_id = 'exp' AND r.dtype = 'float16'")
    with_values = [r for r in half if ",0" not in r["sample"] and "[0" not in r["sample"]]
    assert with_values and all(r["status"] == "mismatch" for r in with_values)
    assert all(r["max_abs_err"] > 0.1 and r["tol_atol"] == 1e-3 for r in with_values)
    assert set(statuses(fake_mps_db, "exp", "float32")) == {"pass"}


@pytest.mark.slow
def test_float64_is_refused_like_mps(fake_mps_db, rows):
    r = rows(fake_mps_db, "SELECT * FROM results WHERE op_id = 'add' AND dtype = 'float64'")[0]
    assert r["status"] == "unsupported"
    assert "doesn't support float64" in r["message"]


@pytest.mark.slow
def test_abort_costs_one_case_and_the_run_goes_on(fake_mps_db, rows, statuses):
    crashed = rows(fake_mps_db, "SELECT * FROM results WHERE op_id = 'erfinv' AND dtype = 'float32'")
    assert crashed and all(r["status"] == "crash" and r["signal"] == 6 for r in crashed)
    assert set(statuses(fake_mps_db, "add", "float32")) == {"pass"}


@pytest.mark.slow
def test_hang_costs_one_case(fake_mps_db, rows):
    hung = rows(fake_mps_db, "SELECT * FROM results WHERE op_id = 'lgamma' AND dtype = 'float32'")
    assert hung and all(r["status"] == "timeout" for r in hung)
    run = rows(fake_mps_db, "SELECT * FROM runs")[0]
    assert run["state"] == "complete" and run["device"] == "fake-mps"
    assert run["backend"].endswith("fake_mps.py")


@pytest.mark.slow
def test_every_status_rolls_up_per_op_and_dtype(fake_mps_db, rows):
    rolled = {(r["op_id"], r["dtype"]): r["status"]
              for r in rows(fake_mps_db, "SELECT * FROM op_dtype_status")}
    assert rolled[("histc", "float32")] == "unsupported"
    assert rolled[("linalg.svd", "float32")] == "fallback"
    assert rolled[("exp", "float16")] == "mismatch"
    assert rolled[("erfinv", "float32")] == "crash"
    assert rolled[("lgamma", "float32")] == "timeout"
    assert rolled[("empty_like", "float32")] == "skip"
    assert rolled[("add", "int32")] == "pass"


@pytest.mark.slow
def test_mps_fallback_env_turns_unimplemented_into_fallback(tmp_path, fake_mps, rows, run_cli):
    db = tmp_path / "fb.db"
    result = run_cli("run", "--db", db, "--backend", fake_mps, "--ops", "histc",
                     "--dtypes", "float32", "--samples", 2, "--mps-fallback", "--no-timing")
    assert result.exit_code == 0, result.output
    found = rows(db, "SELECT * FROM results")
    assert found and all(r["status"] == "fallback" for r in found)
    assert all(json.loads(r["fallback_ops"]) == ["aten::histc"] for r in found)


def test_the_fake_warns_once_per_process_like_torch_warn_once():
    """Why the probe turns on warn-always: without it, the second fallback is silent."""
    mode_config = dict(fake_backend.DEFAULTS, fallback=["aten::bitwise_and.Tensor"])
    a = torch.tensor([1, 2, 3])
    previous = torch.is_warn_always_enabled()
    fake_backend._warned_once = False
    try:
        torch.set_warn_always(False)
        seen = []
        for _ in range(2):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with fake_backend.FakeMPSMode(mode_config):
                    torch.bitwise_and(a, a)
            seen.append(len(caught))
        assert seen == [1, 0]
        torch.set_warn_always(True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with fake_backend.FakeMPSMode(mode_config):
                torch.bitwise_and(a, a)
        assert len(caught) == 1
        assert str(caught[0].message) == fake_backend.FALLBACK_WARNING.format(op="aten::bitwise_and.Tensor")
    finally:
        torch.set_warn_always(previous)


def test_the_fake_reads_the_fallback_switch_once_like_mpsfallback_mm(monkeypatch):
    monkeypatch.setenv("PYTORCH_ENABLE_MPS_FALLBACK", "1")  # too late: read when the backend loaded
    config = dict(fake_backend.DEFAULTS, not_implemented=["aten::histc"])
    with fake_backend.FakeMPSMode(config):
        try:
            torch.histc(torch.ones(3), bins=2)
        except NotImplementedError as e:
            refused = str(e)
    assert not fake_backend.FALLBACK_ENABLED and refused.startswith("The operator 'aten::histc' is not currently")


def test_a_simulated_macos_13_refuses_bfloat16_and_complex_and_falls_back_in_kernels():
    config = dict(fake_backend.DEFAULTS, macos="13.6")
    for dtype, text in ((torch.bfloat16, fake_backend.BFLOAT16_NEEDS_14), (torch.complex64, fake_backend.COMPLEX_NEEDS_14)):
        with pytest.raises(TypeError) as refused:   # both are TORCH_CHECK_TYPE in EmptyTensor.cpp / OperationUtils
            with fake_backend.FakeMPSMode(config):
                torch.ones(2).to(dtype)
        assert str(refused.value) == text
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with fake_backend.FakeMPSMode(config):
            torch.nonzero(torch.ones(2))     # native from macOS 14: falls back on 13.6
            torch.median(torch.ones(3))      # native from macOS 13: runs natively on 13.6
    assert [str(w.message) for w in caught] == [fake_backend.KERNEL_FALLBACKS["aten::nonzero"][1]]



def test_a_backward_counts_the_fallbacks_of_its_own_kernels(monkeypatch):
    """On macOS 12, upsampling with a scale factor falls back in the forward (the forward case says
    so); a backward case is a fallback only where a backward kernel warns, named by dispatch."""
    import torch.nn.functional as F
    from torch.testing._internal.opinfo.core import SampleInput
    from mpsprobe.engine.backward import run_backward_case
    monkeypatch.setenv("FAKE_MPS", json.dumps({"macos": "12.6"}))

    def upsample(x):
        return F.interpolate(x, scale_factor=2, mode="bilinear")

    def case():
        sample = SampleInput(torch.randn(1, 1, 4, 4, requires_grad=True))
        return run_backward_case(upsample, torch.float32, sample, fake_backend.make_target(),
                                 "nn.functional.interpolate.bilinear", timing=False)
    native = case()
    assert (native["status"], native["fallback_ops"]) == ("pass", [])
    text = fake_backend.KERNEL_FALLBACKS["aten::upsample_bilinear2d"][1]
    monkeypatch.setitem(fake_backend.KERNEL_FALLBACKS, "aten::upsample_bilinear2d_backward", ("13.0", text))
    fell = case()
    assert (fell["status"], fell["reason_kind"], fell["aten_op"], fell["min_macos"]) == \
        ("fallback", "kernel_fallback", "aten::upsample_bilinear2d_backward", "13.0")
    assert fell["notes"]["fallback_ops_from"] == "dispatch"


@pytest.mark.parametrize("wording, family", [(None, "not_implemented_141287"), ("2.0", "not_implemented_77764"),
                                             ("1.12", "not_implemented_1_12")])
def test_the_fake_refuses_in_each_torch_s_wording(wording, family):
    from mpsprobe.engine.messages import classify_message
    config = dict(fake_backend.DEFAULTS, not_implemented=["aten::histc"], wording=wording)
    with pytest.raises(NotImplementedError) as refused:
        with fake_backend.FakeMPSMode(config):
            torch.histc(torch.ones(3), bins=2)
    verdict = classify_message(str(refused.value))
    assert (verdict.family, verdict.status, verdict.op) == (family, "unsupported", "aten::histc")


def test_random_draws_are_judged_by_distribution_on_the_fake_like_on_mps():
    """The draws run in the target's context, the statistics (in float64, on the CPU) outside
    it: MPS refuses float64 on the device only, and so does the fake."""
    from torch.testing._internal.opinfo.core import SampleInput
    from mpsprobe.engine.backward import run_backward_case
    from mpsprobe.engine.execute import run_case
    from mpsprobe.engine.variants import out_form
    from mpsprobe.vocabulary import OUT
    target = fake_backend.make_target()
    x = torch.randn(16, 32)
    dropout = SampleInput(x.clone(), kwargs={"p": 0.3, "training": True})
    results = [run_case(torch.nn.functional.dropout, torch.float32, dropout, target, timing=False,
                        op_key="nn.functional.dropout"),
               run_case(out_form(torch.normal), torch.float32, SampleInput(x.clone(), args=(1.0,)), target,
                        timing=False, op_key="normal", draw_form=OUT),
               run_backward_case(torch.nn.functional.dropout, torch.float32,
                                 SampleInput(x.clone().requires_grad_(), kwargs=dropout.kwargs), target,
                                 "nn.functional.dropout", timing=False)]
    for result in results:
        assert (result["status"], result["check_kind"]) == ("pass", "distribution"), result
