#!/usr/bin/env sh
# On a GPU machine without network: the full default sweep and the model checks,
# logs and databases under $OUT, then a short summary (exit codes, every ≠/✗/⚠
# line, the speed lines, the sweep's mismatches) on stdout and in $OUT/summary.txt.
# Build the packages first (build_portable.sh).
#
#   sh benchmarks/build_portable.sh build/bench-pkgs 3.12
#   OUT=out sh benchmarks/gpu_checks.sh                     # sweep, then the 16 checks
#   STEPS=checks MODELS="resnet50 vit_b_16" OUT=out sh benchmarks/gpu_checks.sh
#
# The sweep takes about 3 minutes on an H200, each check under 4 (each line
# under a 10-minute limit: the sweep alone, then one or two models at a time).
#
# STEPS: "sweep checks" (default), or either alone. MODELS: any of resnet50
# mobilenet_v3_small vit_b_16 hf_bert (default all); each is checked forward and
# --train, with the device's default modes and with --strict-precision.
set -u
export PYTHONPATH=$PWD/build/bench-pkgs
OUT=${OUT:-out}
STEPS=${STEPS:-sweep checks}
MODELS=${MODELS:-resnet50 mobilenet_v3_small vit_b_16 hf_bert}
mkdir -p "$OUT/checks"
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/machine.txt" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt" >> "$SUMMARY"

spec_of() {
    case $1 in
        hf_bert) echo "benchmarks/models/hf_bert.py" ;;
        *) echo "torchvision:$1 --input 2,3,224,224" ;;
    esac
}

case " $STEPS " in *" sweep "*)
    # 1. The full default sweep (every pass the probe plans), timed.
    /usr/bin/time -f "wall %e s, peak RSS %M KB" python3 -m mpsprobe run --device cuda \
        --workers ${WORKERS:-4} --db "$OUT/sweep.db" > "$OUT/sweep.log" 2>&1
    echo "sweep: exit $?; $(tail -n 1 "$OUT/sweep.log")" >> "$SUMMARY"
    python3 - "$OUT/sweep.db" >> "$SUMMARY" 2>&1 <<'EOF'
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
counts = conn.execute("SELECT pass, status, count(*) FROM results GROUP BY pass, status ORDER BY pass, status")
print("  statuses:", "; ".join(f"{p} {s} {n}" for p, s, n in counts))
kinds = conn.execute("SELECT reason_kind, count(*) FROM results WHERE status = 'pass' AND reason_kind IS NOT NULL "
                     "GROUP BY reason_kind")
print("  passes by an allowance:", "; ".join(f"{k} {n}" for k, n in kinds) or "none")
rows = conn.execute("SELECT op_id, dtype, pass, reason FROM results WHERE status = 'mismatch' "
                    "ORDER BY pass, op_id, dtype").fetchall()
print(f"  mismatches: {len(rows)}")
for op, dtype, pass_, reason in rows:
    print(f"  ≠ {op} {dtype} {pass_}: {(reason or '')[:150]}")
EOF
;; esac

case " $STEPS " in *" checks "*)
    # 2. Models, forward and --train, with the device's default modes and strict precision.
    n=0
    for model in $MODELS; do
        for mode in "" "--train" "--strict-precision" "--train --strict-precision"; do
            n=$((n + 1))
            log="$OUT/checks/$n-$model$(echo "$mode" | tr -d ' -' | sed 's/^./-&/').log"
            timeout 300 python3 -m mpsprobe check $(spec_of "$model") --run --device cuda $mode \
                --db "$OUT/checks.db" > "$log" 2>&1
            echo "check $model ${mode:-(default modes)}: exit $?" >> "$SUMMARY"
            # the counts, the precision and speed lines, each failing op with its message
            awk 'failing && /^    /{print "  " $0} {failing = 0}
                 /^(≠|✗|⚠) /{print; failing = 1; next}
                 /^  (✗|≠|⚠|\?|~|✓) [0-9]|^precision:|measured:|per call \(breakdown\)|^Traceback|Error:/{print}' "$log" \
                | sed 's/^/    /' | cut -c1-240 >> "$SUMMARY"
        done
    done
;; esac
cat "$SUMMARY"
