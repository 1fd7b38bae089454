"""Which run answers: the one run picker of mpsprobe.

`run`, `check`, `findings` and every page of the site pick a run here, with
one documented default:

1. a measured run with results (what PyTorch declares is never a run: the
   site shows a declaration only when asked for one);
2. not a model replay (`check --run`, source 'model') unless asked for;
3. the target device first: MPS, then any other accelerator, the CPU last
   (a CPU run only calibrates the probe);
4. bare metal before a macOS virtual machine (a GitHub-hosted runner is one:
   about 1 GB for MPS, outputs unlike a real Mac's), so a VM answers only
   when nothing else does, and says so (`describe`);
5. then the newest torch version (compared as versions, not strings);
6. then the newest run.

Filters narrow the candidates first: a torch version prefix ("2.5" matches
"2.5.1+cpu"), a macOS or any OS version prefix, a device ("cuda" matches
"cuda:1"). A run id (or a unique prefix of one) picks any run, replays included.

An MPS question (`check` with --device auto or mps) takes only MPS runs, bare
metal then virtual machine, and test backends' (labelled so): a CPU or CUDA run
never answers it. When none matches, `check` answers from what PyTorch
declares (mpsprobe.db.query.knowledge) instead.
"""
import json

from mpsprobe.errors import MpsprobeError
from mpsprobe.versions import matches
from mpsprobe.vocabulary import FORWARD, PASS_COLUMN, PASSES
from . import knowledge, rows

SOURCES = ("opinfo", "model")


class RunNotFound(MpsprobeError):
    """No run answers the question: one line for the user."""


def device_rank(device):
    """0 for MPS, 1 for any other accelerator (or test target), 2 for the CPU."""
    kind = (device or "").split(":", 1)[0]
    return 0 if kind == "mps" else 2 if kind == "cpu" else 1


# What kind of machine a run was measured on. Roll-ups keep the kinds apart:
# a macOS virtual machine's results are never pooled with bare metal's. Its
# MPS is a paravirtualised GPU (about 1 GB, outputs unlike a real Mac's); a
# Linux VM's passed-through GPU is the hardware itself, so it counts as bare.
BARE_METAL, VIRTUAL_MACHINE = "bare metal", "virtual machine"


def machine_kind(run):
    """VIRTUAL_MACHINE for a macOS run recorded as virtualised, else BARE_METAL (unknown counts as bare)."""
    virtual = run.get("virtualized") == 1 and run.get("os_name") == "macOS"
    return VIRTUAL_MACHINE if virtual else BARE_METAL


def machine_kind_sql(alias="runs"):
    """The same label as an SQL expression over a runs row, for views and queries to group by."""
    return (f"CASE WHEN {alias}.virtualized = 1 AND {alias}.os_name = 'macOS' "
            f"THEN '{VIRTUAL_MACHINE}' ELSE '{BARE_METAL}' END")


def list_runs(conn, with_results_only=False):
    """Every run, best first by the default order, each with has_results (1 or 0:
    an index probe, not a count, so a page listing runs stays fast)."""
    found = rows(conn, """
        SELECT runs.*, EXISTS (SELECT 1 FROM results WHERE run_id = runs.id) AS has_results
        FROM runs""")
    if with_results_only:
        found = [r for r in found if r["has_results"]]
    # Stable sorts, last key first: newest run, newest torch, then the device's rank.
    found.sort(key=lambda r: r.get("started") or "", reverse=True)
    found.sort(key=lambda r: r.get("torch_version_key") or "", reverse=True)
    found.sort(key=lambda r: machine_kind(r) == VIRTUAL_MACHINE)
    found.sort(key=lambda r: device_rank(r.get("device")))
    return found


def evidence_rank(run):
    """What answers from `run` rest on: one of knowledge.RANKS, or OTHER_DEVICE (a CPU or CUDA run)."""
    if run.get("backend"):
        return knowledge.TEST_BACKEND
    if (run.get("device") or "").split(":", 1)[0] == "mps":
        return knowledge.MEASURED_VM if machine_kind(run) == VIRTUAL_MACHINE else knowledge.MEASURED
    return knowledge.OTHER_DEVICE


def answers_mps(run):
    """Whether `run` may answer an MPS question (a test backend's, labelled, included)."""
    return evidence_rank(run) != knowledge.OTHER_DEVICE


def _device_match(run, device):
    if not device or device == "auto":
        return True
    return run["device"] == device or run["device"].split(":")[0] == device


def describe(run):
    where = f"{run.get('os_name') or ''} {run.get('os_version') or ''}".strip()
    if machine_kind(run) == VIRTUAL_MACHINE:
        where = f"{where} ({VIRTUAL_MACHINE})".strip()
    return f"{run['device']}, torch {run['torch_version']}, {where}".strip(", ")


def has_pass(conn, run, pass_):
    """Whether `run` (a runs row) recorded a case of `pass_` (vocabulary.PASSES). A run's
    options list the passes it ran (none listed: forward alone), so only a run that
    lists `pass_` is looked for in the results."""
    try:
        listed = json.loads(run.get("options") or "{}").get("passes") or [FORWARD]
    except (ValueError, AttributeError):
        listed = [FORWARD]
    if pass_ not in listed:
        return False
    return conn.execute(f'SELECT 1 FROM results WHERE run_id = ? AND "{PASS_COLUMN}" = ? LIMIT 1',
                        [run["id"], pass_]).fetchone() is not None


def pick_run(conn, run_id=None, torch=None, macos=None, os=None, device=None, source=None,
             mps_question=False, pass_=None):
    """The run to answer from, as a dict (a runs-table row and has_results). Raises RunNotFound.
    `mps_question`: only runs that may answer one (answers_mps). `pass_`: only runs with
    cases of that pass (the compiled answer needs compiled cases)."""
    every = list_runs(conn)
    if run_id:
        found = [r for r in every if r["id"] == run_id] or \
                [r for r in every if r["id"].startswith(run_id)]
        if len(found) != 1:
            raise RunNotFound(f"no run {run_id!r} in the database" if not found
                              else f"run id {run_id!r} is ambiguous: give more of it")
        return found[0]
    measured = [r for r in every if r["has_results"]]
    if not measured:
        raise RunNotFound("the database holds no probe results: run `mpsprobe run` first")
    wanted = [r for r in measured
              if (r.get("source") or "opinfo") == (source or "opinfo")
              and matches(r["torch_version"], torch)
              and (not macos or (r["os_name"] == "macOS" and matches(r["os_version"], macos)))
              and matches(r["os_version"], os)
              and _device_match(r, device)
              and (not mps_question or answers_mps(r))
              and (not pass_ or has_pass(conn, r, pass_))]
    if not wanted:
        have = sorted({describe(r) for r in measured})
        raise RunNotFound(f"no run matches those filters; the database has: {'; '.join(have)}")
    return wanted[0]


def results(conn, run_id):
    """Every case of one run: its results row with the case's sample index and summary."""
    return rows(conn, """
        SELECT r.*, c.sample_index, c.sample FROM results AS r
        JOIN cases AS c ON c.id = r.case_id WHERE r.run_id = ? ORDER BY r.case_id""", [run_id])


def pass_counts(conn, run_id):
    """{pass: {status: cases}} of one run, passes in the vocabulary's order."""
    found = {}
    for r in rows(conn, f'SELECT "{PASS_COLUMN}" AS p, status, count(*) AS n FROM results '
                        f'WHERE run_id = ? GROUP BY "{PASS_COLUMN}", status', [run_id]):
        found.setdefault(r["p"], {})[r["status"]] = r["n"]
    return {p: found[p] for p in sorted(found, key=lambda p: PASSES.index(p) if p in PASSES else len(PASSES))}
