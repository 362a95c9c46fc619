#!/usr/bin/env bash
# mnist.sh: throughput benchmark, the trainer against PyTorch on the same CPU workload.
# Prints figures; it is not a pass/fail test (exit status 0 unless something fails to run).
#
# Run from the repository root after building (scripts/build.sh):
#     validation/bench/mnist.sh
# Knobs (environment): REPS (trainer runs and torch epochs per case, median taken; 3),
# CASES (subset of "a b c"), QUIET_WAIT (seconds to wait for an idle machine before
# each measurement; 60), QUIET_PCT (machine-wide CPU busy % that counts as idle; 10).
# Takes about 2-3 minutes on an idle 2-core machine (more if it has to wait for quiet).
#
# What it measures: samples/s of the training loop only (no start-up, data loading or
# evaluation) over one epoch (468 steps) of Fashion-MNIST's 60,000 training images,
# preloaded in memory, global batch 128, fp32, cross-entropy, SGD momentum 0.9,
# lr 0.05 constant:
#   (a) MLP 784-256-256-10: trainer 1 rank x 2 threads (mpirun --bind-to none)
#       vs torch in one process, torch.set_num_threads(2)
#   (b) MLP 784-256-256-10: trainer 2 ranks x 1 thread (mpirun's default binding)
#       vs torch DistributedDataParallel over gloo on loopback, 2 processes x 1 thread,
#       64 samples per process per step
#   (c) CNN (LeNet-5 style, the trainer's model.name=cnn): as (a)
# Trainer figure: "samples_per_second" of its summary.json (timed around the training
# steps only), median of REPS runs. Torch figure (validation/bench/torch_mnist.py):
# median of REPS timed epochs after 20 untimed warm-up steps.
# Also prints the trainer's GFLOP/s for (a) beside this machine's measured fp32 GEMM
# ceiling (best of 7 torch.mm 2048^3 = OpenBLAS sgemm calls, 2 threads and 1), and the
# configuration of both sides (BLAS library and kernel, threads, CPU affinity, oneDNN).
#
# PyTorch is Debian's python3-torch 1.13 (/usr/bin/python3), run at its best rather
# than as shipped: before each torch measurement a short tuning pass (150 steps, best
# of 2, per candidate) tries the honest settings listed in TUNE_* below (OpenBLAS
# threads and core, OpenMP wait policy; for the CNN also oneDNN on/off and
# channels-last) and the full measurement uses the fastest; the tuning figures are
# printed too, "as shipped" (no environment set) among them.
# The machine may be shared: before each measurement the script waits up to QUIET_WAIT s
# for other load to go away and prints the busy % it saw, so that noisy figures show.
set -uo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
PY=/usr/bin/python3
TRAINER=./trainer
TORCH=validation/bench/torch_mnist.py
REPS=${REPS:-3}
QUIET_WAIT=${QUIET_WAIT:-60}
QUIET_PCT=${QUIET_PCT:-10}
CASES=${CASES:-a b c}
DATA=/usr/share/datasets/fashion-mnist

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_orte_execute_quiet=1

# Torch candidates, "ENV VARS|extra torch_mnist.py args" ("-" = nothing). Why these:
#  - Debian's DYNAMIC_ARCH OpenBLAS 0.3.21 picks the "Zen" core on an AVX2 EPYC (it uses
#    the Haswell sgemm kernels); OPENBLAS_CORETYPE=Haswell is tried for completeness.
#  - torch 1.13 calls OpenBLAS from its main thread for each nn.Linear GEMM and leaves
#    OpenBLAS's own pthread pool at its default (all cores). With 2 torch threads that
#    pool and torch's OpenMP team both spin on the same 2 cores; OPENBLAS_NUM_THREADS=1
#    (GEMMs single-threaded, torch's OpenMP owns the cores) or OMP_WAIT_POLICY=passive
#    (OpenMP threads sleep, OpenBLAS's pool gets the cores) avoid the fight.
#  - the CNN's convolutions go to oneDNN by default (batch >= 16); oneDNN is much faster
#    with channels-last activations; --no-mkldnn is torch's im2col + BLAS path.
#  - one thread per DDP process: OPENBLAS_NUM_THREADS=1, anything else oversubscribes.
TUNE_A=("-|-" "OPENBLAS_NUM_THREADS=1|-" "OMP_WAIT_POLICY=passive|-"
        "OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=Haswell|-")
TUNE_B=("OPENBLAS_NUM_THREADS=1|-")
TUNE_C=("-|-" "OPENBLAS_NUM_THREADS=1|-" "OPENBLAS_NUM_THREADS=1|--channels-last"
        "OMP_WAIT_POLICY=passive|--channels-last" "OPENBLAS_NUM_THREADS=1|--no-mkldnn")

for f in "$TRAINER" "$PY" "$TORCH" "$DATA/train-images-idx3-ubyte.gz"; do
  [ -e "$f" ] || { echo "mnist.sh: missing $f (run from the repository root after scripts/build.sh)" >&2; exit 1; }
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
BUSYS=()
wait_quiet() {
  local t0=$SECONDS
  BUSY=$(busy_pct)
  while [ "$BUSY" -gt "$QUIET_PCT" ] && [ $((SECONDS - t0)) -lt "$QUIET_WAIT" ]; do
    BUSY=$(busy_pct)
  done
  if [ "$BUSY" -gt "$QUIET_PCT" ]; then
    echo "  warning: machine still ${BUSY}% busy with other work after ${QUIET_WAIT}s; figures will be low and noisy" >&2
  fi
  BUSYS+=("$BUSY")
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

json() { # json FILE EXPR: EXPR evaluated on the parsed JSON object d of FILE
  "$PY" -c 'import json,sys; d=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$1" "$2"
}

ob_lib=$(readlink -f "$(ldd "$TRAINER" | awk '/libopenblas/ {print $3; exit}')")

# trainer_case NP THREADS DECK BIND: REPS runs; sets TR_SPS, TR_GF (medians), TR_INFO
trainer_case() {
  local np=$1 th=$2 deck=$3 bind=$4 tag r dir mp pid sps=() gf=() aff="" banner
  tag=${np}x${th}_$(basename "$deck" .in)
  for r in $(seq 1 "$REPS"); do
    dir=$WORK/tr_${tag}_$r
    wait_quiet
    # shellcheck disable=SC2086  # $bind is words
    timeout -k 5 300 mpirun $bind -np "$np" "$TRAINER" "$deck" \
      train.epochs=1 train.steps=0 train.batch_size=128 train.micro_batches=1 \
      train.eval_every=0 train.log_every=1000 optim.name=sgd optim.lr=0.05 \
      optim.momentum=0.9 optim.weight_decay=0 optim.schedule=constant optim.warmup_steps=0 \
      optim.clip_grad_norm=0 data.prefetch=true data.shuffle=true data.train_limit=0 \
      system.threads="$th" run.dir="$dir" run.progress=off >"$dir.out" 2>&1 &
    mp=$!
    if [ "$r" = 1 ]; then # what the ranks really got, looked at while they train
      sleep 1.5 # timeout -> mpirun -> trainer ranks
      for pid in $(pgrep -P "$(pgrep -P "$mp" -x mpirun | head -1)" -x trainer); do
        aff+="$(awk '/^Cpus_allowed_list/ {printf "cpus %s", $2} /^Threads/ {printf " (%s OS threads)", $2}' "/proc/$pid/status" 2>/dev/null); "
      done
    fi
    if ! wait "$mp" || [ ! -f "$dir/summary.json" ]; then
      echo "trainer failed (np $np, threads $th, $deck):" >&2
      cat "$dir.out" >&2
      return 1
    fi
    sps+=("$(json "$dir/summary.json" 'd["samples_per_second"]')")
    gf+=("$(json "$dir/summary.json" 'd["gflops_per_second"]')")
    echo "  trainer ${tag}: run $r: ${sps[-1]} samples/s, ${gf[-1]} GFLOP/s," \
      "train $(json "$dir/summary.json" 'd["train_seconds"]') s (busy before: ${BUSY}%)" >&2
  done
  banner=$(head -1 "$WORK/tr_${tag}_1.out")
  case "$banner" in
    *" $th thread"*) ;;
    *) echo "  warning: the trainer's banner does not say $th thread(s): $banner" >&2 ;;
  esac
  TR_SPS=$(median "${sps[@]}")
  TR_GF=$(median "${gf[@]}")
  TR_INFO="${banner#trainer }; $(basename "$ob_lib") (single-threaded, OpenMP splits GEMMs);"
  TR_INFO+=" mpirun ${bind:-default binding}; ranks: ${aff%; }"
}

# torch_run "ENV|ARGS" OUT [torch_mnist.py options...]: one torch_mnist.py run
torch_run() {
  local cand=$1 out=$2 envs args
  shift 2
  envs=${cand%%|*} args=${cand#*|}
  [ "$envs" = - ] && envs=""
  [ "$args" = - ] && args=""
  # shellcheck disable=SC2086  # $envs and $args are words
  if ! env $envs "$PY" "$TORCH" "$@" $args >"$out" 2>"$out.err"; then
    echo "torch failed ($cand $*):" >&2
    cat "$out.err" >&2
    return 1
  fi
}

# torch_case CASE "CAND"... -- torch_mnist.py options: tune, then measure;
# sets TO_SPS, TO_GF, TO_INFO, TO_TUNE
torch_case() {
  local c=$1 cand best="" bestv=0 v n=0 out name
  shift
  local cands=()
  while [ "$1" != -- ]; do cands+=("$1"); shift; done
  shift
  TO_TUNE=""
  if [ "${#cands[@]}" -gt 1 ]; then
    for cand in "${cands[@]}"; do
      n=$((n + 1)) out=$WORK/tune_${c}_$n.json
      wait_quiet
      torch_run "$cand" "$out" "$@" --steps 150 --reps 2 || return 1
      v=$(json "$out" 'round(d["samples_per_second"])')
      name=$(printf '%s' "$cand" | sed 's/^-|/(as shipped)|/; s/|-$//; s/|/ /')
      echo "  torch tuning ${c}: ${name}: $v samples/s (busy before: ${BUSY}%)" >&2
      TO_TUNE+="${TO_TUNE:+, }[$name] $v"
      if [ "$v" -gt "$bestv" ]; then bestv=$v best=$cand; fi
    done
  else
    best=${cands[0]}
  fi
  out=$WORK/torch_$c.json
  wait_quiet
  torch_run "$best" "$out" "$@" --reps "$REPS" || return 1
  grep '^torch' "$out.err" | sed "s/^/  /; s/\$/ (busy before: ${BUSY}%)/" >&2
  TO_SPS=$(json "$out" 'd["samples_per_second"]')
  TO_GF=$(json "$out" 'round(d["gflops_per_second"], 2)')
  TO_INFO=$(json "$out" '"torch %s, %d intra-op thread(s) x %d process(es), %s, kernel %s, %d pthread(s); oneDNN %s%s" % (d["config"]["torch"], d["config"]["torch_threads"], d["world"], d["config"]["openblas"]["lib"].split("/")[-2] + " " + " ".join(d["config"]["openblas"]["config"].split()[:2]), d["config"]["openblas"]["core"], d["config"]["openblas"]["threads"], "on" if d["config"]["mkldnn"] else "off", ", channels-last" if d["config"]["channels_last"] else "")')
  TO_INFO+="; chosen: $(printf '%s' "$best" | sed 's/^-|/(no environment)|/; s/|-$//; s/|/ /')"
}

declare -A TSPS OSPS TGF OGF TINFO OINFO OTUNE
echo "== validation/bench/mnist.sh: trainer vs PyTorch, Fashion-MNIST, 1 epoch (468 steps), batch 128, fp32 =="
echo "host: $(nproc) CPUs, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)," \
  "flags: $(grep -o -w -E 'avx512f|avx2|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "trainer: $("$TRAINER" --version | head -2 | tr '\n' ' ')"
echo "(progress on stderr; REPS=$REPS)"

t_start=$SECONDS
for c in $CASES; do
  case $c in
    a) echo "-- (a) mlp, trainer 1 rank x 2 threads vs torch 2 threads" >&2
       trainer_case 1 2 inputs/fashion_mnist.in "--bind-to none" || exit 1
       torch_case a "${TUNE_A[@]}" -- --model mlp --threads 2 || exit 1 ;;
    b) echo "-- (b) mlp, trainer 2 ranks x 1 thread vs torch DDP (gloo) 2 x 1 thread" >&2
       trainer_case 2 1 inputs/fashion_mnist.in "" || exit 1
       torch_case b "${TUNE_B[@]}" -- --model mlp --threads 1 --world 2 || exit 1 ;;
    c) echo "-- (c) cnn, trainer 1 rank x 2 threads vs torch 2 threads" >&2
       trainer_case 1 2 inputs/fashion_mnist_cnn.in "--bind-to none" || exit 1
       torch_case c "${TUNE_C[@]}" -- --model cnn --threads 2 || exit 1 ;;
    *) echo "unknown case $c" >&2; exit 1 ;;
  esac
  TSPS[$c]=$TR_SPS TGF[$c]=$TR_GF TINFO[$c]=$TR_INFO
  OSPS[$c]=$TO_SPS OGF[$c]=$TO_GF OINFO[$c]=$TO_INFO OTUNE[$c]=$TO_TUNE
done

echo "-- fp32 GEMM ceiling: torch.mm 2048^3 (OpenBLAS sgemm), best of 7" >&2
wait_quiet
ceil() { env OPENBLAS_NUM_THREADS="$1" "$PY" "$TORCH" --sgemm 2048 --threads "$1" --reps 7 |
         "$PY" -c 'import json,sys; print(round(json.load(sys.stdin)["gflops_per_second"], 1))'; }
CEIL2=$(ceil 2) CEIL1=$(ceil 1)
if [ -z "$CEIL2" ] || [ -z "$CEIL1" ]; then echo "sgemm ceiling failed" >&2; exit 1; fi

label() {
  case $1 in
    a) echo "(a) mlp: 1 rank x 2 thr  | torch 2 thr" ;;
    b) echo "(b) mlp: 2 ranks x 1 thr | DDP 2 x 1 thr" ;;
    c) echo "(c) cnn: 1 rank x 2 thr  | torch 2 thr" ;;
  esac
}
echo
printf '%-40s %13s %13s %9s %17s\n' "case (trainer | torch)" "trainer smp/s" "torch smp/s" "tr/torch" "GFLOP/s tr|torch"
for c in $CASES; do
  printf '%-40s %13.0f %13.0f %8.2fx %8.1f|%-8.1f\n' "$(label "$c")" "${TSPS[$c]}" "${OSPS[$c]}" \
    "$(awk -v a="${TSPS[$c]}" -v b="${OSPS[$c]}" 'BEGIN {print a / b}')" "${TGF[$c]}" "${OGF[$c]}"
done
echo
echo "fp32 GEMM ceiling (2048^3 sgemm, OpenBLAS via torch.mm, best of 7): $CEIL2 GFLOP/s with 2 threads, $CEIL1 with 1"
case " $CASES " in
  *" a "*)
    echo "trainer MLP (a): ${TGF[a]} GFLOP/s = $(awk -v a="${TGF[a]}" -v b="$CEIL2" 'BEGIN {printf "%.0f", 100 * a / b}')% of the 2-thread ceiling" \
      "(torch: ${OGF[a]} GFLOP/s = $(awk -v a="${OGF[a]}" -v b="$CEIL2" 'BEGIN {printf "%.0f", 100 * a / b}')%)" ;;
esac
echo "(GFLOP/s count the GEMM/conv multiply-adds only: 3 x forward per sample)"
echo
echo "configuration:"
for c in $CASES; do
  echo "  ($c) trainer: ${TINFO[$c]}"
  echo "      torch:   ${OINFO[$c]}"
  [ -n "${OTUNE[$c]}" ] && echo "      torch tuning (150 steps, samples/s): ${OTUNE[$c]}"
done
echo "  medians of $REPS (trainer: runs; torch: epochs after 20 warm-up steps)"
echo "  machine busy % before each measurement: ${BUSYS[*]} (idle below ${QUIET_PCT}%)"
echo "  elapsed: $((SECONDS - t_start)) s"
