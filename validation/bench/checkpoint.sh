#!/usr/bin/env bash
# checkpoint.sh: checkpoint write bandwidth of a model with more than 100 million
# parameters plus AdamW state (three tensors per parameter: 1.3 GB) from 4 ranks,
# beside dd writing the same number of bytes with fdatasync to the same directory.
# Both durable (the trainer fsyncs before its rename). Prints figures, not a test.
#
#   validation/bench/checkpoint.sh [DIR]     (default: a fresh directory under /tmp)
#   REPEATS=3 sets the number of runs per side; medians are reported.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_orte_execute_quiet=1
dir=${1:-$(mktemp -d /tmp/ckpt_bench.XXXXXX)}
mkdir -p "$dir"
repeats=${REPEATS:-3}
[ -f data/mnist/train-images-idx3-ubyte ] || scripts/prepare_data.sh >/dev/null

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

trainer_mibs=() bytes=0
for i in $(seq 1 "$repeats"); do
  rm -rf "$dir/run"
  out=$(mpirun -np 4 ./trainer inputs/mnist.in model.hidden=10000,10000 optim.name=adamw \
    optim.lr=1e-4 train.steps=1 train.eval_batch_size=100 run.progress=off run.dir="$dir/run")
  line=$(grep "^checkpoint " <<<"$out")
  mib=$(sed -n 's/.*: \([0-9.]*\) MiB in \([0-9.]*\) s.*/\1/p' <<<"$line")
  sec=$(sed -n 's/.*: \([0-9.]*\) MiB in \([0-9.]*\) s.*/\2/p' <<<"$line")
  params=$(sed -n 's/^model mlp: \([0-9]*\) parameters.*/\1/p' <<<"$out")
  bytes=$(awk -v m="$mib" 'BEGIN {printf "%.0f", m * 1048576}')
  trainer_mibs+=("$(awk -v m="$mib" -v s="$sec" 'BEGIN {print m / s}')")
done
file=$(ls "$dir"/run/checkpoints/step_*.h5)
rm -rf "$dir/run"

dd_mibs=()
count=$(( bytes / (16 << 20) + 1 ))
for i in $(seq 1 "$repeats"); do
  res=$(dd if=/dev/zero of="$dir/dd.bin" bs=16M count=$count conv=fdatasync 2>&1 | tail -1)
  secs=$(sed -n 's/.*copied, \([0-9.]*\) s.*/\1/p' <<<"$res")
  dd_mibs+=("$(awk -v b="$(( count * 16 ))" -v s="$secs" 'BEGIN {print b / s}')")
  rm -f "$dir/dd.bin"
done

t=$(printf '%s\n' "${trainer_mibs[@]}" | median)
d=$(printf '%s\n' "${dd_mibs[@]}" | median)
echo "checkpoint benchmark in $dir ($(df -h "$dir" | awk 'NR==2 {print $1 ", " $4 " free"}'))"
echo "  model: MLP 784-10000-10000-10, $params parameters, AdamW state; 4 ranks"
echo "  file:  $(basename "$file"), $(awk -v b="$bytes" 'BEGIN {printf "%.0f MiB", b / 1048576}') of tensors"
printf "  %-36s %8.0f MiB/s   (runs: %s)\n" "trainer (parallel HDF5, fsync, rename)" "$t" "${trainer_mibs[*]}"
printf "  %-36s %8.0f MiB/s   (runs: %s)\n" "dd bs=16M conv=fdatasync" "$d" "${dd_mibs[*]}"
awk -v t="$t" -v d="$d" 'BEGIN {printf "  ratio trainer / dd: %.2f (target >= 0.50)\n", t / d}'
