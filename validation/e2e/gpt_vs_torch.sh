#!/usr/bin/env bash
# gpt_vs_torch.sh: the trainer's GPT against an independent GPT-2 in PyTorch
# (validation/gpt_torch_reference.py, Debian's python3-torch, float32).
#
# A small GPT (2 layers, 4 heads, 64 wide, 32 tokens of context) trains 10 AdamW steps
# on the Brown corpus with GPT-2's BPE (vocabulary 50257, padded to 50304 inside the
# trainer) on 1 rank, checkpointing every step from step 0. PyTorch loads the step-0
# checkpoint and the same unshuffled batches and checks
#   - the loss and every parameter's gradient at each step, from the trainer's own
#     parameters of that step (its gradients recovered from adam_m/adam_v), and each
#     AdamW update (tolerances: losses 1e-6 relative, gradients 3e-5 of the tensor's
#     largest entry, adam_v 1e-3, updates to float32 rounding);
#   - its own 10-step AdamW run from step 0 against metrics.csv within 2e-6 relative.
# Why these tolerances (measured errors are ~10x below them): the header of
# gpt_torch_reference.py. The same run on 2 data-parallel ranks must pass the same
# check and give the 1-rank losses within 1e-6; the byte-level corpus (vocabulary
# 256, a multiple of 64: no padding) must pass it too, and so must a byte-level run
# with dropout at every site on 2 ranks and 80 tokens of context (the reference draws
# the trainer's documented masks: src/backend/dropout_math.h).
# data.val_limit only shortens the final evaluation, which nothing here looks at.
source "$(dirname "$0")/../lib.sh"
"$PYTHON" -c "import torch, h5py, numpy" 2>/dev/null ||
  { echo "skipped: $PYTHON lacks torch/h5py/numpy (apt install python3-torch python3-h5py)"; exit 77; }
BPE=$SRC/data/brown/gpt2
BYTES=$SRC/data/brown/bytes
if [ ! -f "$BPE.train.tok" ] || [ ! -f "$BPE.val.tok" ]; then
  echo "skipped: no $BPE.train.tok (run scripts/prepare_text.sh)"
  exit 77
fi
RUN_TIMEOUT=300
# the reference on its own: loop vs vectorised model, finite differences, AdamW formulas,
# and planted defects (erf GELU, decay on 1-D parameters, padded softmax) caught
check "the reference's self-test" "$PYTHON" validation/gpt_torch_reference.py --self-test
printf '[model]\nname = gpt\n' >"$WORK/gpt.in"

# train NP DIR VOCAB TOKENS [overrides]: the 10-step run the reference reproduces
train() {
  local np=$1 dir=$2 vocab=$3 tok=$4
  shift 4
  run "$np" "$WORK/out" "$WORK/err" "$WORK/gpt.in" model.n_layer=2 model.n_head=4 \
    model.n_embd=64 model.seq_len=32 model.vocab_size="$vocab" data.format=tokens \
    data.train_tokens="$tok.train.tok" data.val_tokens="$tok.val.tok" data.shuffle=false \
    train.batch_size=4 train.steps=10 train.log_every=1 train.eval_every=0 \
    optim.name=adamw optim.lr=1e-3 optim.beta1=0.9 optim.beta2=0.95 optim.eps=1e-8 \
    optim.weight_decay=0.1 optim.schedule=constant optim.warmup_steps=0 \
    optim.clip_grad_norm=0 checkpoint.every=1 checkpoint.at_start=true checkpoint.keep=100 \
    run.dir="$dir" run.progress=off sample.length=0 data.val_limit=8 "$@"
  check "gpt on $np rank(s), vocab $vocab: exit $RC: $(tail -3 "$WORK/err")" [ "$RC" = 0 ]
}

reference() { # reference DIR TOKENS [options]
  local dir=$1 tok=$2; shift 2
  check "PyTorch reproduces $dir" "$PYTHON" validation/gpt_torch_reference.py "$dir" \
    --tokens "$tok" --steps 10 "$@"
}

train 1 "$WORK/bpe1" 50257 "$BPE"
[ "$RC" = 0 ] && reference "$WORK/bpe1" "$BPE.train.tok" --fp64-floor

# data parallel: 2 ranks take 2 sequences each of the same global batch
train 2 "$WORK/bpe2" 50257 "$BPE"
[ "$RC" = 0 ] && reference "$WORK/bpe2" "$BPE.train.tok"
[ "$RC" = 0 ] && check "2 ranks give the 1-rank losses" "$PYTHON" validation/compare_metrics.py \
  "$WORK/bpe1/metrics.csv" "$WORK/bpe2/metrics.csv" --rtol 1e-6 --min-steps 10

if [ -f "$BYTES.train.tok" ] && [ -f "$BYTES.val.tok" ]; then
  train 1 "$WORK/bytes1" 256 "$BYTES"
  [ "$RC" = 0 ] && reference "$WORK/bytes1" "$BYTES.train.tok"
  # (80 tokens of context: attention's second block of 64 query rows, cut short)
  train 2 "$WORK/drop2" 256 "$BYTES" model.embd_pdrop=0.1 model.attn_pdrop=0.2 \
    model.resid_pdrop=0.1 train.seed=99 model.seq_len=80
  check "the banner states the dropout" \
    grep -q "dropout in training steps: embeddings 0.1, attention 0.2, residual 0.1" "$WORK/out"
  [ "$RC" = 0 ] && reference "$WORK/drop2" "$BYTES.train.tok"
else
  echo "note: no $BYTES.train.tok, the byte-vocabulary case is not run"
fi
finish
