#!/usr/bin/env bash
# gpt_shards.sh: training data as shards. The Brown corpus's GPT-2 tokens, cut into
# three shards that overlap by one token (so their windows are the single file's
# windows), two in llm.c's format (dev/data: 256 int32 of header, uint16 tokens) and
# one in this project's, named by one glob pattern, must train exactly as the single
# file does: the same windows and batches (in order, so that the first steps read
# across both boundaries), so the same metrics.csv and
# bit-identical final parameters and AdamW state; the data hash is the same, so a
# checkpoint of the single-file run resumes on the shards without a warning, while
# the shards in another order (other windows at the same places) draw the warning.
# A pattern that matches nothing stops the run with exit 66 and the key named.
source "$(dirname "$0")/../lib.sh"
TOK=$SRC/data/brown/gpt2
[ -f "$TOK.train.tok" ] || { echo "skipped: no $TOK.train.tok (run scripts/prepare_text.sh)"; exit 77; }
T=16
mkdir -p "$WORK/shards" "$WORK/reordered"
"$PYTHON" - "$TOK.train.tok" "$WORK" $T <<'PY'
import array, os, struct, sys
path, work, T = sys.argv[1], sys.argv[2], int(sys.argv[3])
raw = open(path, "rb").read()
tokens = array.array("H", raw[32:])  # this project's format: 32-byte header, uint16
windows = (len(tokens) - 1) // T
cuts = [0, 5, 13, windows]  # boundaries inside the first batches (unshuffled)
def llmc(name, toks):
    header = array.array("i", [0] * 256)
    header[0], header[1], header[2] = 20240520, 1, len(toks)  # llm.c's GPT-2 format
    with open(name, "wb") as f:
        f.write(header.tobytes() + toks.tobytes())
def ours(name, toks):
    with open(name, "wb") as f:
        f.write(b"TRTOKENS" + struct.pack("<IIQII", 1, 1, len(toks), 50257, 0) + toks.tobytes())
for k in range(3):
    toks = tokens[cuts[k] * T:cuts[k + 1] * T + 1]  # one token shared with the next shard
    (ours if k == 1 else llmc)(os.path.join(work, "shards", "part_%03d.%s" % (k, "tok" if k == 1 else "bin")), toks)
    # the same shards named so that name order puts the last first
    (ours if k == 1 else llmc)(os.path.join(work, "reordered", "part_%03d.bin" % ((k + 1) % 3)), toks)
PY
printf '[model]\nname = gpt\n' >"$WORK/gpt.in"
common=("$WORK/gpt.in" model.n_layer=1 model.n_head=2 model.n_embd=32 model.seq_len=$T
  model.vocab_size=50257 data.format=tokens data.val_tokens="$TOK.val.tok" data.val_limit=8
  data.shuffle=false train.batch_size=8 train.steps=8 train.log_every=1 train.eval_every=4 optim.name=adamw
  optim.lr=3e-3 run.progress=off sample.length=0)

run 2 "$WORK/one.out" "$WORK/err" "${common[@]}" data.train_tokens="$TOK.train.tok" \
  run.dir="$WORK/one"
check "single file: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
run 2 "$WORK/shards.out" "$WORK/err" "${common[@]}" data.train_tokens="$WORK/shards/part_*" \
  run.dir="$WORK/sharded"
check "three shards by a pattern: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "the unigram baseline over the shards: $(grep '^validation perplexity' "$WORK/shards.out")" \
  grep -q '^validation perplexity [0-9.]* against [0-9.]* for the unigram baseline' "$WORK/shards.out"
check "the same windows: $(grep '^data:' "$WORK/shards.out")" \
  diff <(grep '^data:' "$WORK/one.out") <(grep '^data:' "$WORK/shards.out")
check "metrics.csv rows identical" diff <(cut -d, -f1-7 "$WORK/one/metrics.csv") \
  <(cut -d, -f1-7 "$WORK/sharded/metrics.csv")
check "final parameters and AdamW state bit-identical (h5diff)" \
  h5_same "$WORK/one/checkpoints/step_00000008.h5" "$WORK/sharded/checkpoints/step_00000008.h5"

# the single file's checkpoint goes on with the shards: the same data hash (the
# sanitizer build leaves these runs out: their code is the runs' above)
if ! sanitized; then
mkdir -p "$WORK/resume/checkpoints" "$WORK/resume2/checkpoints"
cp "$WORK/one/checkpoints/step_00000008.h5" "$WORK/resume/checkpoints/"
cp "$WORK/one/checkpoints/step_00000008.h5" "$WORK/resume2/checkpoints/"
run 2 "$WORK/out" "$WORK/err" "${common[@]}" data.train_tokens="$WORK/shards/part_*" \
  train.steps=10 run.dir="$WORK/resume"
check "resumed on the shards: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "resumed on the shards: no data warning" bash -c "! grep -q 'training data differ' '$WORK/out'"
run 2 "$WORK/out" "$WORK/err" "${common[@]}" data.train_tokens="$WORK/reordered/part_*" \
  train.steps=10 run.dir="$WORK/resume2"
check "resumed on reordered shards: exit $RC" [ "$RC" = 0 ]
check "resumed on reordered shards: warned: $(grep -o 'warning: the training data differ.*checkpoint' "$WORK/out")" \
  grep -q '^warning: the training data differ from those of the run that wrote the checkpoint' "$WORK/out"
fi

run 2 "$WORK/out" "$WORK/err" "${common[@]}" data.train_tokens="$WORK/shards/none_*.bin" \
  run.dir="$WORK/none"
check "a pattern without a match: exit 66 ($RC)" [ "$RC" = 66 ]
check "a pattern without a match: named, with the key: $(head -c 300 "$WORK/err")" \
  grep -q "data.train_tokens.*no file matches the pattern '$WORK/shards/none_\*.bin'" "$WORK/err"
check "no rank left running" no_leftover_ranks
finish
