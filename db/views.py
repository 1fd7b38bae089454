"""Per-version history, in the spirit of MDN's browser-compat-data.

Schema migration 2 lives here: it gives `runs` a sortable torch version key
(and the machine facts environment capture added), and defines the views

- `op_history`: one row per (run, op, dtype): the worst status of that pair in
  that run, with the run's torch version, device, OS and OS major version;
- `op_firsts`: one row per (op, dtype, device, OS, OS major): the first torch
  version seen passing, the last seen failing, the version it has passed
  since, the newest version seen and its status, and every version's status;
- `run_sweeps` / `sweeps` / `sweep_op_dtype_status`: shard runs of one sweep
  grouped under one `sweep_id` (see `SWEEP_IDENTITY`).

Torch versions are compared by `runs.torch_version_key` (zero-padded text,
"0002.0010.0000.9" > "0002.0009.0001.9"), never as strings, and the views use
plain SQL only, so they work in Datasette as in mpsprobe.
"""
from mpsprobe.engine.environment import version_key

from mpsprobe.vocabulary import STATUSES

# Facts added to `runs` by migration 2 (describe() fills them for new runs).
NEW_RUN_COLUMNS = ("torch_version_key", "hw_model", "cuda_version", "gpu_driver")

# A case "fails" on a version when it did anything but pass or skip;
# `fallback` counts: it works, but not on the device.
FAILING = tuple(s for s in STATUSES if s not in ("pass", "skip"))

# Shard runs that share all of these (and the shard count N) are slices of one
# sweep, whichever machine ran them; an unsharded run is a sweep of its own.
SWEEP_IDENTITY = ("torch_version", "torch_git", "device", "device_name", "backend",
                  "os_name", "os_version", "chip")
SWEEP_OPTIONS = ("ops", "dtypes", "samples", "mps_fallback")


def _os_major(column="os_version"):
    major = (f"CASE WHEN instr({column}, '.') > 0 "
             f"THEN substr({column}, 1, instr({column}, '.') - 1) ELSE {column} END")
    # Numeric majors compare as numbers (macOS 9 < 10); anything else stays text.
    return (f"CASE WHEN ({major}) GLOB '[0-9]*' AND NOT ({major}) GLOB '*[^0-9]*' "
            f"THEN CAST(({major}) AS INTEGER) ELSE ({major}) END")


def _worst(column="status"):
    rank = " ".join(f"WHEN '{s}' THEN {i}" for i, s in enumerate(STATUSES))
    name = " ".join(f"WHEN {i} THEN '{s}'" for i, s in enumerate(STATUSES))
    return f"CASE max(CASE {column} {rank} END) {name} END"


def _counts(prefix=""):
    return ", ".join(f"sum({prefix}n_{s}) AS n_{s}" for s in STATUSES)


def _in(values):
    return "(" + ", ".join(f"'{v}'" for v in values) + ")"


def _sweep_id_sql():
    parts = [f"coalesce({c}, '')" for c in SWEEP_IDENTITY]
    parts += [f"coalesce(json_extract(options, '$.{o}'), '')" for o in SWEEP_OPTIONS]
    parts.append("'shards=' || json_extract(options, '$.shard[1]')")
    return ("CASE WHEN json_extract(options, '$.shard') IS NULL THEN id ELSE "
            + " || '|' || ".join(parts) + " END")


def backfill_version_keys(db):
    """Fill runs.torch_version_key where a writer (or an older mpsprobe) left it empty."""
    rows = db.execute("SELECT id, torch_version FROM runs WHERE torch_version_key IS NULL "
                      "AND torch_version IS NOT NULL").fetchall()
    for run_id, version in rows:
        db.execute("UPDATE runs SET torch_version_key = ? WHERE id = ?",
                   [version_key(version), run_id])
    return len(rows)


def migrate_2(db):
    """Schema 1 -> 2: version keys and machine facts on runs; history and sweep views."""
    have = set(db["runs"].columns_dict)
    for column in NEW_RUN_COLUMNS:
        if column not in have:
            db.execute(f"ALTER TABLE runs ADD COLUMN {column} TEXT")
    db.execute("CREATE INDEX IF NOT EXISTS idx_runs_torch_version_key ON runs (torch_version_key)")
    backfill_version_keys(db)
    counts = ", ".join(f"s.n_{s}" for s in STATUSES)
    db.execute(f"""
CREATE VIEW op_history AS
SELECT s.op_id, s.dtype, r.device, r.os_name, r.os_major,
  r.torch_version, r.torch_version_key, s.status, s.run_id,
  s.n_cases, {counts},
  r.os_version, r.device_name, r.chip, r.torch_git, r.state AS run_state, r.started
FROM op_dtype_status AS s
JOIN (SELECT *, {_os_major()} AS os_major FROM runs) AS r ON r.id = s.run_id""")
    group = "op_id, dtype, device, os_name, os_major"
    runs_with_major = f"(SELECT *, {_os_major()} AS os_major FROM runs)"
    # The history of one group, as JSON, from a per-version roll-up of its
    # results. It is a correlated subquery under a single GROUP BY, so a
    # filter on op_id (what a page asks) reaches the results index: one op's
    # history takes milliseconds in a large DB. The worst status over every
    # sample of every run at a version equals the worst of op_history's rows.
    history_json = f"""(SELECT json_object(
      'first_pass_key', min(CASE WHEN status = 'pass' THEN key END),
      'last_fail_key', max(CASE WHEN status IN {_in(FAILING)} THEN key END),
      'first_seen_key', min(key), 'latest_key', max(key),
      'latest', max(key || '|' || status), 'n_versions', count(*),
      'statuses', json(json_group_object(version, status)),
      'names', json(json_group_object(key, version)),
      'pass_keys', json(json_group_array(CASE WHEN status = 'pass' THEN key END)))
    FROM (
      SELECT r.torch_version_key AS key, max(r.torch_version) AS version,
        {_worst('res.status')} AS status
      FROM results AS res JOIN {runs_with_major} AS r ON r.id = res.run_id
      WHERE res.op_id = g.op_id AND res.dtype = g.dtype AND r.device IS g.device
        AND r.os_name IS g.os_name AND r.os_major IS g.os_major
        AND r.torch_version_key IS NOT NULL
      GROUP BY r.torch_version_key ORDER BY r.torch_version_key))"""

    def name_of(key):  # the torch version string recorded for a version key
        return f"json_extract(h, '$.names.\"' || {key} || '\"')"
    since = ("(SELECT min(value) FROM json_each(h, '$.pass_keys') "
             "WHERE value > coalesce(json_extract(h, '$.last_fail_key'), ''))")
    db.execute(f"""
CREATE VIEW op_firsts AS
SELECT {group},
  {name_of("json_extract(h, '$.first_pass_key')")} AS first_pass_torch,
  {name_of("json_extract(h, '$.last_fail_key')")} AS last_fail_torch,
  {name_of(since)} AS passing_since_torch,
  {name_of("json_extract(h, '$.latest_key')")} AS latest_torch,
  substr(json_extract(h, '$.latest'), instr(json_extract(h, '$.latest'), '|') + 1)
    AS latest_status,
  {name_of("json_extract(h, '$.first_seen_key')")} AS first_seen_torch,
  json_extract(h, '$.last_fail_key') > json_extract(h, '$.first_pass_key') AS regressed,
  json_extract(h, '$.n_versions') AS n_versions,
  json_extract(h, '$.statuses') AS statuses,
  json_extract(h, '$.first_pass_key') AS first_pass_key,
  json_extract(h, '$.last_fail_key') AS last_fail_key,
  json_extract(h, '$.latest_key') AS latest_key
FROM (
  SELECT DISTINCT g.*, {history_json} AS h  -- DISTINCT: evaluate h once a row, not once a use
  FROM (
    SELECT res.op_id, res.dtype, r.device, r.os_name, r.os_major
    FROM results AS res JOIN {runs_with_major} AS r ON r.id = res.run_id
    WHERE r.torch_version_key IS NOT NULL
    GROUP BY res.op_id, res.dtype, r.device, r.os_name, r.os_major
  ) AS g
)""")
    db.execute(f"""
CREATE VIEW run_sweeps AS
SELECT id AS run_id, {_sweep_id_sql()} AS sweep_id,
  json_extract(options, '$.shard[0]') AS shard_index,
  json_extract(options, '$.shard[1]') AS shard_count
FROM runs""")
    db.execute("""
CREATE VIEW sweeps AS
SELECT w.sweep_id, count(*) AS n_runs, coalesce(max(w.shard_count), 1) AS shard_count,
  count(DISTINCT coalesce(w.shard_index, 1)) AS n_shards_present,
  min(r.torch_version) AS torch_version, min(r.torch_version_key) AS torch_version_key,
  min(r.device) AS device, min(r.device_name) AS device_name,
  min(r.os_name) AS os_name, min(r.os_version) AS os_version, min(r.chip) AS chip,
  min(r.started) AS started, max(r.finished) AS finished,
  CASE WHEN min(r.state = 'complete') = 1
        AND count(DISTINCT coalesce(w.shard_index, 1)) = coalesce(max(w.shard_count), 1)
       THEN 'complete' ELSE 'partial' END AS state,
  sum(r.cases_total) AS cases_total,
  group_concat(w.run_id) AS run_ids
FROM run_sweeps AS w JOIN runs AS r ON r.id = w.run_id
GROUP BY w.sweep_id""")
    db.execute(f"""
CREATE VIEW sweep_op_dtype_status AS
SELECT w.sweep_id, s.op_id, s.dtype, {_worst('s.status')} AS status,
  sum(s.n_cases) AS n_cases, {_counts('s.')}, group_concat(s.run_id) AS run_ids
FROM op_dtype_status AS s JOIN run_sweeps AS w ON w.run_id = s.run_id
GROUP BY w.sweep_id, s.op_id, s.dtype""")
