#!/usr/bin/env bash
# test.sh: install, build and run the whole test suite (CTest).
# Extra arguments go to ctest, e.g. scripts/test.sh -L unit.
# BUILD_DIR and CMAKE_ARGS (e.g. "-DTRAINER_SANITIZE=ON") select another build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install_deps.sh
# shellcheck disable=SC2086
scripts/build.sh ${CMAKE_ARGS:-}
scripts/prepare_data.sh >/dev/null
scripts/fetch_gpt2_bpe.sh >/dev/null
# the Brown text and its token files, with the tokenize of the build under test
TOKENIZE="${BUILD_DIR:-$root/build}/tokenize" scripts/prepare_text.sh >/dev/null
export OMPI_MCA_rmaps_base_oversubscribe=1
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# tests side by side, one per core (TEST_JOBS to change): most of a test's time is
# start-up, waits and messages, not arithmetic (validation/CMakeLists.txt says which
# run alone)
ctest --test-dir "${BUILD_DIR:-$root/build}" --output-on-failure \
  --parallel "${TEST_JOBS:-$(nproc)}" "$@"
