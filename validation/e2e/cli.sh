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
finish
