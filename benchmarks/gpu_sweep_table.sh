#!/usr/bin/env sh
# On a GPU machine without network: the full default forward sweep on CUDA at
# 1, 4 and 16 workers, samples 1 and 3, timing on and off, one fresh sweep per
# line (sweep_throughput.py), into $OUT/sweep_table.txt. Each sweep is capped
# (CAP seconds, default 45) and the table has a budget (BUDGET seconds, default
# 450), so the whole stays within about 8 minutes; a capped sweep's line says so
# and gives the cases it recorded. Build the packages first (build_portable.sh).
#
#   sh benchmarks/build_portable.sh build/bench-pkgs 3.12
#   OUT=out sh benchmarks/gpu_sweep_table.sh
#
# CONFIGS="3:on:16 1:off:4" (samples:timing:workers, in order) runs only those.
set -u
export PYTHONPATH=$PWD/build/bench-pkgs
HERE=$(dirname "$0")
CONFIGS=${CONFIGS:-"1:off:1 1:off:4 1:off:16 1:on:1 1:on:4 1:on:16 3:off:1 3:off:4 3:off:16 3:on:1 3:on:4 3:on:16"}
OUT=${OUT:-out}
CAP=${CAP:-45}
BUDGET=${BUDGET:-450}
TABLE=$OUT/sweep_table.txt
mkdir -p "$OUT"
started=$(date +%s)
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1
    echo "cores $(nproc); load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "cap ${CAP} s a sweep, budget ${BUDGET} s"
    echo
    echo "| device | samples | timing | workers | shard | pairs | cases | wall s | start-up s | cases/s | parent peak MiB | largest worker MiB | all workers MiB |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
} > "$TABLE"
for config in $CONFIGS; do
    samples=${config%%:*}
    rest=${config#*:}
    timing=${rest%%:*}
    workers=${rest#*:}
    left=$((BUDGET - ($(date +%s) - started)))
    if [ "$left" -lt 15 ]; then
        echo "| cuda | $samples | $timing | $workers | skipped: the table's budget is spent |" >> "$TABLE"
        continue
    fi
    cap=$CAP
    [ "$left" -lt "$cap" ] && cap=$left
    db=$OUT/table.db
    kept=$OUT/table-s$samples-$timing-w$workers.db
    rm -f "$kept" "$kept-wal" "$kept-shm"
    log=$OUT/sweep-s$samples-$timing-w$workers.log
    t0=$(date +%s.%N)
    timeout -k 5 "$cap" python3 "$HERE/sweep_throughput.py" --device cuda --samples "$samples" \
        --timing "$timing" --workers "$workers" --keep-db "$db" > "$log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    row=$(grep '^| cuda' "$log" | tail -1)
    if [ "$rc" = 0 ] && [ -n "$row" ]; then
        echo "$row" >> "$TABLE"
    else
        cases=$(python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM results').fetchone()[0])" "$kept" 2>/dev/null || echo "?")
        echo "| cuda | $samples | $timing | $workers | all | capped: exit $rc after $(python3 -c "print(round($t1 - $t0, 1))") s, $cases cases recorded | | | | | | | |" >> "$TABLE"
    fi
    rm -f "$kept" "$kept-wal" "$kept-shm"
done
echo "total $(($(date +%s) - started)) s; load $(cut -d' ' -f1-3 /proc/loadavg)" >> "$TABLE"
cat "$TABLE"
