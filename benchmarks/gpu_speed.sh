#!/usr/bin/env sh
# On a GPU machine without network: the full default sweep, the default op set's
# speed ladders and the ResNet-50 / BERT-base batch sweeps; logs and the
# database under $OUT. Build the packages first (build_portable.sh).
#
#   sh benchmarks/build_portable.sh build/bench-pkgs 3.12
#   OUT=out sh benchmarks/gpu_speed.sh
set -u
export PYTHONPATH=$PWD/build/bench-pkgs
OUT=${OUT:-out}
DB=$OUT/speed.db
mkdir -p "$OUT"
/usr/bin/time -f "wall %e s" python3 -m mpsprobe run --device cuda --workers ${WORKERS:-4} --db "$OUT/sweep.db" \
    > "$OUT/sweep.log" 2>&1
/usr/bin/time -f "wall %e s" python3 -m mpsprobe bench --device cuda --op-budget 3 --rung-budget 0.5 --db "$DB" \
    > "$OUT/bench.log" 2>&1
for model in resnet50 bert_base; do
    /usr/bin/time -f "wall %e s" python3 -m mpsprobe check benchmarks/models/$model.py --run --device cuda \
        --batch 1,2,4,8,16,32,64 --db "$DB" --fail-on never > "$OUT/batch_$model.log" 2>&1
done
