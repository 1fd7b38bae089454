#!/usr/bin/env sh
# On a GPU machine without network: the compiled pass (torch.compile, Inductor with Triton)
# over the whole catalogue in float32, float16, bfloat16 and int64 (DTYPES= for every dtype
# the CPU supports: about 2.5 times the cases), one sample per (op, dtype), on 16 workers,
# under a 9-minute limit; then the counts by status and every non-pass case
# with its reason. Inductor's and Triton's caches go under $OUT/cache (kept when under
# 1 GiB, so a second run shows the warm cost). Build the packages first.
#
#   sh benchmarks/build_portable.sh build/bench-pkgs 3.12
#   OUT=out sh benchmarks/gpu_compiled.sh
#   OPS='add,softmax' OUT=out sh benchmarks/gpu_compiled.sh     # a subset
#
# The run resumes where a limit stopped it: run the script again with the same OUT.
set -u
export PYTHONPATH=$PWD/build/bench-pkgs
OUT=${OUT:-out}
DEVICE=${DEVICE:-cuda}
WORKERS=${WORKERS:-16}
LIMIT=${LIMIT:-540}
OPS=${OPS:-}
DTYPES=${DTYPES-float32,float16,bfloat16,int64}
mkdir -p "$OUT/cache"
CACHE=$(cd "$OUT/cache" && pwd)
export TORCHINDUCTOR_CACHE_DIR=$CACHE/inductor TRITON_CACHE_DIR=$CACHE/triton
S=$OUT/compiled.txt
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
    python3 -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__)" 2>&1
    echo "cores $(nproc); load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "## compiled pass, dtypes ${DTYPES:-all}, samples 1, $WORKERS workers, limit $LIMIT s, cache $(du -sh "$CACHE" | cut -f1)"
} > "$S"
start=$(date +%s)
timeout "$LIMIT" python3 -m mpsprobe run --device "$DEVICE" --passes compiled --samples 1 \
    --workers "$WORKERS" --compile-timeout 120 ${OPS:+--ops "$OPS"} ${DTYPES:+--dtypes "$DTYPES"} --db "$OUT/compiled.db" \
    > "$OUT/compiled.log" 2>&1
echo "exit $? after $(( $(date +%s) - start )) s" >> "$S"
tail -n 12 "$OUT/compiled.log" >> "$S"
python3 - "$OUT/compiled.db" >> "$S" 2>&1 <<'PY'
import json, sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
run = conn.execute("SELECT id, state, wall_s FROM runs ORDER BY started DESC LIMIT 1").fetchone()
print("run", *run)
where = "run_id = ? AND pass = 'compiled'"
for row in conn.execute(f"SELECT status, reason_kind, count(*) FROM results WHERE {where} GROUP BY 1, 2 "
                        "ORDER BY 3 DESC", (run[0],)):
    print("  ", *row)
print("compile_ms median by status:")
for status, in conn.execute(f"SELECT DISTINCT status FROM results WHERE {where} AND compile_ms IS NOT NULL", (run[0],)):
    times = sorted(t for t, in conn.execute(f"SELECT compile_ms FROM results WHERE {where} AND status = ? "
                                            "AND compile_ms IS NOT NULL", (run[0], status)))
    print(f"   {status}: n={len(times)} median {times[len(times) // 2]:.0f} ms, max {times[-1]:.0f} ms")
faster = conn.execute(f"SELECT count(*) FROM results WHERE {where} AND compiled_speedup_lo > 1", (run[0],)).fetchone()[0]
slower = conn.execute(f"SELECT count(*) FROM results WHERE {where} AND compiled_speedup_hi < 1", (run[0],)).fetchone()[0]
print(f"compiled faster than eager (interval above 1): {faster}; slower (below 1): {slower}")
print("fallback ops (compiled_fallback), most common:")
seen = {}
for ops, in conn.execute(f"SELECT fallback_ops FROM results WHERE {where} AND reason_kind = 'compiled_fallback'",
                         (run[0],)):
    for op in json.loads(ops or "[]"):
        seen[op] = seen.get(op, 0) + 1
for op, n in sorted(seen.items(), key=lambda kv: -kv[1])[:40]:
    print(f"   {n:5d} {op}")
print("every non-pass, non-fallback case:")
for row in conn.execute(f"SELECT status, reason_kind, op_id, dtype, error_type, "
                        "substr(coalesce(message, reason, ''), 1, 160) FROM results WHERE "
                        f"{where} AND status NOT IN ('pass', 'fallback') ORDER BY 1, 2, 3, 4", (run[0],)):
    print("   ", " | ".join(str(x) for x in row))
PY
size=$(du -sm "$CACHE" | cut -f1)
if [ "${size:-0}" -gt 1024 ]; then
    rm -rf "$CACHE"
    echo "cache ${size} MiB: removed (over 1 GiB)" >> "$S"
else
    echo "cache ${size:-0} MiB kept under $CACHE" >> "$S"
fi
cat "$S"
