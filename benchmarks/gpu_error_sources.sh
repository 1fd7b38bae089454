#!/usr/bin/env sh
# On a GPU machine: probe a few ops (forward and backward), then, for every
# (op, dtype, pass) that came out `mismatch`, print where its error comes from
# (error_sources.py: target, CPU and "computed wide, rounded once" against the truth,
# and the spread over random draws). Into $OUT/error_sources.txt.
#
#   OPS='nn.functional.batch_norm*,native_batch_norm,svd_lowrank' OUT=out sh benchmarks/gpu_error_sources.sh
set -u
export PYTHONPATH=$PWD/build/bench-pkgs
OUT=${OUT:-out}
OPS=${OPS:-"nn.functional.batch_norm*,native_batch_norm,_native_batch_norm_legit,_batch_norm_with_update,nn.functional.instance_norm,nn.functional.group_norm,nn.functional.layer_norm,svd_lowrank,pca_lowrank"}
DEVICE=${DEVICE:-cuda}
mkdir -p "$OUT"
REPORT=$OUT/error_sources.txt
db=/tmp/error_sources.db
rm -f "$db"*
python3 -m mpsprobe run --device "$DEVICE" --ops "$OPS" --passes forward,backward --workers 2 \
    --db "$db" > "$OUT/error_sources_run.log" 2>&1
tail -n 3 "$OUT/error_sources_run.log" > "$REPORT"
python3 - "$db" <<'PY' > /tmp/mismatched.txt
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1])
for op, dtype, pass_, reason in conn.execute(
        "SELECT op_id, dtype, pass, reason FROM results WHERE status = 'mismatch' ORDER BY op_id, dtype, pass"):
    print(op, dtype, pass_, (reason or "").replace("\n", " ")[:200], sep="\t")
PY
cat /tmp/mismatched.txt >> "$REPORT"
cut -f1-3 /tmp/mismatched.txt | sort -u | while IFS="$(printf '\t')" read -r op dtype pass_; do
    flag=""; [ "$pass_" = backward ] && flag=--backward
    draws=1; case $op in *lowrank*) draws=8 ;; esac
    python3 "$(dirname "$0")/error_sources.py" --device "$DEVICE" --op "$op" --dtype "$dtype" $flag \
        --draws $draws >> "$REPORT" 2>&1
done
cat "$REPORT"
