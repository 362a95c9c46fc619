#!/usr/bin/env bash
# gpt_learns.sh: a small GPT learns from real text: after 600 steps on the Brown
# corpus (bytes, 2 ranks) its validation perplexity is below the unigram baseline the
# trainer prints beside it, and it ends with a sample that continues the prompt.
# Also the BPE path of the sample: GPT-2's tokenizer encodes the prompt and decodes
# the continuation (a few steps only: the text is not expected to be good).
source "$(dirname "$0")/../lib.sh"
BYTES=$SRC/data/brown/bytes
BPE=$SRC/data/brown/gpt2
[ -f "$BYTES.train.tok" ] && [ -f "$BPE.train.tok" ] ||
  { echo "skipped: no Brown token files (run scripts/prepare_text.sh)"; exit 77; }
printf '[model]\nname = gpt\n' >"$WORK/gpt.in"
RUN_TIMEOUT=300
MEASURE_PEAK=1 run 2 "$WORK/out" "$WORK/err" "$WORK/gpt.in" model.n_layer=2 model.n_head=2 model.n_embd=64 \
  model.seq_len=64 model.vocab_size=256 data.format=tokens data.tokenizer=bytes \
  data.train_tokens="$BYTES.train.tok" data.val_tokens="$BYTES.val.tok" data.val_limit=64 \
  train.batch_size=16 train.steps=600 train.eval_every=0 optim.name=adamw optim.lr=3e-3 \
  optim.schedule=cosine optim.warmup_steps=10 optim.weight_decay=0.1 \
  sample.prompt="The man" sample.length=40 sample.top_k=5 sample.temperature=0.8 \
  run.dir="$WORK/bytes" run.progress=off checkpoint.at_end=false
check "byte-level run: exit $RC $(tail -3 "$WORK/err")" [ "$RC" = 0 ]
cat "$WORK/out" | grep -E "^validation perplexity|^done"
check "perplexity below the unigram baseline" "$PYTHON" -c "
import json, sys
s = json.load(open('$WORK/bytes/summary.json'))
print('val perplexity', s['val_perplexity'], 'unigram', s['unigram_perplexity'])
sys.exit(0 if 0 < s['val_perplexity'] < s['unigram_perplexity'] else 1)"
check "the sample continues the prompt: $(grep -A1 "^sample (top-k 5, temperature 0.8, 40 tokens" "$WORK/out")" \
  bash -c "grep -A1 '^sample (top-k 5, temperature 0.8, 40 tokens' '$WORK/out' | grep -q '^The man'"
# MFU against a peak the banner names: measured here (a GEMM timing per rank)
check "the banner names a measured peak: $(grep '^mfu:' "$WORK/out")" \
  grep -qE "^mfu: against [1-9][0-9.]* GFLOP/s per rank \(measured: " "$WORK/out"
check "summary.json: MFU against a positive peak" "$PYTHON" -c "
import json, sys
s = json.load(open('$WORK/bytes/summary.json'))
sys.exit(0 if s['peak_gflops'] > 0 and 0 < s['mfu'] < 1.5 else 1)"

run 1 "$WORK/out" "$WORK/err" "$WORK/gpt.in" model.n_layer=1 model.n_head=2 model.n_embd=32 \
  model.seq_len=16 data.format=tokens data.train_tokens="$BPE.train.tok" \
  data.val_tokens="$BPE.val.tok" data.val_limit=4 train.batch_size=4 train.steps=3 \
  sample.prompt="It was a cold night in" sample.length=6 run.dir="$WORK/bpe" run.progress=off \
  checkpoint.at_end=false system.peak_gflops=50
check "BPE run: exit $RC $(tail -3 "$WORK/err")" [ "$RC" = 0 ]
check "the banner names the deck's peak" \
  grep -q "^mfu: against 50.0 GFLOP/s per rank (set by \[system\] peak_gflops)" "$WORK/out"
check "summary.json: the deck's peak" "$PYTHON" -c "
import json, sys
sys.exit(0 if json.load(open('$WORK/bpe/summary.json'))['peak_gflops'] == 50 else 1)"
check "BPE sample: greedy, decoded after the prompt" grep -A1 "^sample (greedy, 6 tokens" \
  "$WORK/out"
check "BPE sample text starts with the prompt" grep -q "^It was a cold night in" "$WORK/out"
finish
