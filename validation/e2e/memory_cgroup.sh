#!/usr/bin/env bash
# memory_cgroup.sh: runs in a memory cgroup of their own, as a batch job's (Slurm's
# --mem). The start-up check counts the process's own memory beyond its buffers
# (--plan's "runtime" line): a limit that the buffers fit but not the runtime beside
# them stops the run with exit 71 and the plan's numbers, instead of letting it be
# killed in its first steps (exit 137); a limit of the plan's total and some room runs.
# A checkpoint written (in the foreground and by checkpoint.async's thread) never has
# more than a few 16 MiB pieces of itself dirty or under write-back in the page cache,
# which the kernel charges to the cgroup (before: the whole 184 MiB). Needs root and a
# cgroup v1 memory hierarchy or cgroup v2 with the memory controller: skipped (77)
# where none can be made.
source "$(dirname "$0")/../lib.sh"
bytes="$SRC/data/brown/gpt2.train.tok"
if [ ! -f "$bytes" ]; then
  echo "skipped: no Brown token files (scripts/prepare_data.sh)"
  exit 77
fi
# a cgroup of this test's own: v1's memory hierarchy, else v2 where the memory
# controller can be given to a child of the root
CG=
if [ -w /sys/fs/cgroup/memory/cgroup.procs ] && mkdir "/sys/fs/cgroup/memory/trainer_test_$$" 2>/dev/null; then
  CG=/sys/fs/cgroup/memory/trainer_test_$$ LIMIT_FILE=memory.limit_in_bytes
  DIRTY_KEYS="dirty writeback"
elif grep -qw memory /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null &&
  mkdir "/sys/fs/cgroup/trainer_test_$$" 2>/dev/null; then
  CG=/sys/fs/cgroup/trainer_test_$$ LIMIT_FILE=memory.max
  DIRTY_KEYS="file_dirty file_writeback"
fi
if [ -z "$CG" ]; then
  echo "skipped: cannot make a memory cgroup here (needs root, and cgroup v1's memory hierarchy or v2's memory controller)"
  exit 77
fi
trap 'rmdir "$CG" 2>/dev/null; rm -rf "$WORK"' EXIT

# in_cgroup LIMIT_BYTES OUT ERR args...: the trainer on one rank in the cgroup under
# LIMIT_BYTES ("max": none), RC its exit code; the most dirty and write-back bytes the
# cgroup held, sampled every 10 ms, in $WORK/dirty
in_cgroup() {
  local limit=$1 out=$2 err=$3; shift 3
  if [ "$limit" = max ] && [ "$LIMIT_FILE" = memory.limit_in_bytes ]; then limit=-1; fi
  echo "$limit" >"$CG/$LIMIT_FILE"
  echo 0 >"$WORK/dirty"
  rm -f "$WORK/done"
  (
    most=0
    while [ ! -e "$WORK/done" ]; do
      now=$(awk -v keys="$DIRTY_KEYS" 'BEGIN { split(keys, k); for (i in k) want[k[i]] = 1 }
        ($1 in want) { s += $2 } END { print s + 0 }' "$CG/memory.stat")
      if [ "$now" -gt "$most" ]; then most=$now; echo "$most" >"$WORK/dirty"; fi
      sleep 0.01
    done
  ) &
  local sampler=$!
  (
    echo "$BASHPID" >"$CG/cgroup.procs"
    run 1 "$out" "$err" "$@"
    echo "$RC" >"$WORK/rc"
  )
  RC=$(cat "$WORK/rc")
  touch "$WORK/done"
  wait "$sampler"
}

# the 4-block GPT on Brown: a 184 MiB checkpoint (the weights and AdamW's moments)
gpt=(inputs/gpt_brown.in train.batch_size=1 train.eval_every=0 sample.length=0 checkpoint.at_end=false
  run.progress=off system.threads=1)
"$TRAINER" --plan "${gpt[@]}" >"$WORK/plan" 2>&1
# plan_bytes LINE: the plan's figure on its line, in bytes
plan_bytes() {
  "$PYTHON" -c "
import re, sys
m = re.search(r'^  $1 +([0-9.]+) (B|KiB|MiB|GiB)', open('$WORK/plan').read(), re.M)
print(int(float(m.group(1)) * {'B': 1, 'KiB': 2**10, 'MiB': 2**20, 'GiB': 2**30}[m.group(2)]))"
}
check "--plan names the runtime: $(grep runtime "$WORK/plan")" grep -q \
  "^  runtime  *[0-9.]* MiB  (the process's own: libraries, MPI, thread stacks" "$WORK/plan"
total=$(plan_bytes total)
runtime=$(plan_bytes runtime)

# the buffers fit with 24 MiB to spare, which the process's own memory does not
# leave it: refused at start-up (before, the check passed and the rank ran without
# slack: at batch 4 and 14 MiB to spare it was killed in its first step; here it
# may crawl, the kernel reclaiming its libraries' pages)
in_cgroup $((total - runtime + (24 << 20))) "$WORK/out" "$WORK/err" "${gpt[@]}" train.steps=2 \
  run.dir="$WORK/tight"
check "a limit the runtime does not fit: exit 71: $RC $(tail -2 "$WORK/err")" [ "$RC" = 71 ]
check "... naming the runtime in the plan's numbers" grep -q \
  "out of memory: each rank needs .*, runtime [0-9.]* MiB (libraries, MPI, threads, OpenBLAS's packing)) but has about" \
  "$WORK/err"

# the plan's total and 64 MiB: runs, and writes its checkpoints (not under
# AddressSanitizer, whose redzones and quarantine are memory of its own)
if sanitized; then
  echo "sanitizer build: the run under the plan's total is not meaningful, skipped"
else
  in_cgroup $((total + (64 << 20))) "$WORK/out" "$WORK/err" "${gpt[@]}" train.steps=2 \
    checkpoint.every=1 run.dir="$WORK/fits"
  check "the plan's total + 64 MiB: the run ends: $RC $(tail -2 "$WORK/err")" grep -q "^done" "$WORK/out"
  check "... with its checkpoints" [ -f "$WORK/fits/checkpoints/step_00000002.h5" ]
fi

# the page cache of a checkpoint, without a limit (which would make the kernel write
# back early itself): write-behind keeps the window being written and the one before
# (16 MiB each and a piece), in the foreground and in checkpoint.async's thread
for mode in foreground background; do
  async=false
  [ $mode = background ] && async=true
  in_cgroup max "$WORK/out" "$WORK/err" "${gpt[@]}" train.steps=1 checkpoint.every=1 \
    checkpoint.async=$async run.dir="$WORK/$mode"
  check "$mode checkpoint: the run ends: $RC $(tail -2 "$WORK/err")" grep -q "^done" "$WORK/out"
  check "... a checkpoint written" [ -f "$WORK/$mode/checkpoints/step_00000001.h5" ]
  dirty=$(cat "$WORK/dirty")
  echo "$mode checkpoint: at most $((dirty >> 20)) MiB dirty or under write-back"
  check "$mode checkpoint: at most 80 MiB dirty or under write-back, not $((dirty >> 20)) MiB" \
    [ "$dirty" -le $((80 << 20)) ]
done
check "... in the background" grep -q "written in the background" "$WORK/out"
finish
