#!/usr/bin/env bash
# mnist.sh: throughput benchmark, the trainer against PyTorch on the same CPU workload.
# Prints figures; it is not a pass/fail test (exit status 0 unless something fails to run).
#
# Run from the repository root after building (scripts/build.sh):
#     validation/bench/mnist.sh
# Knobs (environment): REPS (trainer runs and torch epochs per case, median taken; 3),
# QUIET_WAIT (seconds to wait for an idle machine before each case; 60),
# QUIET_PCT (machine-wide CPU busy % that counts as idle; 15), CASES ("a b c").
# Takes about 2-4 minutes on an idle 2-core machine.
#
# What it measures: samples/s of the training loop only (no start-up, data loading or
# evaluation) for one epoch (468 steps) of Fashion-MNIST's 60,000 training images,
# preloaded in memory, global batch 128, fp32, SGD momentum 0.9, lr 0.05 (constant):
#   (a) MLP 784-256-256-10: trainer 1 rank x 2 threads  vs torch, 2 intra-op threads
#   (b) MLP 784-256-256-10: trainer 2 ranks x 1 thread  vs torch DDP (gloo, loopback),
#       2 processes x 1 thread, 64 samples per process per step
#   (c) CNN (LeNet-5 style, model.name=cnn): as (a)
# Trainer figure: "samples_per_second" of summary.json (timed around the training steps
# only), median of REPS runs. Torch figure: median of REPS timed epochs after a short
# untimed warm-up (validation/bench/torch_mnist.py). Also prints the trainer's GFLOP/s
# for (a) beside this machine's measured fp32 GEMM ceiling (best of several 2048^3
# torch.mm = OpenBLAS sgemm calls with 1 and 2 threads), and the configuration of
# both sides (BLAS library and kernel, threads, CPU affinity, oneDNN).
#
# PyTorch is Debian's python3-torch (/usr/bin/python3), tuned rather than as shipped:
# see TORCH_ENV_* below for the settings and why; the script prints what it used.
# The machine may be shared: before each case the script waits (up to QUIET_WAIT s)
# for other load to go away and prints the busy % it saw, so noisy figures show.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
PY=/usr/bin/python3
TRAINER=./trainer
TORCH=validation/bench/torch_mnist.py
REPS=${REPS:-3}
QUIET_WAIT=${QUIET_WAIT:-60}
QUIET_PCT=${QUIET_PCT:-15}
CASES=${CASES:-a b c}
DATA=/usr/share/datasets/fashion-mnist

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_orte_execute_quiet=1

# PyTorch settings (chosen by measurement on this machine, see the report in
# validation/bench/README-less header above; all are printed with the results):
#  - OpenBLAS core: Debian's DYNAMIC_ARCH OpenBLAS 0.3.21 already picks "Zen" on this
#    EPYC (AVX2, no AVX-512); Zen uses the Haswell sgemm kernels, and forcing
#    OPENBLAS_CORETYPE=Haswell measured the same, so the default is kept.
#  - torch 1.13 runs nn.Linear's GEMMs as single OpenBLAS calls from the main thread and
#    does not size OpenBLAS's own pthread pool; with 2 threads the GEMMs need that pool
#    (OPENBLAS_NUM_THREADS=2), with 1 thread per process it must be 1.
#  - oneDNN (MKLDNN) runs the CNN's convolutions (torch's default for batch >= 16).
TORCH_ENV_2T=${TORCH_ENV_2T:-OPENBLAS_NUM_THREADS=2}
TORCH_ENV_1T=${TORCH_ENV_1T:-OPENBLAS_NUM_THREADS=1}
TORCH_ARGS_CNN=${TORCH_ARGS_CNN:-}

for f in "$TRAINER" "$PY" "$DATA/train-images-idx3-ubyte.gz"; do
  [ -e "$f" ] || { echo "mnist.sh: missing $f (build with scripts/build.sh first)" >&2; exit 1; }
done

WORK=$(mktemp -d /tmp/bench_mnist.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# machine-wide CPU busy % over one second, from /proc/stat
busy_pct() {
  local c u n s i w q sq st rest t1 i1 t2 i2
  read -r c u n s i w q sq st rest </proc/stat
  t1=$((u + n + s + i + w + q + sq + st)) i1=$((i + w))
  sleep 1
  read -r c u n s i w q sq st rest </proc/stat
  t2=$((u + n + s + i + w + q + sq + st)) i2=$((i + w))
  echo $((100 * ((t2 - t1) - (i2 - i1)) / (t2 - t1 > 0 ? t2 - t1 : 1)))
}

# wait_quiet: wait up to QUIET_WAIT s for the machine to be idle; sets BUSY (last %)
wait_quiet() {
  local t0=$SECONDS
  BUSY=$(busy_pct)
  while [ "$BUSY" -gt "$QUIET_PCT" ] && [ $((SECONDS - t0)) -lt "$QUIET_WAIT" ]; do
    BUSY=$(busy_pct)
  done
  [ "$BUSY" -gt "$QUIET_PCT" ] && echo "  warning: machine still ${BUSY}% busy with other work after ${QUIET_WAIT}s; figures will be low and noisy" >&2
  BUSYS+=("$BUSY")
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {if (NR % 2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

json() { # json FILE EXPR: a value of a JSON file (EXPR on the parsed object d)
  "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

# trainer_case NP THREADS DECK BIND: REPS runs; sets TR_SPS (median), TR_GF, TR_INFO
trainer_case() {
  local np=$1 th=$2 deck=$3 bind=$4 r dir sps=() gf=() pids aff= banner
  for r in $(seq 1 "$REPS"); do
    dir=$WORK/tr_${np}_${th}_$(basename "$deck" .in)_$r
    wait_quiet
    timeout -k 5 300 mpirun $bind -np "$np" "$TRAINER" "$deck" \
      train.epochs=1 train.steps=0 train.batch_size=128 train.eval_every=0 \
      train.log_every=1000 optim.name=sgd optim.lr=0.05 optim.momentum=0.9 \
      optim.schedule=constant optim.warmup_steps=0 data.prefetch=true data.shuffle=true \
      system.threads="$th" run.dir="$dir" run.progress=off >"$dir.out" 2>&1 &
    local mp=$!
    if [ "$r" = 1 ]; then # the affinity and thread count the ranks really got
      sleep 1.5
      for pid in $(pgrep -P "$mp" -x trainer); do
        aff+="$(awk '/Cpus_allowed_list/ {printf "cpus %s", $2} /^Threads/ {printf " (%s OS threads)", $2}' /proc/"$pid"/status 2>/dev/null); "
      done
    fi
    if ! wait "$mp" || [ ! -f "$dir/summary.json" ]; then
      echo "trainer failed (np $np, threads $th, $deck):" >&2; cat "$dir.out" >&2; return 1
    fi
    sps+=("$(json "$dir/summary.json" 'd["samples_per_second"]')")
    gf+=("$(json "$dir/summary.json" 'd["gflops_per_second"]')")
    echo "  trainer $(basename "$deck" .in) ${np}x${th}: run $r ${sps[-1]} samples/s, ${gf[-1]} GFLOP/s (train $(json "$dir/summary.json" 'd["train_seconds"]') s; machine ${BUSY}% busy before)" >&2
  done
  banner=$(head -1 "$WORK/tr_${np}_${th}_$(basename "$deck" .in)_1.out")
  TR_SPS=$(median "${sps[@]}")
  TR_GF=$(median "${gf[@]}")
  TR_INFO="${banner#trainer }; mpirun ${bind:-(default binding)}; ranks: ${aff%; }"
  case "$banner" in
    *"$th thread"*) ;;
    *) echo "  warning: trainer banner does not say $th threads: $banner" >&2 ;;
  esac
}

# torch_case ENV ARGS...: sets TO_SPS, TO_GF, TO_INFO
torch_case() {
  local envs=$1; shift
  local out=$WORK/torch_$RANDOM.json
  wait_quiet
  if ! env $envs "$PY" "$TORCH" --reps "$REPS" "$@" >"$out" 2>"$out.err"; then
    echo "torch failed ($envs $*):" >&2; cat "$out.err" >&2; return 1
  fi
  sed 's/^/  /' "$out.err" | grep '^  torch' >&2
  TO_SPS=$(json "$out" 'round(d["samples_per_second"], 1)')
  TO_GF=$(json "$out" 'round(d["gflops_per_second"], 2)')
  TO_INFO="$(json "$out" '"torch %s, %d intra-op thread(s) x %d process(es), OpenBLAS %s kernel %s (%d pthreads), oneDNN %s" % (d["config"]["torch"], d["config"]["torch_threads"], d["world"], d["config"]["openblas"]["config"].split()[1], d["config"]["openblas"]["core"], d["config"]["openblas"]["threads"], "on" if d["config"]["mkldnn"] else "off")'); env: ${envs:-none} $*"
}

BUSYS=()
declare -A TSPS OSPS TGF OGF TINFO OINFO
echo "== validation/bench/mnist.sh: trainer vs PyTorch, Fashion-MNIST, 1 epoch, batch 128, fp32 =="
echo "host: $(nproc) CPUs, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)," \
  "$(grep -o -w -E 'avx512f|avx2|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "trainer: $("$TRAINER" --version | head -2 | tr '\n' ' ')"
echo "(progress on stderr; REPS=$REPS)"

t_start=$SECONDS
for c in $CASES; do
  case $c in
    a) echo "-- (a) mlp, 1 rank x 2 threads vs torch 2 threads" >&2
       trainer_case 1 2 inputs/fashion_mnist.in "--bind-to none" || exit 1
       torch_case "$TORCH_ENV_2T" --model mlp --threads 2 || exit 1 ;;
    b) echo "-- (b) mlp, 2 ranks x 1 thread vs torch DDP gloo 2 x 1 thread" >&2
       trainer_case 2 1 inputs/fashion_mnist.in "" || exit 1
       torch_case "$TORCH_ENV_1T" --model mlp --threads 1 --world 2 || exit 1 ;;
    c) echo "-- (c) cnn, 1 rank x 2 threads vs torch 2 threads" >&2
       trainer_case 1 2 inputs/fashion_mnist_cnn.in "--bind-to none" || exit 1
       torch_case "$TORCH_ENV_2T" --model cnn --threads 2 $TORCH_ARGS_CNN || exit 1 ;;
    *) echo "unknown case $c" >&2; exit 1 ;;
  esac
  TSPS[$c]=$TR_SPS TGF[$c]=$TR_GF TINFO[$c]=$TR_INFO
  OSPS[$c]=$TO_SPS OGF[$c]=$TO_GF OINFO[$c]=$TO_INFO
done

echo "-- fp32 GEMM ceiling (torch.mm 2048^3, OpenBLAS, best of 7)" >&2
wait_quiet
CEIL2=$(env OPENBLAS_NUM_THREADS=2 "$PY" "$TORCH" --sgemm 2048 --threads 2 --reps 7 | "$PY" -c 'import json,sys; print(round(json.load(sys.stdin)["gflops_per_second"], 1))')
CEIL1=$(env OPENBLAS_NUM_THREADS=1 "$PY" "$TORCH" --sgemm 2048 --threads 1 --reps 7 | "$PY" -c 'import json,sys; print(round(json.load(sys.stdin)["gflops_per_second"], 1))')

label() {
  case $1 in
    a) echo "(a) mlp  1 rank x 2 thr | torch 2 thr" ;;
    b) echo "(b) mlp  2 ranks x 1 thr | DDP 2 x 1 thr" ;;
    c) echo "(c) cnn  1 rank x 2 thr | torch 2 thr" ;;
  esac
}
echo
printf '%-38s %14s %14s %9s %16s\n' "case (trainer | torch)" "trainer smp/s" "torch smp/s" "tr/torch" "GFLOP/s tr|torch"
for c in $CASES; do
  printf '%-38s %14.0f %14.0f %8.2fx %7.2f|%-7.2f\n' "$(label "$c")" "${TSPS[$c]}" "${OSPS[$c]}" \
    "$(awk -v a="${TSPS[$c]}" -v b="${OSPS[$c]}" 'BEGIN {print a / b}')" "${TGF[$c]}" "${OGF[$c]}"
done
echo
echo "fp32 GEMM ceiling (2048^3 sgemm, OpenBLAS via torch.mm, best of 7): $CEIL2 GFLOP/s on 2 threads, $CEIL1 on 1"
case " $CASES " in *" a "*)
  echo "trainer MLP (a) achieved ${TGF[a]} GFLOP/s = $(awk -v a="${TGF[a]}" -v b="$CEIL2" 'BEGIN {printf "%.1f", 100 * a / b}')% of the 2-thread ceiling" \
       "(torch: ${OGF[a]} GFLOP/s = $(awk -v a="${OGF[a]}" -v b="$CEIL2" 'BEGIN {printf "%.1f", 100 * a / b}')%)" ;;
esac
echo
echo "configuration:"
for c in $CASES; do
  echo "  ${c}) trainer: ${TINFO[$c]}"
  echo "     torch:   ${OINFO[$c]}"
done
echo "  figures: median of $REPS (trainer: runs; torch: epochs after 20 warm-up steps);" \
  "machine busy % seen before each measurement: ${BUSYS[*]} (idle threshold ${QUIET_PCT}%)"
echo "  elapsed: $((SECONDS - t_start)) s"
