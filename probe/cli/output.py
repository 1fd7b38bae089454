"""Everything the commands print, formatted in one place (lines of text; JSON as is)."""
import json

from mpsprobe.vocabulary import CRASH_NOT_REPRODUCED, FORWARD, PASS_COLUMN, STATUSES


def as_json(data):
    return json.dumps(data, indent=2)


def counts_line(counts):
    """"pass 12  fallback 1": the statuses present, in the vocabulary's order."""
    return "  ".join(f"{s} {counts[s]}" for s in STATUSES if counts.get(s))


def target(env):
    """The line `run` opens with: what is measured, and what it is not."""
    where = f"{env['device']} ({env['device_name']})"
    if env.get("backend"):
        return f"target: {where}, test backend {env['backend']}: NOT a real device measurement"
    if env["device"].startswith("mps"):
        return f"target: {where} on macOS {env.get('os_version')}, {env.get('chip')}"
    return (f"target: {where} on {env.get('os_name')}: this is not an MPS measurement; "
            f"results are filed under device {env['device']!r}")


def precision_line(mode_names):
    """Which precision a run's target computed in (runs.precision_modes)."""
    if mode_names:
        return (f"precision: reduced-precision modes on ({', '.join(mode_names)}); kernels in them "
                "judged against the mode's error")
    return "precision: full (no reduced-precision mode on)"


def plan_line(device, ops, dtypes, samples, db_path, shard=None, torch_spec="current",
              backend=None):
    """`run`'s first line, printed before torch loads: the target and what will run."""
    target = f"test backend {backend}" if backend else f"device {device}"
    torch_part = "" if torch_spec in (None, "current") else f", torch {torch_spec}"
    shard_part = f", shard {shard}" if shard else ""
    return (f"mpsprobe run: {target}{torch_part}; ops {ops or 'all'}; dtypes {dtypes or 'all on the CPU'}; "
            f"{samples} sample{'' if samples == 1 else 's'} per (op, dtype){shard_part}; recording into {db_path}")


def bar_line(progress, counts):
    """Beside the bar (which counts cases): the pairs done, then the statuses so far."""
    pairs = f"{progress['pairs']}/{progress['total_pairs']} pairs"
    seen = counts_line(counts)
    return f"{pairs}  {seen}" if seen else pairs


def clear_bar(bar):
    """Close a click progress bar and wipe its line, so the summary starts clean."""
    bar.render_finish = lambda: None      # no final newline under the bar
    bar.__exit__(None, None, None)
    if getattr(bar.file, "isatty", lambda: False)():
        bar.file.write("\r\033[2K")
        bar.file.flush()


def elapsed_text(seconds):
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    return f"{minutes} min {secs:02d} s" if minutes else f"{seconds:.1f} s"


def run_summary(run, elapsed=None):
    """`run`'s closing lines for a finished Run."""
    data = run.to_json()
    took = f" in {elapsed_text(elapsed)}" if elapsed is not None else ""
    lines = [f"run {run.id}: {run.total} cases in {run.pairs} (op, dtype) pairs{took}, "
             f"torch {data['torch']}, {data['device']} ({data['device_name']})"]
    width = max(len(s) for s in STATUSES)
    lines += [f"  {s:<{width}}  {run.counts[s]:>7}" for s in STATUSES if run.counts.get(s)]
    if len(data["passes"]) > 1 or set(data["passes"]) - {FORWARD}:
        lines += [f"  {p}: {counts_line(c)}" for p, c in data["passes"].items()]
    lines.append(precision_line(run.env.get("precision_modes")))
    for event in run.events:
        lines.append(f"device event: {event_line(event)}")
    if run.unfinished:
        lines.append(f"INCOMPLETE: {len(run.unfinished)} (op, dtype) pairs could not be finished "
                     "(their worker was lost between cases each time); re-run the same command to retry them:")
        lines += [f"  {p['op']} {p['dtype']}: {p['why']}" for p in run.unfinished]
    lines.append(f"recorded in {run.db_path}")
    return lines


def event_line(event):
    """One line for a run event (db run_events; pool.Pool's on_event)."""
    what = {"device_check_failed": "the device check after a killed hang failed",
            "worker_lost": "a worker was lost between cases",
            CRASH_NOT_REPRODUCED: "a worker died in a case that ran to a result in another worker"}.get(event.get("kind"), event.get("kind"))
    before = f" (before {event['before_op']} {event['before_dtype']})" if event.get("before_op") else ""
    return f"{what}{before}: {event.get('detail')}"


def declared_summary(summary, db_path):
    lines = []
    for item in summary:
        head = f"torch {item['torch_version']}  {item['device']:<4}  {item['source']:<21}"
        if item["error"]:
            lines.append(f"{head}  FAILED: {item['error']}")
            continue
        lines.append(f"{head}  {item['rows']} rows  ({item['origin']})")
        if "statuses" in item:
            lines.append(f"    {item['ops']} ops: {counts_line(item['statuses'])}")
        lines += [f"    could not decide: {text}" for text in item["unknown_conditions"]]
    lines.append(f"recorded in {db_path}")
    return lines


def declared_history(results, db_path, seconds):
    """`declared --versions`: one line per release asked for, its readings' troubles, a total."""
    lines = []
    for item in results:
        head = f"{item['asked']:<6} torch {item['torch_version'] or '?':<8}"
        if not item["ok"]:
            lines.append(f"{head} FAILED: {item['error']}")
            continue
        by = {r["source"]: r for r in item["readings"]}
        parts = []
        kernels = by.get("native_functions.yaml")
        if kernels and kernels["ok"]:
            parts.append(f"native_functions.yaml {kernels['rows']} "
                         f"({len(kernels.get('python_mps_kernels', []))} MPS from torch.library)")
        expectations = by.get("common_mps.py")
        if expectations and expectations["ok"]:
            parts.append(f"common_mps.py {expectations['rows']} "
                         f"({expectations['absent_ops']} ops not in this release)")
        lines.append(f"{head} {item['rows']:>6} rows: {', '.join(parts)}  [{item['seconds']} s]")
        lines += [f"    {r['source']} not read: {r['error']}" for r in item["readings"] if not r["ok"]]
    done = sum(item["ok"] for item in results)
    lines.append(f"recorded {done} of {len(results)} releases in {db_path} "
                 f"({sum(item['rows'] for item in results)} rows, {seconds:.0f} s)")
    return lines


def findings(report, limit):
    from mpsprobe.db.query.findings import KINDS
    run, dec = report["run"], report["declared"]
    lines = [f"run {run['id'][:12]} ({run['device']}, torch {run['torch_version']}) vs "
             f"declared {dec['device']} for torch {dec['torch_version']} ({dec['pairs']} pairs, "
             f"from the {dec.get('from', 'database')})"]
    if dec["device"] == "cuda":       # OpInfo's dtype table: the probe checks itself against it
        upstream = {"stale_xfail": "OpInfo under-declares, or the probe misses a failure",
                    "undeclared_failure": "OpInfo over-declares, or the probe fails wrongly"}
    else:
        upstream = {"stale_xfail": "stale expectation: worth a PR upstream",
                    "undeclared_failure": "undeclared bug: worth an issue upstream",
                    "composite_passes": "composite: decomposes into supported ops"}
    for kind in KINDS:
        if kind.name == "composite_passes" and dec["device"] != "mps":
            continue
        found = [f for f in report["findings"] if f["kind"] == kind.name]
        lines += ["", f"{kind.summary} ({upstream[kind.name]}): {len(found)}"]
        lines += [f"  {f['op_id']} {f['dtype']}: {f['explanation']}" for f in found[:limit]]
        if len(found) > limit:
            lines.append(f"  … {len(found) - limit} more (--limit, or --json for all)")
    a = report["agreement"]
    decided = a["agree"] + a["disagree"]
    rate = f"{a['rate']:.1%}" if a["rate"] is not None else "n/a"
    lines += ["", f"agreement with the declaration: {rate} ({a['agree']} of {decided} pairs; "
                  f"{a['undetermined']} undetermined, {a['undeclared']} measured pairs not declared)"]
    lines += [f"  {d['op_id']} {d['dtype']}: {d['explanation']}" for d in a["disagreements"][:limit]]
    if len(a["disagreements"]) > limit:
        lines.append(f"  … {len(a['disagreements']) - limit} more")
    return lines


def merge_reports(reports, output):
    lines = []
    for r in reports:
        migrated = f" (schema {r.schema_version}, migrated in a copy)" if r.migrated else ""
        lines.append(f"{r.path}{migrated}: {r.runs_added} runs added, {r.runs_updated} updated, "
                     f"{r.results_added} results added")
    lines.append(f"merged into {output}")
    return lines


def machine(run):
    """Where a run was measured, as a contributor or reviewer reads it."""
    from mpsprobe.db.query.runs import machine_kind
    gpu = f", {run['gpu_cores']}-core GPU" if run.get("gpu_cores") else ""
    memory = f", {run['memory_bytes'] / 2**30:.0f} GB" if run.get("memory_bytes") else ""
    build = f" ({run['os_build']})" if run.get("os_build") else ""
    label = f", runner {run['runner_label']}" if run.get("runner_label") else ""
    test = ", test backend: NOT a real device" if run.get("backend") else ""
    return (f"{run.get('device')} on {run.get('chip')}{gpu}{memory}, {run.get('os_name')} "
            f"{run.get('os_version')}{build}, {machine_kind(run)}{label}, torch {run.get('torch_version')}{test}")


def submitted(body, path):
    run = body["run"]
    return [f"wrote {path}: run {run['id'][:12]}, {len(body['rows']['results']['rows'])} results, {body['hash']}",
            f"  measured on {machine(run)}",
            f"check it with `mpsprobe verify {path}`, then attach it to a pull request"]


def verdicts(found):
    lines = []
    for v in found:
        where = f" ({machine(v.run)})" if v.run.get("device") else ""
        if v.ok:
            lines.append(f"{v.path}: verified: run {str(v.run.get('id'))[:12]}, {v.rows} results{where}")
        else:
            lines.append(f"{v.path}: REFUSED{where}")
            lines += [f"  ✗ {p}" for p in v.problems]
        lines += [f"  review: {f}" for f in v.flags]
    return lines


def merge_json(reports):
    return as_json([{"source": r.path, "schema_version": r.schema_version,
                     "runs_added": r.runs_added, "runs_updated": r.runs_updated,
                     "rows_added": r.rows_added} for r in reports])


def size(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def envs_table(found, where):
    if not found:
        return [f"no cached environments in {where}"]
    width = max(len(e["name"]) for e in found)
    lines = [f"{e['name']:<{width}}  torch {e['torch_version'] or '?':<16} "
             f"python {e['python'] or '?':<8} {size(e['size_bytes']):>10}  {e['state']}"
             for e in found]
    lines.append(f"in {where}")
    return lines


def bench_summary(result):
    """`bench`: op, pass, crossover and best speedup per ladder, then where and how long."""
    rows = [("op", PASS_COLUMN, "crossover", "best speedup")]
    rows += result.summary()
    widths = [max(len(str(r[i])) for r in rows) for i in range(4)]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
    env = result.env
    lines.append(f"{len(result.rows)} rungs of {len({r.op for r in result.rows})} ops on {env.get('device')} "
                 f"({env.get('device_name')}) against the CPU ({env.get('cpu_threads')} threads), "
                 f"torch {env.get('torch_version')}, {result.wall_s:.1f} s")
    lines.append(f"recorded as run {result.run_id} in {result.db_path}")
    return lines


def ops_table(found, statuses=None, run=None):
    """`ops`: one line per op: id, aten name, dtypes, and its status when a database is given."""
    from mpsprobe.vocabulary import STATUS
    width = max(len(r["op"]) for r in found)
    aten = max(len(r["aten_name"]) for r in found)
    lines = []
    for r in found:
        line = f"{r['op']:<{width}}  {r['aten_name']:<{aten}}  {','.join(r['dtypes'])}"
        if statuses is not None:
            status = statuses.get(r["op"])
            mark = f"{STATUS[status].symbol} {status}" if status in STATUS else "- not in the run"
            line = f"{mark:<14} {line}"
        lines.append(line)
    if run and run["id"] is None:
        said = (f"; statuses: declared by PyTorch {run['torch_version']} for MPS "
                "(no measured MPS run in the database)")
    elif run:
        said = (f"; statuses from run {run['id'][:12]} ({run['device']}, torch "
                f"{run['torch_version']}: {run['rank']})")
    else:
        said = ""
    lines.append(f"{len(found)} ops{said}")
    return lines


def coverage(report, limit):
    """`mpsprobe coverage`: the figures, by source and evidence, the MPS-only dispatches, what is left."""
    yaml_n = report["yaml_kernels"]
    lines = [f"torch {report['torch_version']} ({report['torch_files']}): {report['kernels']} MPS kernels "
             f"({yaml_n} in native_functions.yaml, {report['python_kernels']} registered from Python)",
             f"evidence: {report['evidence']}"]
    for r in report["runs"]:
        lines.append(f"  run {r['id'][:12]}: {r['device']}, torch {r['torch_version']}, {r['started']}")
    pct = lambda n, d: f"{n / d:.0%}" if d else "n/a"   # noqa: E731
    lines += [f"reached: {report['reached']} of {report['kernels']} ({pct(report['reached'], report['kernels'])}); "
              f"of the yaml's {yaml_n}: {report['yaml_reached']} ({pct(report['yaml_reached'], yaml_n)})",
              "by source (a kernel counts under each source that reached it; alone: only that source):"]
    lines += [f"  {s:<10} {n:>4}   alone {report['only_by_source'][s]:>4}"
              for s, n in report["by_source"].items()]
    lines += ["by evidence:"] + [f"  {how:<40} {n:>4}" for how, n in sorted(report["by_evidence"].items())]
    lines += ["", "Dispatches a CPU run never makes (MPS's own; * MPS's and CUDA's), and the public call "
                  "that reaches each, per PyTorch's source:"]
    for d in report["mps_only_dispatch"]:
        mark = "reached" if d["reached"] else "left"
        when = f" when {d['condition']}" if d["condition"] else ""
        name = d["function"] + ("" if d["mps_only"] else " *")
        lines.append(f"  {name:<44} {mark:<8} {d['public_call']}{when}  [{d['source']}]")
    left = [f for f in report["functions"] if not f["reached"]]
    limit = max(0, limit)
    lines += ["", f"left: {len(left)}"]
    lines += [f"  {f['function']:<44} {f['reason']}" for f in left[:limit]]
    if len(left) > limit:
        lines.append(f"  … {len(left) - limit} more (--limit, or --json for all)")
    return lines
