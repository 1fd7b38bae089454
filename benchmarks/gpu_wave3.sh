#!/usr/bin/env sh
# On a GPU machine without network, in one sitting: the default forward sweep on one
# worker (how a Mac runs it) and every pass on the default workers, each with its
# start-up apart (sweep_throughput.py); the non-pass cases of both; and `check --run`
# of a model calling eigh, svd and qr, forward and --train. Logs and databases under
# $OUT, the figures in $OUT/wave3.txt (and on stdout). Build the packages first.
#
#   sh benchmarks/build_portable.sh build/bench-pkgs 3.12
#   OUT=out sh benchmarks/gpu_wave3.sh
#   STEPS="forward all" OUT=out sh benchmarks/gpu_wave3.sh     # a subset
#   STEPS="warm forward all" OUT=out sh benchmarks/gpu_wave3.sh   # CUDA's kernel cache filled first
#   STEPS="bytecode warm forward all" OUT=out sh benchmarks/gpu_wave3.sh   # and Python's bytecode first
#
# "warm" runs the forward sweep once on every core without keeping its figures: on a fresh
# machine CUDA compiles ~70 special functions' jiterator kernels on first use (minutes on one
# worker), which a Mac's sweep does not pay and the goals leave apart.
#
# About 8 minutes on an H200 (each step under its own limit).
set -u
export PYTHONPATH=$PWD/build/bench-pkgs
OUT=${OUT:-out}
STEPS=${STEPS:-forward all eigh}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
S=$OUT/wave3.txt
{
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
    python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" 2>&1
    echo "cores $(nproc); load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u '+%Y-%m-%d %H:%M UTC')"
} > "$S"

non_pass() {   # the non-pass cases of a database, counted by pass, status and op
    python3 - "$1" <<'EOF'
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
for row in conn.execute("SELECT pass, status, count(*) FROM results GROUP BY 1, 2 ORDER BY 1, 2"):
    print("  ", *row)
for row in conn.execute("SELECT pass, status, op_id, dtype, substr(coalesce(reason, message, ''), 1, 140) "
                        "FROM results WHERE status IN ('mismatch', 'error', 'crash', 'timeout') "
                        "ORDER BY CASE status WHEN 'crash' THEN 0 WHEN 'timeout' THEN 1 WHEN 'error' THEN 2 ELSE 3 END, "
                        "1, 3 LIMIT 80"):
    print("    ", " | ".join(str(x) for x in row))
EOF
}

case " $STEPS " in *" bytecode "*)
    # A pip install writes each module's bytecode; an image built without it (or a Python run
    # with PYTHONDONTWRITEBYTECODE) compiles every module a worker imports from source, in
    # every worker, including modules imported in the middle of a sweep.
    site=$(python3 -c "import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))")
    start=$(date +%s)
    python3 -m compileall -q -j 0 "$site" > "$OUT/bytecode.txt" 2>&1
    rc=$?
    echo "## bytecode for $site written in $(( $(date +%s) - start )) s (exit $rc)" >> "$S"
esac
case " $STEPS " in *" warm "*)
    # Every worker at once, no timing: the kernels are compiled in parallel into CUDA's on-disk
    # cache, which the timed one-worker sweep then reads.
    echo "## warm-up: forward, samples 3, no timing, $(nproc) workers (figures not kept)" >> "$S"
    timeout 400 python3 benchmarks/sweep_throughput.py --device "$DEVICE" --samples 3 --timing off \
        --workers "$(nproc)" > "$OUT/warm.txt" 2> "$OUT/warm.err"
    echo "exit $?" >> "$S"
    tail -n 3 "$OUT/warm.txt" >> "$S"
esac
case " $STEPS " in *" forward "*)
    echo "## forward, samples 3, timing on, 1 worker" >> "$S"
    timeout 420 python3 benchmarks/sweep_throughput.py --device "$DEVICE" --samples 3 --timing on \
        --workers 1 --keep-db "$OUT/forward1.db" >> "$S" 2> "$OUT/forward1.err"
    echo "exit $?" >> "$S"
    non_pass "$OUT/forward1-s3-on-w1.db" >> "$S" 2>&1
esac
case " $STEPS " in *" all "*)
    echo "## every pass, samples 3, timing on, default workers" >> "$S"
    timeout 300 python3 benchmarks/sweep_throughput.py --device "$DEVICE" --samples 3 --timing on \
        --workers 0 --passes forward,backward,inplace,out --keep-db "$OUT/all.db" >> "$S" 2> "$OUT/all.err"
    echo "exit $?" >> "$S"
    non_pass "$OUT/all-s3-on-w0.db" >> "$S" 2>&1
esac
case " $STEPS " in *" eigh "*)
    for train in "" "--train"; do
        name="eigh_head${train:+_train}"
        timeout 240 python3 -m mpsprobe check benchmarks/models/eigh_head.py --run --device "$DEVICE" $train \
            --db "$OUT/$name.db" > "$OUT/$name.log" 2>&1
        echo "## check $name --device $DEVICE: exit $?" >> "$S"
        grep -E "^(≠|✗|⚠|\?)" "$OUT/$name.log" | sed 's/^/  /' >> "$S"
        tail -n 3 "$OUT/$name.log" | sed 's/^/  /' >> "$S"
    done
esac
cat "$S"
