"""Bundles: `submit` writes a run with its provenance and a hash, `verify` refuses every
tampering with the reason, `merge` takes only verified bundles."""
import gzip
import json
import shutil
import sqlite3

import pytest

from mpsprobe.db import bundle

# A simulated M1 on macOS 13: add works, exp float32 works, float64 is refused (as on MPS).
M1 = {"machine": {"chip": "Apple M1", "gpu_cores": 8, "macos": "13.6", "os_build": "22G120",
                  "memory_bytes": 16 << 30, "virtualized": 0}}


def _sweep(run_cli, fake_mps, path, config, label):
    result = run_cli("run", "--db", path, "--backend", fake_mps, "--ops", "add,exp",
                     "--dtypes", "float32,float64", "--samples", 1, "--passes", "forward",
                     "--no-timing", "--workers", 1, "--runner-label", label, "--json",
                     env={"FAKE_MPS": json.dumps(config)})
    assert result.exit_code == 0, result.output
    return str(path)


@pytest.fixture(scope="module")
def m1_db(tmp_path_factory, run_cli, fake_mps):
    return _sweep(run_cli, fake_mps, tmp_path_factory.mktemp("m1") / "m1.db", M1, "sim-m1")


@pytest.fixture
def submitted(m1_db, tmp_path, run_cli):
    path = tmp_path / "m1.bundle.json"
    result = run_cli("submit", "--db", m1_db, "-o", path)
    assert result.exit_code == 0, result.output
    return path


def _edit(path, change, rehash):
    """Apply change(body) to the bundle at `path`; recompute its hash when `rehash`."""
    body = json.loads(path.read_text())
    change(body)
    if rehash:
        body["hash"] = bundle.content_hash(body)
    path.write_text(json.dumps(body))


def _results(body):
    return body["rows"]["results"]


def _column(body, name):
    return _results(body)["columns"].index(name)


def _set_status(body, status, where=lambda row, col: True, reason_kind=...):
    status_at, kind_at = _column(body, "status"), _column(body, "reason_kind")
    for row in _results(body)["rows"]:
        if where(row, lambda name: row[_column(body, name)]):
            row[status_at] = status
            if reason_kind is not ...:
                row[kind_at] = reason_kind
            return row
    raise AssertionError("no row to edit")


def _recount(body):
    counts = {}
    for row in _results(body)["rows"]:
        counts[row[_column(body, "status")]] = counts.get(row[_column(body, "status")], 0) + 1
    body["run"]["counts"] = json.dumps(counts, sort_keys=True)
    body["run"]["cases_total"] = len(_results(body)["rows"])


def _problems(run_cli, path):
    result = run_cli("verify", path)
    assert result.exit_code == 1, result.output
    assert "REFUSED" in result.output
    return result.output


def test_a_submitted_bundle_carries_the_run_its_provenance_and_verifies(submitted, m1_db, rows, run_cli):
    body = json.loads(submitted.read_text())
    run = body["run"]
    assert (run["chip"], run["gpu_cores"], run["os_version"], run["os_build"], run["virtualized"]) == \
        ("Apple M1", 8, "13.6", "22G120", 0)
    assert run["runner_label"] == "sim-m1" and run["command"].startswith("mpsprobe run --db")
    assert "--runner-label sim-m1" in run["command"]
    assert len(_results(body)["rows"]) == rows(m1_db, "SELECT count(*) AS n FROM results")[0]["n"] == 4
    assert body["hash"] == bundle.content_hash(body)
    result = run_cli("verify", submitted)
    assert result.exit_code == 0, result.output
    assert "verified" in result.output and "Apple M1" in result.output and "bare metal" in result.output


def test_a_compressed_bundle_is_the_same_bundle(m1_db, tmp_path, run_cli):
    assert run_cli("submit", "--db", m1_db, "-o", tmp_path / "b.json.gz").exit_code == 0
    assert run_cli("submit", "--db", m1_db, "-o", tmp_path / "b.json").exit_code == 0
    assert json.loads(gzip.decompress((tmp_path / "b.json.gz").read_bytes())) == \
        json.loads((tmp_path / "b.json").read_text())
    assert bundle.verify(str(tmp_path / "b.json.gz")).ok


@pytest.mark.parametrize("rehash", [False, True], ids=["as-edited", "hash-recomputed"])
def test_an_edited_status_is_refused(submitted, run_cli, rehash):
    # float64 add was refused (unsupported, dtype): made to read pass.
    _edit(submitted, lambda b: _set_status(b, "pass", lambda r, col: col("status") == "unsupported"), rehash)
    out = _problems(run_cli, submitted)
    if rehash:
        assert "content hash" not in out and "per-status counts differ" in out
    else:
        assert "content hash does not match" in out


def test_an_edited_status_with_its_counts_is_refused_by_its_reason(submitted, run_cli):
    def change(body):
        _set_status(body, "pass", lambda r, col: col("status") == "unsupported")
        _recount(body)
    _edit(submitted, change, rehash=True)
    out = _problems(run_cli, submitted)
    assert "status pass with reason kind dtype" in out


@pytest.mark.parametrize("rehash", [False, True], ids=["as-edited", "hash-recomputed"])
def test_a_dropped_row_is_refused(submitted, run_cli, rehash):
    _edit(submitted, lambda b: _results(b)["rows"].pop(), rehash)
    out = _problems(run_cli, submitted)
    if rehash:
        assert "planned, 0 recorded" in out and "the run says 4 cases, the bundle holds 3" in out
    else:
        assert "content hash does not match" in out


def test_a_duplicated_row_is_refused(submitted, run_cli):
    def change(body):
        _results(body)["rows"].append(list(_results(body)["rows"][0]))
        _recount(body)
    _edit(submitted, change, rehash=True)
    assert "appear more than once" in _problems(run_cli, submitted)


@pytest.mark.parametrize("rehash", [False, True], ids=["as-edited", "hash-recomputed"])
def test_changed_provenance_is_refused(submitted, run_cli, rehash):
    def change(body):  # a GitHub-hosted runner's paravirtual GPU passed off as a bare-metal Mac
        body["run"]["device_name"] = "Apple Paravirtual device"
    _edit(submitted, change, rehash)
    out = _problems(run_cli, submitted)
    assert ("paravirtual GPU" in out) if rehash else ("content hash does not match" in out)


def test_incomplete_provenance_and_foreign_words_are_refused(submitted, run_cli):
    def change(body):
        del body["run"]["os_build"]
        body["run"]["gpu_cores"] = None
        _set_status(body, "mostly-fine", lambda r, col: col("status") == "pass")
        _recount(body)
    _edit(submitted, change, rehash=True)
    out = _problems(run_cli, submitted)
    assert "provenance is incomplete: no os_build, gpu_cores" in out
    assert "status 'mostly-fine' is not in the vocabulary" in out


def test_implausible_timings_are_refused(submitted, run_cli):
    def change(body):
        at = _column(body, "duration_s")
        _results(body)["rows"][0][at] = body["run"]["wall_s"] + 3600
    _edit(submitted, change, rehash=True)
    assert "longer than the whole run" in _problems(run_cli, submitted)


def test_a_file_that_is_no_bundle_is_one_line(tmp_path, run_cli):
    (tmp_path / "x.json").write_text("[1, 2]")
    for path, words in ((tmp_path / "x.json", "not an mpsprobe bundle"), (tmp_path / "none.json", "no such bundle")):
        result = run_cli("verify", path)
        assert result.exit_code in (1, 2) and words in result.output, result.output
    result = run_cli("verify", tmp_path / "none.json")
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1


def test_merge_takes_verified_bundles_and_refuses_tampered_ones(submitted, m1_db, tmp_path, rows, run_cli):
    out = tmp_path / "fleet.db"
    result = run_cli("merge", submitted, "-o", out)
    assert result.exit_code == 0, result.output
    dump = "SELECT * FROM results ORDER BY case_id"
    assert rows(str(out), dump) == rows(m1_db, dump)
    assert rows(str(out), "SELECT * FROM runs") == rows(m1_db, "SELECT * FROM runs")
    tampered = tmp_path / "tampered.json"
    shutil.copy(submitted, tampered)
    _edit(tampered, lambda b: _set_status(b, "pass", lambda r, col: col("status") == "unsupported"), rehash=False)
    other = tmp_path / "other.db"
    result = run_cli("merge", tampered, "-o", other)
    assert result.exit_code == 2 and "refused, not verified: the content hash does not match" in result.output
    assert len(result.output.strip().splitlines()) == 1 and not other.exists()
    result = run_cli("merge", tampered, "-o", other, "--unverified")
    assert result.exit_code == 0, result.output
    assert rows(str(other), "SELECT count(*) AS n FROM results WHERE status = 'unsupported'")[0]["n"] == 1


def test_a_float64_pass_on_mps_is_flagged_for_review(submitted, run_cli):
    def change(body):
        _set_status(body, "pass", lambda r, col: col("status") == "unsupported" and col("dtype") == "float64",
                    reason_kind=None)
        _recount(body)
    _edit(submitted, change, rehash=True)
    result = run_cli("verify", submitted)
    assert result.exit_code == 0, result.output          # consistent: not refused, but ...
    assert "review:" in result.output and "pass in float64 on MPS, which has no float64" in result.output


def test_a_result_against_the_declaration_and_every_other_machine_is_flagged(
        m1_db, tmp_path, run_cli, fake_mps, rows):
    # Another Mac where exp gives wrong numbers in float32; every other machine and the
    # declaration say it works.
    wrong = _sweep(run_cli, fake_mps, tmp_path / "wrong.db",
                   dict(M1, wrong={"aten::exp": "float32"}), "sim-m1-b")
    against = tmp_path / "fleet.db"
    shutil.copy(m1_db, against)
    release = rows(m1_db, "SELECT torch_version FROM runs")[0]["torch_version"].split("+")[0]
    conn = sqlite3.connect(against)
    with conn:
        conn.execute("INSERT INTO declared (torch_version, device, op_id, dtype, status, source) "
                     "VALUES (?, 'mps', 'exp', 'float32', 'pass', 'test')", [release])
    conn.close()
    path = tmp_path / "wrong.json"
    assert run_cli("submit", "--db", wrong, "-o", path).exit_code == 0
    result = run_cli("verify", path, "--against", against)
    assert result.exit_code == 0, result.output
    assert (f"review: exp float32 forward: fails here; declared pass for torch {release}, "
            "and works on every other machine measured") in result.output
    assert "add float32" not in result.output             # agreeing results are not flagged
    assert bundle.verify(str(path)).flags == []            # nothing to contradict without a base
