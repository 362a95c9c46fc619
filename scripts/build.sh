#!/usr/bin/env bash
# build.sh: configure and build into build/ (or $BUILD_DIR); extra arguments go to
# cmake's configure step, e.g. scripts/build.sh -DTRAINER_CUDA=OFF.
# Leaves ./trainer in the repository root (a link to the binary).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j"$(nproc)"
