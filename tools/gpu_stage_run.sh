#!/usr/bin/env bash
# gpu_stage_run.sh: on a GPU machine without this project's libraries (see
# tools/gpu_stage.sh), as root from the repository root: unpacks the staged .debs
# (never over a file that exists), the build's archive (put where its test lists
# point: the path it was built at is linked here when it differs and does not exist;
# the script stops if that path holds something else) and the data, then runs the
# checks in the order of what they are worth, each stopped at its own limit and all
# of them within STAGE_SECONDS (480; a lent machine's command may run 600 s, and
# its session has 15 minutes of device time, start-up included):
#   1. validation/bench/gpu_mfu.sh with the default attention kernels (the issue's
#      target: GPT-2 124M at 16 x 1024 in bf16-mixed)             -> mfu.log
#   2. ctest -L gpu but gpu.pipeline_on_gpu                         -> ctest.log
#   3. gpu_mfu.sh with TRAINER_CUDA_ATTENTION=mma                   -> mfu.log
#   4. gpu.pipeline_on_gpu (its layouts staged on one GPU: slow)    -> ctest.log
#   5. gpu_attention_bench (the two attention forms alone)          -> bench.log
#   6. gpu_mfu.sh with dropout 0.1 at every site (its cost: Philox
#      draws in the attention kernels, two element-wise passes)     -> mfu.log
#   7. compute-sanitizer on the kernel tests                        -> sanitizer.log
#   8. gpu_sample.sh (sampling with the key-value cache against a
#      whole window per token: seconds, and the same text?)         -> bench.log
#   9. gpu_gemm_bench (the model's products alone)                  -> bench.log
#  10. with PROFILE=1, validation/bench/gpu_profile.sh (a step's time per kernel
#      under ncu: minutes), its CSV kept                -> profile.log, kernels.csv
# and last summary.log: each part's exit code and seconds ("stopped at its limit"
# where the limit ended it), then the lines that say what passed and how fast.
# Every log is written as it goes under $OUT (default /tmp/gpu-stage-out), so what
# ran comes back even if the command is killed; at most 8 files, the device tool's
# limit. Knobs: STAGE_SECONDS, CTEST_ARGS, ONLY="commands" to run those instead of
# these checks (after the set-up), PROFILE=1.
ROOT=$PWD
OUT=${OUT:-/tmp/gpu-stage-out}
BUDGET=${STAGE_SECONDS:-480}
t0=$SECONDS
mkdir -p "$OUT"
PARTS=$(mktemp /tmp/gpu-stage-parts.XXXXXX)
exec 3>&1 4>&2 > >(tee "$OUT/setup.log") 2>&1
head -2 /etc/os-release; nproc; nvidia-smi -L
# tar -J needs xz, which a bare image may lack; Python's tarfile reads xz itself
unpack() {
  tar -xJf "$1" -C "$2" 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$1" "$2"
}
X=/tmp/gpu-stage-root; rm -rf "$X"; mkdir -p "$X"
for d in .gpu-stage/debs/*.deb; do dpkg -x "$d" "$X"; done
for x in lib bin sbin; do # Debian's /lib files into /usr, where merged-/usr systems keep them
  if [ -d "$X/$x" ]; then mkdir -p "$X/usr/$x"; cp -rn "$X/$x/." "$X/usr/$x/"; rm -rf "${X:?}/$x"; fi
done
cp -rn "$X/usr/." /usr/ 2>/dev/null; [ -d "$X/etc" ] && cp -rn "$X/etc/." /etc/
o=/usr/lib/x86_64-linux-gnu
[ -e $o/libopenblas.so.0 ] || ln -s openblas-pthread/libopenblas.so.0 $o/libopenblas.so.0
[ -e /usr/bin/mpirun ] || ln -s orterun /usr/bin/mpirun
[ -e /usr/bin/mpiexec ] || ln -s orterun /usr/bin/mpiexec
ldconfig
rm -rf .gpu-stage/build && unpack .gpu-stage/build.tar.xz .gpu-stage || exit 1
build_root=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' .gpu-stage/build/CMakeCache.txt)
if [ -n "$build_root" ] && [ "$(readlink -f "$build_root")" != "$ROOT" ]; then
  if [ -e "$build_root" ]; then
    echo "gpu_stage_run.sh: the build's tests point at $build_root, which is not this" \
      "checkout ($ROOT) and exists: run from there, or stage a build made here" >&2
    exit 1
  fi
  mkdir -p "$(dirname "$build_root")" && ln -s "$ROOT" "$build_root"
fi
rm -rf build && ln -s "$ROOT/.gpu-stage/build" build && ln -sfn build/trainer trainer
D=/tmp/gpu-stage-data; rm -rf "$D"; mkdir -p "$D" data
unpack .gpu-stage/data.tar.xz "$D" && cp -rn "$D/data/." data/
libdirs=""
for lib in libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
  p=$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -1)
  echo "$lib: ${p:-not found}"
  [ -n "$p" ] && libdirs="$libdirs:$(dirname "$p")"
done
export LD_LIBRARY_PATH=$o/openblas-pthread$libdirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
[ -x /usr/bin/python3 ] || ln -s "$(command -v python3)" /usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ldd build/trainer | grep "not found"
./trainer --version
echo "set-up: $((SECONDS - t0)) s"
if [ -n "${ONLY:-}" ]; then eval "$ONLY"; exit; fi

# part LOG NAME SECONDS COMMAND...: COMMAND's output appended to $OUT/LOG.log, the
# command stopped (with what it started) after SECONDS or at the end of the budget,
# whichever comes first; its exit code and time noted for the summary.
part() {
  local log=$1 name=$2 max=$3 left t s rc
  shift 3
  left=$((BUDGET - (SECONDS - t0)))
  t=$((max < left ? max : left))
  if [ "$t" -lt 15 ]; then
    echo "$name: not run, the budget of $BUDGET s is spent" >>"$PARTS"
    return
  fi
  echo "== $name (at most $t s)" >>"$OUT/$log.log"
  s=$SECONDS
  timeout -k 10 "$t" "$@" 2>&1 | tee -a "$OUT/$log.log"
  rc=${PIPESTATUS[0]}
  echo "$name: exit $rc in $((SECONDS - s)) s$([ "$rc" = 124 ] && echo ", stopped at its limit")" \
    >>"$PARTS"
}
exec 1>&3 2>&4 # the set-up's log ends here; each part writes its own
part mfu mfu_wmma 150 env GEMM_BENCH=0 validation/bench/gpu_mfu.sh
# the kernels and the trainer at 1-2 ranks, then the other attention form's speed, then
# the pipeline layouts (on one GPU, 2-8 ranks staged through host copies: slow)
# shellcheck disable=SC2086  # CTEST_ARGS is words
part ctest ctest 200 bash -c \
  "cd build && ctest -L gpu -E pipeline_on_gpu --output-on-failure ${CTEST_ARGS:-}"
part mfu mfu_mma 120 env GEMM_BENCH=0 TRAINER_CUDA_ATTENTION=mma validation/bench/gpu_mfu.sh
# shellcheck disable=SC2086
part ctest ctest_pipeline 180 bash -c \
  "cd build && ctest -R pipeline_on_gpu --output-on-failure ${CTEST_ARGS:-}"
part bench attention_bench 90 build/validation/gpu_attention_bench
part mfu mfu_dropout 100 env GEMM_BENCH=0 STEPS=20 \
  EXTRA="model.embd_pdrop=0.1 model.attn_pdrop=0.1 model.resid_pdrop=0.1" \
  validation/bench/gpu_mfu.sh
CS=$(command -v compute-sanitizer || find /usr/local /opt -name compute-sanitizer -type f | head -1)
part sanitizer sanitizer 180 bash -c \
  "'$CS' --error-exitcode 9 build/validation/test_cuda_kernels 2>&1 | tail -5; exit \${PIPESTATUS[0]}"
part bench sample 90 validation/bench/gpu_sample.sh
# the products alone do not depend on this checkout's kernels: last
part bench gemm_bench 90 build/validation/gpu_gemm_bench 16 1024 989
if [ "${PROFILE:-0}" = 1 ]; then
  part profile profile 300 env CSV="$OUT/kernels.csv" validation/bench/gpu_profile.sh
fi
# the lines that answer "did it pass, how fast", from every log, in one place
{
  echo "== summary (set-up and checks: $((SECONDS - t0)) s of a $BUDGET s budget)"
  cat "$PARTS"
  grep -hE "tests passed|\(Failed\)|\*\*\*Failed|\*\*\*Timeout|Skipped" "$OUT/ctest.log"
  grep -hE "^(== validation|trainer:|time:|loss:|skipped|the trainer failed|the loss diverged)" "$OUT/mfu.log"
  grep -hE "^(kernels|wmma|mma) |largest difference|^one training step|^  (fp32|bf16|fp16):|^sample" \
    "$OUT/bench.log"
} 2>/dev/null | tee "$OUT/summary.log"
rm -f "$PARTS"
