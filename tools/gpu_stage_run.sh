#!/usr/bin/env bash
# gpu_stage_run.sh: on a GPU machine without this project's libraries (see
# tools/gpu_stage.sh), as root from the repository root: unpacks the staged .debs
# (never over a file that exists), puts the staged build where its test lists point
# (the path it was built at is linked here when it differs and does not exist; the
# script stops if that path holds something else), then runs
# ctest -L gpu, validation/bench/gpu_mfu.sh (with the default attention kernels, then
# with TRAINER_CUDA_ATTENTION=mma), the two attention forms alone
# (gpu_attention_bench) and compute-sanitizer on the kernel tests, each log under
# $OUT (default /tmp/gpu-stage-out). Knobs: CTEST_ARGS, ONLY="commands" to run
# those instead of these checks, and PROFILE=1 to add
# validation/bench/gpu_profile.sh (a step's time per kernel under ncu: minutes) after
# them, its CSV kept under $OUT. The last log, summary.log, collects the lines that
# say what passed and how fast.
ROOT=$PWD
OUT=${OUT:-/tmp/gpu-stage-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/setup.log") 2>&1
head -2 /etc/os-release; nproc; nvidia-smi -L
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
mkdir -p data/brown && cp -n .gpu-stage/data/brown/* data/brown/
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
if [ -n "${ONLY:-}" ]; then eval "$ONLY"; exit; fi
exec > >(tee "$OUT/ctest.log") 2>&1
(cd build && ctest -L gpu --output-on-failure ${CTEST_ARGS:-})
exec > >(tee "$OUT/mfu.log") 2>&1
validation/bench/gpu_mfu.sh
exec > >(tee "$OUT/mfu_mma.log") 2>&1
TRAINER_CUDA_ATTENTION=mma validation/bench/gpu_mfu.sh
exec > >(tee "$OUT/attention.log") 2>&1
build/validation/gpu_attention_bench
exec > >(tee "$OUT/sanitizer.log") 2>&1
CS=$(command -v compute-sanitizer || find /usr/local /opt -name compute-sanitizer -type f | head -1)
"$CS" --error-exitcode 9 build/validation/test_cuda_kernels 2>&1 | tail -5
echo "compute-sanitizer exit ${PIPESTATUS[0]}"
if [ "${PROFILE:-0}" = 1 ]; then
  exec > >(tee "$OUT/profile.log") 2>&1
  CSV="$OUT/kernels.csv" validation/bench/gpu_profile.sh
fi
# the lines that answer "did it pass, how fast", from every log, in one place
exec > >(tee "$OUT/summary.log") 2>&1
echo "== summary"
grep -hE "tests passed|\(Failed\)|\*\*\*Failed|Skipped" "$OUT/ctest.log"
for f in mfu mfu_mma; do
  echo "-- $f: $(grep -hE '^(trainer:|loss:|== )' "$OUT/$f.log" | tr '\n' ' ')"
done
grep -hE "^(kernels|wmma|mma) |largest difference" "$OUT/attention.log"
grep -h "compute-sanitizer exit" "$OUT/sanitizer.log"
