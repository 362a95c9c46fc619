#!/usr/bin/env bash
# address_space.sh: under an address-space limit (ulimit -v, RLIMIT_AS: a process's
# own, counted in mapped bytes, not resident ones) too small for a rank's threads
# (each maps OpenBLAS's buffer, a malloc arena and a stack as it starts), a run stops
# at start-up with exit 71 and a message naming the limit, what is mapped, what the
# run needs and the fix, instead of hanging at its first GEMM (OpenBLAS retries a
# failed mapping for ever; SIGTERM does not end it) or failing in a library; a
# generous limit still runs; --plan under the small limit warns.
source "$(dirname "$0")/../lib.sh"
require_data
if sanitized; then
  echo "skipped: AddressSanitizer reserves terabytes of shadow address space, which no ulimit -v leaves room for"
  exit 77
fi
base=(inputs/mnist.in train.steps=3 train.eval_every=0 checkpoint.at_end=false run.progress=off)
# 1 GiB for 8 threads: a rank maps some 0.3 to 1.1 GiB at start-up (libraries, MPI,
# OpenBLAS's own threads), then about 0.2 GiB a thread
RUN_TIMEOUT=60
(
  ulimit -v $((1 << 20))
  run 1 "$WORK/out" "$WORK/err" "${base[@]}" system.threads=8 run.dir="$WORK/small"
  echo "$RC" >"$WORK/rc"
)
rc=$(cat "$WORK/rc")
check "ulimit -v 1 GiB, 8 threads: exit 71, not a hang (124) or a library's failure: $rc $(tail -2 "$WORK/err")" \
  [ "$rc" = 71 ]
check "the message names the limit and what the run needs" grep -q \
  "out of address space: ulimit -v (RLIMIT_AS) allows this process 1.0 GiB of virtual memory, .* mapped already .*, and the run needs .* more: its buffers .* (trainer --plan) and about .* that its 8 threads" \
  "$WORK/err"
check "... and the fix" grep -q "raise the limit to at least .* (ulimit -v [0-9]*, in KiB) or remove it (ulimit -v unlimited), or set fewer \[system\] threads" \
  "$WORK/err"
check "no rank left behind" no_leftover_ranks
(
  ulimit -v $((1 << 20))
  "$TRAINER" --plan "${base[@]}" system.threads=8 >"$WORK/plan" 2>&1
)
check "--plan under the limit warns: $(grep 'address space' "$WORK/plan")" grep -q \
  "^warning: does not fit: address space: .* against ulimit -v (RLIMIT_AS) of 1.0 GiB; raise or remove the limit, or set fewer \[system\] threads" \
  "$WORK/plan"
# 8 GiB for one thread: room to spare
(
  ulimit -v $((8 << 20))
  run 1 "$WORK/out" "$WORK/err" "${base[@]}" system.threads=1 run.dir="$WORK/large"
  echo "$RC" >"$WORK/rc"
)
rc=$(cat "$WORK/rc")
check "ulimit -v 8 GiB, 1 thread: the run ends: $rc $(tail -2 "$WORK/err")" grep -q "^done" "$WORK/out"
finish
