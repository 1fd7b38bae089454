#!/usr/bin/env sh
# On a GPU machine without network: `check --run --device cuda` of a model calling
# eigh, svd and qr (benchmarks/models/eigh_head.py), forward and --train, with the
# device's default modes and with --strict-precision: four exit codes and every
# ≠/✗/⚠ line, on stdout and in $OUT/eigh_summary.txt. Exit 0 in all four means no
# decomposition was called wrong for returning another sign or phase.
# Build the packages first (build_portable.sh); about a minute per check on an H200.
#
#   sh benchmarks/build_portable.sh build/bench-pkgs 3.12
#   OUT=out sh benchmarks/gpu_check_eigh.sh
set -u
export PYTHONPATH=$PWD/build/bench-pkgs
OUT=${OUT:-out}
mkdir -p "$OUT/checks"
SUMMARY=$OUT/eigh_summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$SUMMARY" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$SUMMARY" 2>&1
for train in "" "--train"; do
    for strict in "" "--strict-precision"; do
        name="eigh_head${train:+_train}${strict:+_strict}"
        python3 -m mpsprobe check benchmarks/models/eigh_head.py --run --device cuda $train $strict \
            --db "$OUT/checks/$name.db" > "$OUT/checks/$name.log" 2>&1
        code=$?
        echo "$name: exit $code" >> "$SUMMARY"
        grep -E "^(≠|✗|⚠)" "$OUT/checks/$name.log" | sed 's/^/  /' >> "$SUMMARY"
    done
done
cat "$SUMMARY"
