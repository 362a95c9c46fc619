#!/usr/bin/env bash
# cli.sh: --help, --version, --list-models and --help-deck print what they promise,
# once even under mpirun, and exit 0.
source "$(dirname "$0")/../lib.sh"

"$TRAINER" --help >"$WORK/help" 2>&1
check "--help exit code" [ $? = 0 ]
check "--help shows usage and exit codes" grep -q "75 checkpointed" "$WORK/help"
"$TRAINER" --version >"$WORK/version"
check "--version names the BLAS kernel" grep -q "OpenBLAS kernel" "$WORK/version"
"$TRAINER" --list-models >"$WORK/models"
check "--list-models lists mlp" grep -q "^mlp " "$WORK/models"
check "--list-models lists cnn" grep -q "^cnn " "$WORK/models"
"$TRAINER" --help-deck >"$WORK/deck"
for key in "\[train\]" "  seed " "  epochs " "  steps " "  batch_size " "\[optim\]" "  lr " \
  "\[data\]" "  train_images " "  test_labels " "\[run\]" "  dir " "\[parallel\]" "  dp " "  tp " "  pp "; do
  check "--help-deck documents $key" grep -q "$key" "$WORK/deck"
done
timeout 60 mpirun -np 4 "$TRAINER" --list-models >"$WORK/models4"
check "--list-models under mpirun prints once" [ "$(grep -c '^mlp ' "$WORK/models4")" = 1 ]
"$TRAINER" >/dev/null 2>"$WORK/noargs"
check "no arguments: usage exit code 64" [ $? = 64 ]
check "no arguments: usage on stderr" grep -q "usage: trainer DECK" "$WORK/noargs"
# the OpenBLAS fallback kernel is never used silently: force it and look
OPENBLAS_CORETYPE=Prescott "$TRAINER" --version >"$WORK/v2"
check "a forced fallback kernel is replaced or reported: $(cat "$WORK/v2")" \
  bash -c "! grep -q 'OpenBLAS kernel Prescott$' '$WORK/v2'"
# threads that oversubscribe the node (OMP_NUM_THREADS above the cores): a warning that
# names where they came from and the share that fits; a thread a rank, however many
# ranks, none
cores=$(nproc --all)
over=(inputs/gpt2_124m.in model.n_layer=1 model.n_head=2 model.n_embd=16 model.seq_len=8
  model.vocab_size=64 data.format=random_tokens data.val_limit=0 train.batch_size=2 train.steps=1
  checkpoint.at_end=false sample.length=0 run.progress=off system.peak_gflops=100)
env -u OMP_WAIT_POLICY OMP_NUM_THREADS=$((cores + 1)) timeout 60 "$TRAINER" "${over[@]}" \
  run.dir="$WORK/over" >"$WORK/over_out" 2>"$WORK/over_err"
check "the banner counts in the singular: $(grep '^data:' "$WORK/over_out")" \
  grep -q "^data: .*; global batch 2 = 1 rank x 2 (1 micro-batch of 2)$" "$WORK/over_out"
check "... and one step: $(grep -E '^(run|done):' "$WORK/over_out")" \
  bash -c "grep -q '^run: 1 step (' '$WORK/over_out' && grep -q '^done: 1 step in' '$WORK/over_out'"
check "threads above the cores: a warning naming OMP_NUM_THREADS: $(cat "$WORK/over_err")" \
  grep -q "^warning: 1 rank x $((cores + 1)) threads (OMP_NUM_THREADS=$((cores + 1))) = .* cores: .*set \[system\] threads = $cores" \
  "$WORK/over_err"
# ... and, with OMP_WAIT_POLICY unset, names passive (libgomp's spinning threads take the
# time the other ranks' threads need); not where the user set it
check "... and names OMP_WAIT_POLICY=passive where it is unset" \
  grep -q "; else export OMP_WAIT_POLICY=passive (unset, the idle threads spin" "$WORK/over_err"
OMP_WAIT_POLICY=active OMP_NUM_THREADS=$((cores + 1)) timeout 60 "$TRAINER" "${over[@]}" \
  run.dir="$WORK/over_set" >/dev/null 2>"$WORK/over_set_err"
check "... but not where the user set it: $(cat "$WORK/over_set_err")" \
  bash -c "grep -q '^warning: 1 rank x' '$WORK/over_set_err' && ! grep -q OMP_WAIT_POLICY '$WORK/over_set_err'"
OMP_NUM_THREADS=1 timeout 60 mpirun -np $((cores + 1)) "$TRAINER" "${over[@]}" \
  run.dir="$WORK/over1" >/dev/null 2>"$WORK/over1_err"
check "more ranks than cores, a thread each: no warning: $(cat "$WORK/over1_err")" \
  bash -c "! grep -q 'threads fight' '$WORK/over1_err'"
finish
