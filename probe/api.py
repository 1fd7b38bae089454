"""The Python API: what `mpsprobe` does, for a notebook or a script; the CLI calls it.

    import mpsprobe
    run = mpsprobe.probe(ops=["add"], dtypes=["float32"], device="cpu", samples=1, db="x.db")
    run.counts                      # {"pass": 1}
    rows = list(run.results())      # one dict per case
    report = mpsprobe.check_model(model, example_inputs, db="x.db")
    report.ops, report.to_json()

Every user mistake raises mpsprobe.MpsprobeError (one line, nothing written).
torch, Datasette and the store load only when a function needs them.
"""
import contextlib
import json
import os
import re

from mpsprobe.errors import MpsprobeError

DEFAULT_DB = "mpsprobe.db"


def _split(value):
    """A list from a list, a tuple or a comma-separated string."""
    if value is None:
        return []
    if isinstance(value, str):
        return [x.strip() for x in value.replace("\n", ",").split(",") if x.strip()]
    return [str(x) for x in value]


def open_db(path, readonly=False):
    """The mpsprobe database at `path` (a sqlite-utils Database), created or
    migrated as needed; `readonly=True` never writes (and refuses an old schema)."""
    from mpsprobe.db import schema
    return schema.open_db(str(path), readonly=readonly)


class Run:
    """One probe run: its id, where it is recorded, its state and counts per status."""

    def __init__(self, db_path, run_id, state, total, counts, pairs, env, resumed=False):
        self.db_path = db_path
        self.id = run_id
        self.state = state
        self.total = total
        self.counts = counts
        self.pairs = pairs
        self.env = env
        self.resumed = resumed
        self.unfinished = []   # pairs left unfinished ({"op", "dtype", "why"}): state "incomplete"
        self.events = []       # what befell the device or a worker outside any case (run_events)

    def results(self):
        """Every case of the run, as dicts (results-table rows with the case's sample)."""
        from mpsprobe.db.query import runs as runs_q
        db = open_db(self.db_path, readonly=True)
        try:
            yield from runs_q.results(db.conn, self.id)
        finally:
            db.conn.close()

    def pass_counts(self):
        """{pass: {status: cases}}: the run's cases per pass (forward, backward, inplace, out)."""
        from mpsprobe.db.query import runs as runs_q
        db = open_db(self.db_path, readonly=True)
        try:
            return runs_q.pass_counts(db.conn, self.id)
        finally:
            db.conn.close()

    def to_json(self):
        return {"run_id": self.id, "db": self.db_path, "state": self.state, "cases": self.total,
                "pairs": self.pairs, "counts": self.counts, "passes": self.pass_counts(),
                "device": self.env.get("device"),
                "device_name": self.env.get("device_name"), "torch": self.env.get("torch_version"),
                "os": f"{self.env.get('os_name')} {self.env.get('os_version') or ''}".strip(),
                "unfinished": self.unfinished,
                "events": [{k: e.get(k) for k in ("kind", "how", "detail", "before_op", "before_dtype")}
                           for e in self.events]}

    def __repr__(self):
        return f"<mpsprobe.Run {self.id[:12]} {self.state}: {self.total} cases {self.counts}>"


def probe(ops=None, dtypes=None, device="auto", samples=3, db="mpsprobe.db", *, timing=True,
          workers=0, timeout=60.0, mps_fallback=False, shard=None, torch="current",
          backend=None, resume=False, fresh=False, strict_precision=False, passes=None, select=None,
          runner_label=None, command=None, layouts=False, large=False, compiled_samples=1,
          compile_timeout=60.0, on_start=None, on_case=None, on_pair=None, say=None):
    """Probe ops (OpInfo names or globs; all by default) in dtypes on a device.

    Each case runs on the CPU and on the target in an isolated worker and is
    recorded in the database `db`; calling it again with the same arguments
    continues an interrupted run (`fresh=True` always starts a new one).
    `shard`: (i, n) or "i/n". `torch`: which torch to probe (see `mpsprobe run
    --torch`). `select(pair)`: keep only some planned (op, dtype) pairs.
    `strict_precision`: run with the target's reduced-precision modes (TF32, fast
    math) off; by default they stay as the device has them, and a kernel that ran in
    one is judged against that mode's error. `passes`: which passes of each op
    (vocabulary.PASSES, a list or "forward,backward"; default EAGER_PASSES, every pass but
    `compiled`). `compiled_samples`: samples per (op, dtype) of the compiled pass (at most
    `samples`); `compile_timeout`: seconds a compiled case may take, compiling included (past
    it: `timeout`, the worker replaced). `layouts`: also run each
    forward sample with its input transposed, strided, expanded, channels_last and at a storage
    offset (ops/layouts.py), each a case of its own whose `layout` names it.
    `large`: run the large cases instead (ops/large.py: `ops` names them, matmul for
    large.matmul; all by default), one worker, each refused up front, with one line said,
    where the target's free memory cannot hold it.
    Provenance: `runner_label` names the fleet machine (see `run --runner-label`);
    `command` is recorded as the command that made the run (default: this
    process's command line).
    Callbacks: on_start(run, todo) once the run is open (run.state "running"; todo:
    the pairs still to do), on_case(pair, index, result),
    on_pair(pair, n_cases); say(text) for progress lines.
    Returns a Run.
    """
    from mpsprobe.envs import ensure
    from mpsprobe.engine.plan import SweepOptions, parse_shard, refuse_unknown_names
    if isinstance(shard, str):
        shard = parse_shard(shard)
    python = ensure(torch, say=say or (lambda text: None))
    if large:
        ops, workers, select = _large_plan(_split(ops), device, backend, python, say, select)
    options = SweepOptions(
        db_path=str(db), device=device, backend=backend, ops=_split(ops), dtypes=_split(dtypes),
        samples=samples, timing=timing, workers=workers, timeout=timeout,
        mps_fallback=mps_fallback, shard=tuple(shard) if shard else None, python=python,
        resume=resume, fresh=fresh, strict_precision=strict_precision, runner_label=runner_label,
        command=command, layouts=layouts, compiled_samples=compiled_samples,
        compile_timeout=compile_timeout, **({"passes": tuple(_split(passes))} if passes else {}))
    refuse_unknown_names(options)
    from mpsprobe.engine.sweep import Sweep   # its store and pool: only once the names are known
    sweep = Sweep(options, say=say)
    env, pairs = sweep.prepare(select)
    todo = sweep.open()
    run = Run(str(db), sweep.writer.run_id, "running", 0, {}, len(pairs), env, sweep.resumed)
    if on_start:
        on_start(run, todo)
    run.state, run.total, run.counts = sweep.run(todo, on_case, on_pair)
    run.unfinished, run.events = sweep.unfinished, sweep.events
    return run


def _large_plan(ops, device, backend, python, say, select):
    """(ops, workers, select) for `run --large`: the large cases asked for, one worker (the
    cases need the device's memory to themselves), and a select that refuses, saying so in
    one line, each case the target's free memory cannot hold."""
    from mpsprobe.ops import large
    free = large.target_free_bytes("cpu" if backend else device, python)
    if free is None:
        raise MpsprobeError(f"cannot read the free memory of {device}: --large plans by it")

    def fits(pair):
        case = large.by_name(pair["op"])
        line = large.refusal(case, device, free) if case else None
        if line and say:
            say(line)
        return line is None and (select is None or select(pair))
    return large.wanted(ops), 1, fits


def _loaded(model, example_inputs, input_shape, dtype, name):
    """A LoadedModel from an nn.Module (with its inputs) or a spec ("file.py", "torchvision:NAME")."""
    import torch
    from mpsprobe.modelcheck import load
    if isinstance(model, (str, os.PathLike)):
        loaded = load.load(str(model), load.parse_shape(input_shape) if isinstance(input_shape, str)
                           else input_shape)
    else:
        if not isinstance(model, torch.nn.Module):
            raise MpsprobeError(f"check_model takes an nn.Module or a model spec, "
                                f"not a {type(model).__name__}")
        loaded = load.LoadedModel(name or type(model).__name__, model, example_inputs)
    if dtype:
        load.cast(loaded, getattr(torch, dtype) if isinstance(dtype, str) else dtype)
    return loaded


def _say_whole_step(device, backend, train, say):
    from mpsprobe.modelcheck import batches as batch_sweeps
    say(f"timing one whole {batch_sweeps.TRAINING if train else batch_sweeps.INFERENCE} step on the CPU "
        f"({_torch_threads()} threads) and the target ({device if not backend else 'test backend'})")


def _shape(spec, input_shape):
    """--input as a tuple, or None; the spec and the shape checked here, before any process starts."""
    from mpsprobe.modelcheck import isolated, load
    isolated.check_spec(spec)
    return load.parse_shape(input_shape) if isinstance(input_shape, str) else input_shape


def _whole_step(loaded, device, backend, train, optimizer, strict):
    """check --run's speed figure: one whole step of the model, timed here on the CPU and
    the target (modelcheck.batches.step_time), in the precision the replay ran in; a row
    whose note says why a side has no time."""
    from mpsprobe.engine import devices, precision
    from mpsprobe.modelcheck import batches as batch_sweeps
    try:
        target = devices.resolve(device, backend)
    except devices.DeviceError as e:
        return {"note": str(e)}
    strictly = precision.strict_precision(target.torch_device) if strict else contextlib.nullcontext()
    try:
        with strictly:
            return batch_sweeps.step_time(loaded, target.torch_device, train=train, optimizer=optimizer)
    except Exception as e:  # the model cannot even be placed there: the answers still stand
        return {"note": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]}


def _torch_threads():
    import torch
    return torch.get_num_threads()


def check_model(model, example_inputs=None, db=None, *, input_shape=None, train=False,
                optimizer="sgd", dtype=None, run=False, device="auto", backend=None, timing=True,
                torch=None, macos=None, run_id=None, export=None, name=None, workers=1,
                timeout=60.0, batches=None, strict_precision=False, compiled=False, say=None):
    """Will `model` run on the target? Its aten ops, each answered from the database.

    `model`: an nn.Module (with `example_inputs`: a tensor, a tuple of
    arguments or a dict of keyword arguments), a .py file defining build(),
    "torchvision:NAME" (with `input_shape`), or an op list `export` wrote
    (.json). `train`: capture backward and an optimizer step too.
    An MPS question (`device` "auto" or "mps") is answered from the best
    evidence there is (mpsprobe.db.query.knowledge): a measured MPS run
    (the run picker's, mpsprobe.db.query.runs, narrowed by `torch` and `macos`),
    its gaps filled from what PyTorch declares; with no such run, from the
    bundled declarations of the `torch` release for the `macos` asked about.
    Another `device`, or `run_id`, answers from that run alone. `run=True` instead replays
    the model's calls on `device` here, in isolated workers, and records them
    (`strict_precision`: with the device's reduced-precision modes off).
    `batches` (with `run`: sizes like (1, 8, 32) or "1,8,32") also times one whole
    step of the model per batch size on the CPU and `device` (modelcheck/batches.py),
    recorded under the replay's run and kept in the Report's `batch_sweep`.
    `compiled`: also answer for the model under torch.compile, from the chosen device's
    measured `compiled` cases (modelcheck/compiled.py; nothing is declared about compiled
    forms, so without such a run that answer is unknown); the report's exit status is then
    the compiled answer's, each op's eager answer beside it.
    Returns a Report: `.ops` (per-op answers), `.to_json()`, `.exit_code(fail_on)`.
    """
    from mpsprobe.db import schema
    from mpsprobe.db.query import runs as runs_q
    from mpsprobe.modelcheck import capture, isolated, report as reporting
    from mpsprobe.modelcheck.progress import Progress
    say = say or (lambda text: None)
    # No database named: mpsprobe.db when there is one, else the bundled declarations alone.
    db_path = str(db) if db is not None else DEFAULT_DB
    if macos is not None and not re.fullmatch(r"\d+(\.\d+)*", str(macos).strip()):
        raise MpsprobeError(f"--macos {macos}: not a macOS version (write 13, 14 or 13.2)")
    # A model file or torchvision name runs in a process of its own (modelcheck/isolated.py).
    spec = str(model) if isinstance(model, (str, os.PathLike)) and not str(model).endswith(".json") else None
    shape = _shape(spec, input_shape) if spec else None
    if run and (torch or macos or run_id):
        raise MpsprobeError("--run measures this machine: --torch, --macos and --run-id do not apply")
    if compiled and run:
        raise MpsprobeError("--compiled answers from a probe run's compiled cases (mpsprobe run --passes "
                            "compiled): it does not apply with --run")
    is_list = isinstance(model, (str, os.PathLike)) and str(model).endswith(".json")
    if is_list and run:
        raise MpsprobeError("--run needs a model to replay, not an op list")
    if export:   # refused now, not after the whole capture
        folder = os.path.dirname(os.path.abspath(export))
        if not os.path.isdir(folder):
            raise MpsprobeError(f"--export {export}: directory {folder} does not exist")
        if os.path.isdir(export) or not os.access(folder, os.W_OK):
            raise MpsprobeError(f"--export {export}: cannot write a file there")
    if batches and not run:
        raise MpsprobeError("--batch times the model on this machine: it needs --run")
    if batches:
        from mpsprobe.modelcheck import batches as batch_sweeps
        batches = batch_sweeps.parse_batches(batches if isinstance(batches, str)
                                             else ",".join(map(str, batches)))
    store = None if db is None and not run and not os.path.exists(db_path) \
        else schema.open_db(db_path, readonly=not run)
    progress = Progress(say)   # silent unless the answer takes longer than 2 s
    try:
        model_ms = sweep = None
        if run:
            from mpsprobe.engine.pool import Pool, WorkerError
            from mpsprobe.modelcheck import replay
            if not spec:
                loaded = _loaded(model, example_inputs, input_shape, dtype, name)  # before the workers
            pool = Pool({"device": device, "backend": backend, "timing": timing,
                         "strict_precision": strict_precision},
                        size=workers, timeout=timeout)
            try:
                env = pool.request({"cmd": "describe"})["env"]
            except WorkerError as e:
                pool.close()
                raise MpsprobeError(str(e)) from None
            with pool:   # replay() runs the calls in it; closed here too if capture fails
                portable = not env["device"].startswith("cpu") or env.get("backend") is not None
                for_mps = env["device"].startswith("mps") or env.get("backend") is not None
                if spec:
                    model_ops, calls, skipped = isolated.capture(
                        spec, input_shape=shape, dtype=dtype, train=train, optimizer=optimizer,
                        portable=portable, for_mps=for_mps, record_calls=True, timeout=timeout)
                else:
                    recorder = replay.CallRecorder()
                    model_ops = capture.capture(loaded, train=train, optimizer=optimizer,
                                                portable=portable, on_call=recorder, for_mps=for_mps)
                    calls, skipped = recorder.list(), recorder.skipped
                say(f"replaying {len(calls)} distinct calls of {model_ops.distinct} aten ops on "
                    f"{env['device']} ({env['device_name']})")
                for op_name, why in sorted(skipped.items()):
                    say(f"not replayed: {op_name} (its arguments cannot be rebuilt: {why})")
                from mpsprobe.cli.output import precision_line
                say(precision_line(env.get("precision_modes")))
                writer, results = replay.replay(store, calls, pool, env, model_ops.model,
                                                timing=timing)
            chosen = runs_q.pick_run(store.conn, run_id=writer.run_id)
            whole = None
            if timing:
                _say_whole_step(device, backend, train, say)
                if spec:
                    whole = isolated.whole_step(spec, input_shape=shape, dtype=dtype, device=device,
                                                backend=backend, train=train, optimizer=optimizer,
                                                strict=strict_precision, timeout=timeout)
                else:
                    whole = _whole_step(_loaded(model, example_inputs, input_shape, dtype, name), device,
                                        backend, train, optimizer, strict_precision)
            model_ms = reporting.model_speed(whole, replay.model_time(results))
            if batches:
                sweep = batch_sweeps.sweep_and_record(
                    _loaded(model, example_inputs, input_shape, dtype, name), batches, device, backend,
                    store, writer.run_id, train=train, optimizer=optimizer, say=say)
        else:
            from mpsprobe.modelcheck.declared import answering
            if store is None and (run_id or (device or "auto").split(":")[0] not in ("auto", "mps")):
                raise MpsprobeError(f"cannot read {DEFAULT_DB}: it does not exist (only MPS questions "
                                    "are answered without a database, from what PyTorch declares)")
            chosen, declared = answering(store and store.conn, run_id, torch, macos, device)
            if not is_list:
                progress.step(f"loading torch and tracing {model if isinstance(model, str) else 'the model'} "
                              "on the CPU")
            if is_list:
                try:
                    with open(model) as f:
                        model_ops = capture.ops_from_json(json.load(f))
                except (OSError, ValueError) as e:
                    raise MpsprobeError(f"{model}: {e}") from None
                except capture.CheckError as e:
                    raise MpsprobeError(f"{model}: {e}") from None
            elif spec:
                model_ops = isolated.capture(spec, input_shape=shape, dtype=dtype, train=train,
                                             optimizer=optimizer,
                                             portable=str(device).split(":")[0] != "cpu",
                                             for_mps=str(device).split(":")[0] in ("auto", "mps"),
                                             timeout=timeout)[0]
            else:
                # Traced for the device asked: the CPU's own kernels only when the CPU is asked for,
                # not whenever the answering run happens to be a CPU run.
                model_ops = capture.capture(
                    _loaded(model, example_inputs, input_shape, dtype, name), train=train,
                    optimizer=optimizer, portable=str(device).split(":")[0] != "cpu",
                    for_mps=str(device).split(":")[0] in ("auto", "mps"))
        if export:
            try:
                with open(export, "w") as f:
                    json.dump(model_ops.to_json(), f, indent=2)
            except OSError as e:
                raise MpsprobeError(f"--export {export}: {e.strerror}") from None
        source = f"run {chosen['id'][:12]}" if chosen else "PyTorch's declarations"
        progress.step(f"answering {len(model_ops.ops)} (op, dtype) pairs from {source}")
        report = reporting.answer(store and store.conn, model_ops, chosen, model_ms=model_ms,
                                  recorded_in=db_path if run else None,
                                  declared=None if run else declared,
                                  db_path=db_path if store else None)
        report.batch_sweep = sweep
        report.db_missing = None if store else db_path
        if compiled:
            from mpsprobe.modelcheck import compiled as compiled_answers
            report.compiled = compiled_answers.answer(store and store.conn, model_ops, report.answers,
                                                      device=device, run_id=run_id, torch=torch, macos=macos)
        return report
    finally:
        progress.done()
        if run:
            schema.close(store)
        elif store is not None:
            store.conn.close()


def findings(db="mpsprobe.db", run=None, against=None):
    """Where a run (default: the run picker's) disagrees with what PyTorch declares, as a dict."""
    from mpsprobe.db.query import findings as findings_q
    store = open_db(db, readonly=True)
    try:
        return findings_q.report(store.conn, run, against)
    finally:
        store.conn.close()


def coverage(db=None, run_ids=(), wheel=None):
    """Which MPS kernels the catalogue reaches, as a dict (the JSON of `mpsprobe coverage`).

    The kernels are those of the installed torch (or of `wheel`, a torch wheel
    file): native_functions.yaml's own MPS keys and Python-registered MPS kernels.
    Reached means a recorded case of `db` dispatched it: in the runs named by
    `run_ids` (ids or prefixes), else every catalogue run (not a model replay)
    of that torch version. Without `db` nothing is reached, and `evidence` says so.
    """
    from mpsprobe.ops import coverage as cov
    from mpsprobe.ops.declared import wheel as wheels
    files = wheels.from_wheel(wheel) if wheel else wheels.installed()
    if not files.native_functions:
        raise MpsprobeError(files.missing(wheels.NATIVE_FUNCTIONS))
    kernels = cov.mps_kernels(files)
    runs, dispatched = [], {}
    if db is not None:
        from mpsprobe.db.query import coverage as coverage_q
        if not os.path.exists(str(db)):
            raise MpsprobeError(f"{db}: no such database")
        store = open_db(db, readonly=True)
        try:
            runs = coverage_q.catalogue_runs(store.conn, files.torch_version, _split(run_ids))
            if not runs:
                which = (f"runs {', '.join(_split(run_ids))}" if _split(run_ids)
                         else f"a run of torch {files.torch_version}")
                raise MpsprobeError(f"{db} has no {which} (model replays do not count)")
            dispatched = coverage_q.dispatched(store.conn, [r["id"] for r in runs])
        finally:
            store.conn.close()
    devices = sorted({r["device"] for r in runs})
    on_mps = bool(devices) and all(d.split(":")[0] == "mps" and not r.get("backend")
                                   for d in devices for r in runs)
    from mpsprobe.ops import generated, modules
    probes = {f: p.name for p in modules.probes() + generated.probes() for f in p.reaches}
    cov.measure(kernels, dispatched, on_mps=on_mps, read=bool(runs), probes=probes)
    if not runs:
        evidence = "none: no database given, so nothing is counted as reached (pass db=)"
    elif on_mps:
        evidence = "aten ops recorded on MPS by the runs' cases"
    else:
        evidence = (f"aten ops the runs' cases dispatched on {', '.join(devices)} (not MPS: MPS's "
                    "dispatch differs where it calls kernels of its own, answered from the "
                    "MPS-only dispatch table)")
    report = cov.summary(kernels, evidence)
    report.update(torch_version=files.torch_version, torch_files=files.origin,
                  runs=[{k: r[k] for k in ("id", "device", "torch_version", "started")} for r in runs])
    return report


def op_statuses(db="mpsprobe.db", run=None):
    """(what answers, {op id: worst status over its dtypes}) for the MPS question "does it work?".

    From the best evidence (mpsprobe.db.query.knowledge): a measured MPS run (or a
    test backend's, labelled), else what PyTorch declares for MPS in the installed
    torch's release; never a CPU or CUDA run, unless `run` (an id) picks one.
    What answers is a runs row with `rank` added, or, for declarations, a dict
    with id None, rank, device "mps" and torch_version (the declared release).
    """
    from importlib import metadata
    from mpsprobe.db.query import knowledge, matrix, runs
    from mpsprobe.vocabulary import worst
    store = open_db(db, readonly=True)
    try:
        try:
            picked = runs.pick_run(store.conn, run_id=run, mps_question=run is None)
        except runs.RunNotFound:
            if run:
                raise
            kb = knowledge.load()
            try:
                installed = metadata.version("torch")
            except metadata.PackageNotFoundError:
                installed = None
            release = knowledge.release_for(kb, None, installed)
            return ({"id": None, "rank": knowledge.DECLARED, "device": "mps", "torch_version": release},
                    {op: worst(found) for op, found in knowledge.op_statuses(kb, release).items()})
        found = {}
        for cell in matrix.cells(store.conn, picked["id"]):
            found.setdefault(cell["op_id"], []).append(cell["status"])
        picked = dict(picked, rank=runs.evidence_rank(picked))
        return picked, {op: worst(statuses) for op, statuses in found.items()}
    finally:
        store.conn.close()


def record_declared(db="mpsprobe.db", wheels=(), installed=None, common_mps=None,
                    torch_version=None, opinfo_cuda=False, macos=26.0, *, opinfos=None):
    """Record what PyTorch declares (see ops/declared/) into `db`; returns a summary per reading.

    Sources: the installed torch (default, unless wheels or common_mps are
    given), torch wheel files of any platform, a loose common_mps.py of
    `torch_version`, and OpInfo's CUDA dtypes (`opinfo_cuda`). A source that
    cannot be read is recorded as failed; raises MpsprobeError when none can.
    `opinfos`: the OpInfo list, when the caller has loaded it already.
    """
    from mpsprobe.db import schema, writer
    from mpsprobe.ops.declared import reading
    sources = reading.Sources(wheels=wheels, installed=installed, common_mps=common_mps,
                              torch_version=torch_version, opinfo_cuda=opinfo_cuda, macos=macos)
    readings = reading.read(sources, opinfos)
    store = open_db(db)
    try:
        summary = []
        for r in readings:
            if r.error:
                writer.record_declared_failure(store, r.torch_version, r.device, r.source,
                                               r.origin, r.error)
            else:
                writer.record_declared(store, r.torch_version, r.device, r.source, r.origin,
                                       r.tables, r.options)
            summary.append(reading.summarize(r))
    finally:
        schema.close(store)
    if not any(item["ok"] for item in summary):
        raise reading.DeclaredError("no source could be read", summary)
    return summary


def record_declared_history(db="mpsprobe.db", versions="2.0..2.13", cache_dir=None, *,
                            macos=26.0, downloader=None, list_versions=None, on_version=None):
    """Record the declarations of every torch release in `versions` (e.g. "2.0..2.13").

    Each release's macOS arm64 wheel is downloaded once into `cache_dir`
    (default: $MPSPROBE_WHEEL_CACHE, else the wheels folder of mpsprobe's cache) and read like
    a --wheel. Returns one dict per release asked for: asked, torch_version,
    ok, error, rows (recorded), seconds, readings. A release that cannot be
    listed, downloaded or read gets its error and nothing recorded; the others
    are still recorded. Raises MpsprobeError for a malformed range (before
    anything is written) and DeclaredError when no release could be recorded.
    `downloader(version, dest)` and `list_versions()` replace pip (tests);
    `on_version(item)` is called after each release.
    """
    import time
    from mpsprobe.ops.declared import history, reading
    from mpsprobe.ops.opinfo import load_op_db
    wanted = history.parse_range(versions)
    cache_dir = cache_dir or history.default_cache()
    listing_error = None
    try:
        available = (list_versions or history.pip_versions)()
    except history.DownloadError as e:        # offline: what the cache holds still counts
        available, listing_error = history.cached_versions(cache_dir), str(e)
    opinfos = load_op_db()
    results = []
    for asked, version in history.resolve(wanted, available):
        started = time.monotonic()
        item = {"asked": asked, "torch_version": version, "ok": False, "error": None,
                "rows": 0, "readings": []}
        try:
            if version is None:
                raise history.DownloadError(listing_error or f"PyPI has no torch {asked} release")
            path = history.fetch(version, cache_dir, downloader or history.pip_download)
            item["wheel"] = os.path.basename(path)
            item["readings"] = record_declared(db, wheels=[path], installed=False, macos=macos,
                                               opinfos=opinfos)
            item["ok"] = True
            item["rows"] = sum(r["rows"] for r in item["readings"] if r["ok"])
        except MpsprobeError as e:
            item["error"] = str(e)
            item["readings"] = getattr(e, "summary", [])
        item["seconds"] = round(time.monotonic() - started, 1)
        results.append(item)
        if on_version:
            on_version(item)
    if not any(item["ok"] for item in results):
        raise reading.DeclaredError("no release could be recorded", results)
    return results


def build_knowledge(path, versions=None, wheels=(), installed=None, cache_dir=None, *,
                    on_version=None, downloader=None, list_versions=None, opinfos=None):
    """Write the knowledge base file (ops/declared/bundle.py) for these torch releases.

    `versions` ("2.0..2.15") downloads each release's macOS arm64 wheel as
    record_declared_history does; else `wheels` and/or the installed torch
    (default when neither is given). Nothing is recorded in any database.
    Returns one dict per release: asked, torch_version, ok, why (it failed), seconds.
    Raises MpsprobeError when no release could be read (and writes nothing).
    """
    import time
    from mpsprobe.ops.declared import bundle, history, reading, wheel
    from mpsprobe.ops.opinfo import load_op_db
    sources = []       # (asked, a thunk giving the TorchFiles)
    if versions is not None:
        wanted = history.parse_range(versions)
        cache_dir = cache_dir or history.default_cache()
        listing_error = None
        try:
            available = (list_versions or history.pip_versions)()
        except history.DownloadError as e:
            available, listing_error = history.cached_versions(cache_dir), str(e)
        for asked, version in history.resolve(wanted, available):
            def files(asked=asked, version=version):
                if version is None:
                    raise history.DownloadError(listing_error or f"PyPI has no torch {asked} release")
                return wheel.from_wheel(history.fetch(version, cache_dir,
                                                      downloader or history.pip_download))
            sources.append((asked, files))
    sources += [(w, lambda w=w: wheel.from_wheel(w)) for w in wheels]
    if installed or (installed is None and versions is None and not wheels):
        sources.append(("installed", wheel.installed))
    opinfos = load_op_db() if opinfos is None else opinfos
    entries, results = {}, []
    for asked, files in sources:
        started = time.monotonic()
        item = {"asked": asked, "torch_version": None, "ok": False, "why": None}
        try:
            release, found = bundle.entry(files(), opinfos)
            item.update(torch_version=release, ok=True,
                        kernels=sum(len(v) for v in found["kernels"].values()),
                        rows=len(found["declared"]),
                        failed_sources=sorted(k for k, v in found["sources"].items() if v))
            entries[release] = found
        except MpsprobeError as e:
            item["why"] = str(e)
        item["seconds"] = round(time.monotonic() - started, 1)
        results.append(item)
        if on_version:
            on_version(item)
    if not entries:
        raise reading.DeclaredError("no release could be read", results)
    raw = bundle.dumps(bundle.bundle(entries, wheel.installed().torch_version))
    scratch = f"{path}.part"
    try:
        with open(scratch, "wb") as f:
            f.write(raw)
        os.replace(scratch, path)
    except OSError as e:
        raise MpsprobeError(f"--bundle {path}: {e.strerror}") from None
    return results


def merge(sources, output, say=lambda report: None, unverified=False):
    """Merge mpsprobe databases and bundles into `output`; returns a report per source.

    A bundle is verified first and refused unless it passes (`unverified=True`
    takes it anyway)."""
    from mpsprobe.db.merge import merge as merge_dbs
    return merge_dbs(sources, output, say=say, unverified=unverified)


def submit(db, output, run_id=None):
    """Write a run of `db` (the run picker's, or `run_id`) as a bundle to `output`
    (.json, or .json.gz): its rows, its provenance and a content hash. Returns the
    bundle's dict."""
    from mpsprobe.db import bundle
    return bundle.write(str(db), str(output), run_id=run_id)


def verify(path, against=None):
    """Check a bundle: its hash, its consistency, its provenance; flag for review what
    contradicts MPS's rules and, with `against` (a database), the declaration and every
    other machine. Returns a Verdict (`ok`, `problems`, `flags`)."""
    from mpsprobe.db import bundle
    return bundle.verify(str(path), against=str(against) if against else None)


def migrate(path):
    """Bring a database up to this schema version; returns (version before, version now)."""
    from mpsprobe.db.schema import migrate as migrate_db
    return migrate_db(str(path))
