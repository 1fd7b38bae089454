#!/usr/bin/env sh
# A folder that lets the benchmark scripts run on a machine where mpsprobe is
# not installed and there is no network (a GPU box with only torch): mpsprobe
# itself plus its pure-Python dependencies, as wheels for that machine's Python.
#
#   sh benchmarks/build_portable.sh [DIR] [PYTHON_VERSION]    # default build/bench-pkgs 3.12
#   PYTHONPATH=build/bench-pkgs python3 benchmarks/sweep_throughput.py --device cuda ...
#
# torch is not included (the target machine has its own). numpy is not
# either: PyTorch's OpInfo database imports it; add it with WITH_NUMPY=1 if the
# target lacks it (a binary wheel for that Python and platform).
set -eu
DIR=${1:-build/bench-pkgs}
PYV=${2:-3.12}
cd "$(dirname "$0")/.."
rm -rf "$DIR"
python -m pip install -q --no-deps --no-compile --target "$DIR" .
python -m pip install -q --no-compile --target "$DIR" --python-version "$PYV" \
    --only-binary=:all: sqlite-utils expecttest pytest platformdirs packaging
if [ "${WITH_NUMPY:-0}" = 1 ]; then
    python -m pip install -q --no-compile --no-deps --target "$DIR" --python-version "$PYV" \
        --only-binary=:all: --platform manylinux2014_x86_64 numpy
fi
rm -rf "$DIR"/bin "$DIR"/pip "$DIR"/pip-*.dist-info
du -sh "$DIR"
