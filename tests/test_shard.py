"""`run --shard I/N`: deterministic slices whose merge equals the unsharded run."""
import os
import subprocess
import sys

import pytest

from mpsprobe.engine.sweep import SweepError, in_shard, parse_shard


# pass, fallback (linalg_svd: MPSFallback.mm's list), mismatch and unsupported on the
# fake backend; both shards non-empty.
OPS = "histc,linalg.svd,exp,add"
DTYPES = "float16,float32,int32"
PAIRS = [{"op": op, "dtype": d} for op in OPS.split(",") for d in DTYPES.split(",")]


@pytest.mark.parametrize("text, expected", [("1/1", (1, 1)), ("2/4", (2, 4)), ("4/4", (4, 4))])
def test_parse_shard(text, expected):
    assert parse_shard(text) == expected


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0", "-1/2"])
def test_bad_shards_are_refused(text, tmp_path, run_cli):
    with pytest.raises(SweepError):
        parse_shard(text)
    result = run_cli("run", "--shard", text, "--db", tmp_path / "x.db", "--ops", "add")
    assert result.exit_code == 2 and "--shard" in result.output
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_shards_partition_the_pairs(n):
    pairs = [{"op": f"op{i}", "dtype": d} for i in range(60) for d in ("float16", "float32")]
    owners = [[i for i in range(1, n + 1) if in_shard(p, (i, n))] for p in pairs]
    assert all(len(o) == 1 for o in owners)          # every pair in exactly one shard
    if n > 1:
        assert len({o[0] for o in owners}) == n      # and no shard is left empty


def test_shards_do_not_depend_on_the_process():
    """Machines must agree on the split: no hash randomisation, no set ordering."""
    code = ("import json, sys; from mpsprobe.engine.sweep import in_shard\n"
            f"pairs = {PAIRS!r}\n"
            "print(json.dumps([[i for i in (1, 2, 3) if in_shard(p, (i, 3))] for p in pairs]))")
    outputs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=dict(os.environ, PYTHONHASHSEED=seed), check=True).stdout
               for seed in ("1", "2")}
    assert len(outputs) == 1


@pytest.fixture(scope="session")
def _run(fake_mps, run_cli):
    def _run(db, *extra):
        result = run_cli("run", "--backend", fake_mps, "--ops", OPS, "--dtypes", DTYPES,
                         "--samples", 2, "--timeout", 3, "--no-timing", "--workers", 2,
                         "--db", db, "--json", *extra)
        assert result.exit_code == 0, result.output
        return str(db)
    return _run


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, _run, run_cli):
    """One unsharded run and the two shards of the same sweep, in three DBs, plus their merge."""
    where = tmp_path_factory.mktemp("shards")
    full = _run(where / "full.db")
    shards = [_run(where / f"shard{i}.db", "--shard", f"{i}/2") for i in (1, 2)]
    merged = str(where / "merged.db")
    result = run_cli("merge", *shards, "-o", merged)
    assert result.exit_code == 0, result.output
    return full, shards, merged


@pytest.fixture(scope="session")
def _case_statuses(rows):
    def _case_statuses(db):
        return {(r["case_id"], r["status"]) for r in rows(db, "SELECT case_id, status FROM results")}
    return _case_statuses


@pytest.fixture(scope="session")
def _pairs(rows):
    def _pairs(db):
        return {(r["op_id"], r["dtype"]) for r in rows(db, "SELECT op_id, dtype FROM results")}
    return _pairs


@pytest.mark.slow
def test_shards_are_disjoint_slices(sweep, _case_statuses, _pairs):
    full, shards, _ = sweep
    slices = [_case_statuses(db) for db in shards]
    assert all(slices) and not (slices[0] & slices[1])
    planned = _pairs(full)   # what the catalogue offers of OPS x DTYPES
    for i, db in enumerate(shards, 1):
        assert _pairs(db) == {p for p in planned if in_shard({"op": p[0], "dtype": p[1]}, (i, 2))}


@pytest.mark.slow
def test_merged_shards_equal_the_unsharded_run(sweep, _case_statuses, rows):
    full, _, merged = sweep
    assert _case_statuses(merged) == _case_statuses(full)
    assert len({s for _, s in _case_statuses(full)}) >= 4   # a meaningful mix of statuses
    by_sweep = rows(merged, "SELECT op_id, dtype, status, n_cases FROM sweep_op_dtype_status "
                            "ORDER BY op_id, dtype")
    by_run = rows(full, "SELECT op_id, dtype, status, n_cases FROM op_dtype_status "
                        "ORDER BY op_id, dtype")
    assert by_sweep == by_run


@pytest.mark.slow
def test_shard_runs_form_one_sweep(sweep, _case_statuses, rows, run_cli):
    full, shards, merged = sweep
    (one,) = rows(merged, "SELECT * FROM sweeps")
    assert (one["n_runs"], one["shard_count"], one["n_shards_present"]) == (2, 2, 2)
    assert one["state"] == "complete"
    assert one["cases_total"] == len(_case_statuses(full))
    # With the unsharded run merged in too, it is a sweep of its own.
    both = os.path.join(os.path.dirname(merged), "both.db")
    assert run_cli("merge", merged, full, "-o", both).exit_code == 0
    sweeps = rows(both, "SELECT n_runs, shard_count, state FROM sweeps ORDER BY n_runs")
    assert sweeps == [{"n_runs": 1, "shard_count": 1, "state": "complete"},
                      {"n_runs": 2, "shard_count": 2, "state": "complete"}]


@pytest.mark.slow
def test_one_missing_shard_leaves_the_sweep_partial(sweep, tmp_path, rows, run_cli):
    _, shards, _ = sweep
    only = str(tmp_path / "only.db")
    assert run_cli("merge", shards[0], "-o", only).exit_code == 0
    (one,) = rows(only, "SELECT state, n_shards_present, shard_count FROM sweeps")
    assert one == {"state": "partial", "n_shards_present": 1, "shard_count": 2}
