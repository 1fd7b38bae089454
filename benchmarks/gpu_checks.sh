#!/usr/bin/env sh
# On a GPU machine without network: the full default sweep and model checks,
# logs and the database under $OUT. Build the packages first (build_portable.sh).
#
#   sh benchmarks/build_portable.sh build/bench-pkgs 3.12
#   OUT=out sh benchmarks/gpu_checks.sh
set -u
export PYTHONPATH=$PWD/build/bench-pkgs
OUT=${OUT:-out}
DB=$OUT/gpu.db
mp() { python3 -m mpsprobe "$@"; }
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/machine.txt" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/machine.txt" 2>&1
# 1. The full default sweep (forward and every pass the probe plans), timed.
/usr/bin/time -v python3 -m mpsprobe run --device cuda --workers ${WORKERS:-4} --db "$DB" \
    > "$OUT/sweep.log" 2>&1
# 2. Models, forward and --train, with the device's default modes and strict precision.
for spec in "torchvision:resnet50 --input 2,3,224,224" "torchvision:mobilenet_v3_small --input 2,3,224,224" \
            "torchvision:vit_b_16 --input 2,3,224,224" "benchmarks/models/hf_bert.py"; do
    for mode in "" "--train" "--strict-precision" "--train --strict-precision"; do
        echo "=== check $spec --run $mode" >> "$OUT/checks.log"
        timeout 240 python3 -m mpsprobe check $spec --run --device cuda $mode --db "$DB" \
            >> "$OUT/checks.log" 2>&1
        echo "exit $?" >> "$OUT/checks.log"
    done
done
