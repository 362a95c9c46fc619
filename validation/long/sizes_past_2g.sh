#!/usr/bin/env bash
# sizes_past_2g.sh: a GPT whose one forward holds more than 2^31 logits, and a token
# file of more than 2^31 tokens, train as their small counterparts do (int indexing
# would wrap at 2^31 elements and read or write the wrong ones).
#  - vocab_size 2^23 (n_embd 8, one block, seq_len 16) at batch 17: one micro-batch of
#    17 x 16 x 8388608 = 2.28e9 logits (8.5 GiB), 2 steps and an evaluation, against
#    the same run in 17 micro-batches (134 M logits each): the losses, the gradient
#    norms and the validation loss agree (only the gradients' order of addition
#    differs). About 10 GiB of memory at its peak and 2 minutes on a 2-core machine.
#  - a sparse token file of 2^31 + 2^20 uint16 tokens (4 GiB apparent, a few KiB on
#    disk), all 0 but the last 2^20, which are 5: the unigram baseline counts every
#    token, so its perplexity (the formula's, in Python) shows the tokens past 2^31
#    were read where they are; two steps train on windows drawn from all of it.
source "$(dirname "$0")/../lib.sh"
avail=$(awk '/^MemAvailable:/ {print int($2 / 1048576)}' /proc/meminfo)
[ "$avail" -ge 12 ] || { echo "skipped: ${avail} GiB of memory available, 12 needed"; exit 77; }
RUN_TIMEOUT=600
deck=$WORK/big.in
printf '[model]\nname = gpt\n' >"$deck"
GPT=(model.n_layer=1 model.n_head=1 model.n_embd=8 model.seq_len=16 train.seed=1
  train.steps=2 train.eval_every=0 train.log_every=1 optim.name=adamw optim.lr=1e-3
  run.progress=off sample.length=0 checkpoint.at_end=false)

# ---- logits past 2^31 elements ------------------------------------------------------
LOGITS=("${GPT[@]}" model.vocab_size=8388608 data.format=random_tokens train.batch_size=17)
run 1 "$WORK/out1" "$WORK/err1" "$deck" "${LOGITS[@]}" run.dir="$WORK/one"
check "one micro-batch of 2.28e9 logits: exit $RC: $(tail -3 "$WORK/err1")" [ "$RC" = 0 ]
check "one micro-batch of 17" grep -q "(1 micro-batch of 17)" "$WORK/out1"
run 1 "$WORK/out17" "$WORK/err17" "$deck" "${LOGITS[@]}" train.micro_batches=17 \
  run.dir="$WORK/seventeen"
check "17 micro-batches: exit $RC: $(tail -3 "$WORK/err17")" [ "$RC" = 0 ]
check "2.28e9 logits at once as in 17 micro-batches (loss, gradient norm, validation loss)" \
  "$PYTHON" "$SRC/validation/compare_metrics.py" "$WORK/seventeen/metrics.csv" \
  "$WORK/one/metrics.csv" --rtol 1e-6 --norm-rtol 1e-6 --eval --min-steps 2

# ---- a token file past 2^31 tokens --------------------------------------------------
N=$(((1 << 31) + (1 << 20)))
"$PYTHON" - "$WORK/big.tok" "$WORK/val.tok" "$N" <<'EOF'
import struct, sys
big, val, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
tail = 1 << 20
head = lambda count: b"TRTOKENS" + struct.pack("<IIQI", 1, 1, count, 256) + bytes(4)
with open(big, "wb") as f:  # uint16 tokens, vocabulary 256: 0 but the last `tail`
    f.write(head(n))
    f.truncate(32 + 2 * n)
    f.seek(32 + 2 * (n - tail))
    f.write(struct.pack("<H", 5) * tail)
with open(val, "wb") as f:
    toks = [0, 5] * 600
    f.write(head(len(toks)) + struct.pack("<%dH" % len(toks), *toks))
EOF
run 1 "$WORK/outt" "$WORK/errt" "$deck" "${GPT[@]}" model.vocab_size=256 data.format=tokens \
  data.train_tokens="$WORK/big.tok" data.val_tokens="$WORK/val.tok" data.val_limit=64 \
  train.batch_size=4 run.dir="$WORK/tokens"
check "a file of 2^31 + 2^20 tokens: exit $RC: $(tail -3 "$WORK/errt")" [ "$RC" = 0 ]
check "134283263 windows" grep -q "^data: 134283263 train" "$WORK/outt"
check "the unigram baseline counts the tokens past 2^31" "$PYTHON" - "$WORK/outt" "$N" <<'EOF'
import math, re, sys
text, n = open(sys.argv[1]).read(), int(sys.argv[2])
got = float(re.search(r"against ([0-9.]+) for the unigram baseline", text).group(1))
c5 = 1 << 20
targets = ([0, 5] * 600)[1:64 * 16 + 1]  # the 64 windows' targets
nll = sum(-math.log(((c5 if t == 5 else n - c5) + 1) / (n + 256)) for t in targets)
want = math.exp(nll / len(targets))
print(f"unigram baseline perplexity {got} (formula {want:.4f})")
sys.exit(0 if abs(got - want) < 0.006 else 1)
EOF
finish
