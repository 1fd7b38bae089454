"""Every view of the store, defined here and only here.

Views hold no data, so they are dropped and created again after every
migration (and whenever their definitions change): a view never depends on
which mpsprobe created the database. Status words, their order and the
worst-status roll-ups are built from mpsprobe.vocabulary.

- `op_dtype_status`: per (run, op, dtype, pass) the worst status over its
  cases and how many cases had each status;
- `aten_op_status`: the same per aten op a case dispatched (what `check` joins);
- `run_status_counts`: cases per status per run;
- `op_history`: one row per (run, op, dtype, pass) with the run's torch
  version, device, machine_kind (bare metal or virtual machine), OS and OS major;
- `op_firsts`: one row per (op, dtype, pass, device, machine_kind, OS, OS major): the first
  torch version seen passing, the last seen failing, the version it has passed
  since, the newest version seen and its status, and every version's status;
- `run_sweeps` / `sweeps` / `sweep_op_dtype_status`: shard runs of one sweep
  grouped under one `sweep_id` (see `SWEEP_IDENTITY`).

Torch versions are compared by `runs.torch_version_key` (zero-padded text,
"0002.0010.0000.9" > "0002.0009.0001.9", see mpsprobe.versions), never as
strings, and the views use plain SQL only, so they work in Datasette as in
mpsprobe.
"""
import hashlib

from mpsprobe.db.query.runs import machine_kind_sql
from mpsprobe.vocabulary import FAILING, PASS, STATUSES

# Shard runs that share all of these (and the shard count N) are slices of one
# sweep, whichever machine ran them; an unsharded run is a sweep of its own.
SWEEP_IDENTITY = ("torch_version", "torch_git", "device", "device_name", "backend",
                  "os_name", "os_version", "chip")
SWEEP_OPTIONS = ("ops", "dtypes", "samples", "mps_fallback", "passes")


# -- SQL built from the vocabulary -------------------------------------------

def quoted(value):
    return "'" + str(value).replace("'", "''") + "'"


def in_list(values):
    """`('a', 'b')`: an SQL list of words."""
    return "(" + ", ".join(quoted(v) for v in values) + ")"


def status_rank(column="status"):
    whens = " ".join(f"WHEN {quoted(s)} THEN {i}" for i, s in enumerate(STATUSES))
    return f"CASE {column} {whens} END"


def worst_status(column="status"):
    """An aggregate: the most severe status of `column` in the group."""
    whens = " ".join(f"WHEN {i} THEN {quoted(s)}" for i, s in enumerate(STATUSES))
    return f"CASE max({status_rank(column)}) {whens} END"


def status_counts(column="status", prefix=""):
    """`sum(status = 'pass') AS n_pass, …`: one count per status."""
    return ",\n  ".join(f"sum({column} = {quoted(s)}) AS {prefix}n_{s}" for s in STATUSES)


def summed_counts(prefix=""):
    return ", ".join(f"sum({prefix}n_{s}) AS n_{s}" for s in STATUSES)


def os_major(column="os_version"):
    major = (f"CASE WHEN instr({column}, '.') > 0 "
             f"THEN substr({column}, 1, instr({column}, '.') - 1) ELSE {column} END")
    # Numeric majors compare as numbers (macOS 9 < 10); anything else stays text.
    return (f"CASE WHEN ({major}) GLOB '[0-9]*' AND NOT ({major}) GLOB '*[^0-9]*' "
            f"THEN CAST(({major}) AS INTEGER) ELSE ({major}) END")


def _sweep_id_sql():
    parts = [f"coalesce({c}, '')" for c in SWEEP_IDENTITY]
    parts += [f"coalesce(json_extract(options, '$.{o}'), '')" for o in SWEEP_OPTIONS]
    parts.append("'shards=' || json_extract(options, '$.shard[1]')")
    return ("CASE WHEN json_extract(options, '$.shard') IS NULL THEN id ELSE "
            + " || '|' || ".join(parts) + " END")


# -- the views, in creation order (a view only uses those above it) -----------

def _definitions():
    # Every roll-up across runs keeps virtual machines apart from bare metal (`machine_kind`).
    runs_with_major = f"(SELECT *, {os_major()} AS os_major, {machine_kind_sql()} AS machine_kind FROM runs)"
    counts = ", ".join(f"s.n_{s}" for s in STATUSES)
    views = {}
    views["op_dtype_status"] = f"""
SELECT run_id, op_id, dtype, pass,
  {worst_status()} AS status,
  count(*) AS n_cases,
  {status_counts()},
  max(max_abs_err) AS max_abs_err,
  group_concat(DISTINCT CASE WHEN fallback_ops != '[]' THEN fallback_ops END) AS fallback_ops,
  group_concat(DISTINCT aten_op) AS aten_op,
  avg(speedup) AS mean_speedup
FROM results GROUP BY run_id, op_id, dtype, pass"""
    views["aten_op_status"] = f"""
SELECT results.run_id, je.value AS aten_op, results.dtype, results.pass,
  {worst_status('results.status')} AS status,
  count(*) AS n_cases,
  {status_counts('results.status')},
  group_concat(DISTINCT results.op_id) AS via_ops
FROM results, json_each(results.aten_ops) AS je
WHERE results.aten_ops IS NOT NULL
GROUP BY results.run_id, je.value, results.dtype, results.pass"""
    views["run_status_counts"] = f"""
SELECT run_id, count(*) AS n_cases, {status_counts()}
FROM results GROUP BY run_id"""
    views["op_history"] = f"""
SELECT s.op_id, s.dtype, s.pass, r.device, r.machine_kind, r.os_name, r.os_major,
  r.torch_version, r.torch_version_key, s.status, s.run_id,
  s.n_cases, {counts},
  r.os_version, r.device_name, r.chip, r.torch_git, r.state AS run_state, r.started,
  r.source AS run_source
FROM op_dtype_status AS s
JOIN {runs_with_major} AS r ON r.id = s.run_id"""
    group = "op_id, dtype, pass, device, machine_kind, os_name, os_major"
    # The history of one group, as JSON, from a per-version roll-up of its
    # results. It is a correlated subquery under a single GROUP BY, so a
    # filter on op_id (what a page asks) reaches the results index: one op's
    # history takes milliseconds in a large DB. The worst status over every
    # sample of every run at a version equals the worst of op_history's rows.
    history_json = f"""(SELECT json_object(
      'first_pass_key', min(CASE WHEN status = {quoted(PASS)} THEN key END),
      'last_fail_key', max(CASE WHEN status IN {in_list(FAILING)} THEN key END),
      'first_seen_key', min(key), 'latest_key', max(key),
      'latest', max(key || '|' || status), 'n_versions', count(*),
      'statuses', json(json_group_object(version, status)),
      'names', json(json_group_object(key, version)),
      'pass_keys', json(json_group_array(CASE WHEN status = {quoted(PASS)} THEN key END)))
    FROM (
      SELECT r.torch_version_key AS key, max(r.torch_version) AS version,
        {worst_status('res.status')} AS status
      FROM results AS res JOIN {runs_with_major} AS r ON r.id = res.run_id
      WHERE res.op_id = g.op_id AND res.dtype = g.dtype AND res.pass = g.pass
        AND r.device IS g.device AND r.machine_kind IS g.machine_kind
        AND r.os_name IS g.os_name AND r.os_major IS g.os_major
        AND r.torch_version_key IS NOT NULL
      GROUP BY r.torch_version_key ORDER BY r.torch_version_key))"""

    def name_of(key):  # the torch version string recorded for a version key
        return f"json_extract(h, '$.names.\"' || {key} || '\"')"
    since = ("(SELECT min(value) FROM json_each(h, '$.pass_keys') "
             "WHERE value > coalesce(json_extract(h, '$.last_fail_key'), ''))")
    views["op_firsts"] = f"""
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
    SELECT res.op_id, res.dtype, res.pass, r.device, r.machine_kind, r.os_name, r.os_major
    FROM results AS res JOIN {runs_with_major} AS r ON r.id = res.run_id
    WHERE r.torch_version_key IS NOT NULL
    GROUP BY res.op_id, res.dtype, res.pass, r.device, r.machine_kind, r.os_name, r.os_major
  ) AS g
)"""
    views["run_sweeps"] = f"""
SELECT id AS run_id, {_sweep_id_sql()} AS sweep_id,
  json_extract(options, '$.shard[0]') AS shard_index,
  json_extract(options, '$.shard[1]') AS shard_count
FROM runs"""
    views["sweeps"] = """
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
GROUP BY w.sweep_id"""
    views["sweep_op_dtype_status"] = f"""
SELECT w.sweep_id, s.op_id, s.dtype, s.pass, {worst_status('s.status')} AS status,
  sum(s.n_cases) AS n_cases, {summed_counts('s.')}, group_concat(s.run_id) AS run_ids
FROM op_dtype_status AS s JOIN run_sweeps AS w ON w.run_id = s.run_id
GROUP BY w.sweep_id, s.op_id, s.dtype, s.pass"""
    return views


VIEWS = _definitions()
# Stored in mpsprobe_meta: a database whose views predate these definitions
# gets them recreated the next time it is opened for writing.
FINGERPRINT = hashlib.sha256("\n".join(f"{k}:{v}" for k, v in VIEWS.items()).encode()).hexdigest()[:16]


def inline_missing(sql, present):
    """`sql` with each of our views it selects FROM (unaliased) that the database
    lacks replaced by the view's definition, so a query never needs the view to exist."""
    import re
    for name, definition in VIEWS.items():
        if name not in present:
            sql = re.sub(rf"\bFROM {name}\b", f"FROM ({definition}) AS {name}", sql)
    return sql


def recreate(db):
    """Drop our views (as any mpsprobe defined them) and create them again, inside
    the caller's transaction. Views a user added under other names are kept."""
    for name in reversed(list(VIEWS)):
        db.execute(f"DROP VIEW IF EXISTS {name}")
    for name, sql in VIEWS.items():
        db.execute(f"CREATE VIEW {name} AS{sql}")
    db.execute("INSERT OR REPLACE INTO mpsprobe_meta (key, value) VALUES ('views', ?)", [FINGERPRINT])


def current(db):
    """True when the database's views are these definitions."""
    row = db.execute("SELECT value FROM mpsprobe_meta WHERE key = 'views'").fetchone()
    return bool(row) and row[0] == FINGERPRINT
