#!/usr/bin/env bash
# bad_input.sh: every kind of bad input gets one clear message naming where the
# problem is, the same non-zero exit code on every rank, no MPI abort noise, and
# no rank left running.
source "$(dirname "$0")/../lib.sh"
require_data

deck=$WORK/deck.in
cp inputs/mnist.in "$deck"
base=(run.dir="$WORK/run" train.steps=2 run.progress=off)

# In the sanitizer build, the cases whose reader the fuzz targets already run there
# (fuzz.deck, fuzz.idx, fuzz.token_file: thousands of inputs each) are left out; the
# way out of the trainer after an input error, which they share with the others, is
# checked by those others.
FUZZED=(unknown-section wrong-type duplicate-key malformed-header override-range override-type
  override-choice override-key truncated-data wrong-file-kind gpt-corrupt-tokens)

# expect NAME NP CODE PATTERN DECK [overrides...]
expect() {
  local name=$1 np=$2 code=$3 pattern=$4 d=$5; shift 5
  if sanitized && [[ " ${FUZZED[*]} " == *" $name "* ]]; then
    return
  fi
  run "$np" "$WORK/out" "$WORK/err" "$d" "${base[@]}" "$@"
  check "$name: exit code $RC, expected $code" [ "$RC" = "$code" ]
  check "$name: message matching '$pattern' in: $(cat "$WORK/err")" grep -qE -- "$pattern" "$WORK/err"
  local n
  n=$(grep -cE -- "$pattern" "$WORK/err")
  check "$name: printed $n times, expected once" [ "$n" = 1 ]
  check "$name: MPI abort noise" bash -c "! grep -qE 'MPI_ABORT|ORTE_ERROR_LOG|exited with non-zero|aborted' '$WORK/err'"
  check "$name: a rank is still running" no_leftover_ranks
}

# deck file problems, reported at FILE:LINE
sed 's/^epochs = 10/epochz = 10/' inputs/mnist.in >"$WORK/typo.in"
line=$(grep -n '^epochz' "$WORK/typo.in" | cut -d: -f1)
expect unknown-key 2 64 "typo.in:$line: unknown key 'epochz' in \[train\]; did you mean \[train\] epochs\?" "$WORK/typo.in"

sed 's/^\[optim\]/[optimizer]/' inputs/mnist.in >"$WORK/sect.in"
line=$(grep -n '^\[optimizer\]' "$WORK/sect.in" | cut -d: -f1)
expect unknown-section 2 64 "sect.in:$line: unknown section \[optimizer\]; did you mean \[optim\]\?" "$WORK/sect.in"

sed 's/^lr = .*/lr = fast/' inputs/mnist.in >"$WORK/type.in"
line=$(grep -n '^lr = fast' "$WORK/type.in" | cut -d: -f1)
expect wrong-type 2 64 "type.in:$line: \[optim\] lr expects a number, got 'fast'" "$WORK/type.in"

printf '[train]\nepochs = 1\nepochs = 2\n' >"$WORK/dup.in"
expect duplicate-key 2 64 "dup.in:3: \[train\] epochs is set twice \(first at .*dup.in:2\)" "$WORK/dup.in"

printf '[train\n' >"$WORK/hdr.in"
expect malformed-header 2 64 "hdr.in:1: malformed section header" "$WORK/hdr.in"

# command-line overrides, named as such
expect override-range 2 64 "command line 'optim.lr=-1': \[optim\] lr = -1 is out of range" "$deck" optim.lr=-1
expect override-type 2 64 "command line 'train.epochs=ten': \[train\] epochs expects an integer" "$deck" train.epochs=ten
expect override-choice 2 64 "command line 'optim.name=adam': \[optim\] name = 'adam' is not one of: sgd\|adamw" "$deck" optim.name=adam
expect override-key 2 64 "command line 'train.batchsize=64': unknown key 'batchsize' in \[train\]; did you mean \[train\] batch_size\?" "$deck" train.batchsize=64
expect override-syntax 2 64 "command line 'epochs=3': overrides are written section.key=value" "$deck" epochs=3

# files
expect missing-deck 2 66 "no_such.in: cannot read the deck" "$WORK/no_such.in"
expect missing-data 2 66 "command line 'data.train_images=$WORK/nothing-here': cannot open '$WORK/nothing-here'.*prepare_data" "$deck" data.train_images="$WORK/nothing-here"
head -c 5000 data/mnist/train-images-idx3-ubyte >"$WORK/truncated"
expect truncated-data 2 65 "truncated" "$deck" data.train_images="$WORK/truncated"
expect wrong-file-kind 2 65 "magic" "$deck" data.train_images=data/mnist/train-labels-idx1-ubyte
expect labels-beyond-classes 2 64 "labels go up to 9 but \[model\] classes = 5" "$deck" model.classes=5
expect unwritable-run-dir 2 74 "cannot create the run directory '/proc/nope/run'" "$deck" run.dir=/proc/nope/run

# impossible layouts
expect batch-not-divisible 4 64 "global batch_size 126 is not divisible by the 4 data-parallel ranks" "$deck" train.batch_size=126
expect more-ranks-than-samples 4 64 "global batch_size 8 is larger than the 4 training samples" "$deck" train.batch_size=8 data.train_limit=4
expect micro-not-divisible 2 64 "not divisible into 3 micro-batches" "$deck" train.micro_batches=3
expect mlp-too-deep 2 64 "command line 'model.hidden=1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1': \[model\] hidden lists more than 8 widths" "$deck" model.hidden=1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1
expect bucket-too-small 2 64 "command line 'parallel.bucket_kib=2': bucket_kib = 2: a bucket is at least 4 KiB" "$deck" parallel.bucket_kib=2
expect dp-mismatch 4 64 "dp=3 x tp=1 x pp=1 = 3 ranks, but the job has 4" "$deck" parallel.dp=3
expect tp-for-mlp 2 64 "model mlp trains data-parallel only" "$deck" parallel.tp=2

# a model that cannot fit: refused with the numbers before anything is allocated
# (65536-wide layers: about 52 GiB per rank, more than any test machine offers)
expect out-of-memory 4 71 "out of memory: each rank needs .* \(parameters .*\) but has about" "$deck" model.hidden=65536,65536
# ... a GPT at tp 2 without sequence parallelism (about 390 GiB a rank): the message
# names it as a way out
if [ -f "$SRC/data/brown/bytes.train.tok" ]; then
  printf '[model]\nname = gpt\n' >"$WORK/gpt_tp.in"
  expect out-of-memory-tp 2 71 "out of memory: each rank needs .*, or parallel.sequence_parallel = true; " \
    "$WORK/gpt_tp.in" model.n_layer=4 model.n_head=4 model.n_embd=512 model.seq_len=32 \
    model.vocab_size=256 data.format=tokens data.tokenizer=bytes \
    data.train_tokens="$SRC/data/brown/bytes.train.tok" data.val_tokens="$SRC/data/brown/bytes.val.tok" \
    train.batch_size=131072 parallel.tp=2
fi

# a job confined to 1 GiB by a memory cgroup, as Slurm confines one: the limit, not
# the node's free memory, is what its ranks share (8192-wide layers: about 0.9 GiB
# a rank, which the node has). Needs a memory cgroup this test can make (cgroup v1's
# memory hierarchy, or v2 with the memory controller delegated); else left out.
# ... a GPT whose activations do not fit there at one micro-batch: the message names
# the fewest micro-batches that fit, and at that many it trains in the same 1 GiB
cgroup_micro_case() {
  local bytes=$SRC/data/brown/bytes micro
  [ -f "$bytes.train.tok" ] || { echo "note: no Brown token files: the micro-batch case is left out"; return; }
  printf '[model]\nname = gpt\n' >"$WORK/gpt_big.in"
  local g=("$WORK/gpt_big.in" model.n_layer=4 model.n_head=4 model.n_embd=64 model.seq_len=32
    model.vocab_size=256 data.format=tokens data.tokenizer=bytes data.train_tokens="$bytes.train.tok"
    data.val_tokens="$bytes.val.tok" data.val_limit=8 train.batch_size=4096 train.steps=2
    train.eval_every=0 sample.length=0)
  expect out-of-memory-cgroup-micro 2 71 "out of memory: each rank needs .* at batch 2048.*; at \[train\] micro_batches = [0-9]+ \(micro-batches of [0-9]+\) a rank would need" \
    "${g[@]}"
  check "... and how to compare every layout: $(cat "$WORK/err")" grep -q \
    "; trainer --plan $WORK/gpt_big.in --ranks 2 --ranks-per-node 2 --layouts (and this run's overrides) compares every dp x tp x pp of these ranks" \
    "$WORK/err"
  micro=$(sed -n 's/.*; at \[train\] micro_batches = \([0-9]*\) .*/\1/p' "$WORK/err")
  run 2 "$WORK/out" "$WORK/err" "${g[@]}" train.micro_batches="$micro" checkpoint.at_end=false \
    run.dir="$WORK/gpt_big"
  check "... at micro_batches = $micro it trains within the 1 GiB: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
}
cgroup_case() {
  local own mnt dir limit=memory.limit_in_bytes
  own=$(awk -F: '$2 ~ /(^|,)memory(,|$)/ {print $3}' /proc/self/cgroup)
  mnt=$(awk '{for (i = 1; i <= NF; i++) if ($i == "-") { t = $(i + 1); o = $(i + 3) }
    if (t == "cgroup" && o ~ /(^|,)memory(,|$)/) print $5}' /proc/self/mountinfo | head -1)
  if [ -z "$own" ] || [ -z "$mnt" ]; then
    own=$(awk -F: '$1 == "0" {print $3}' /proc/self/cgroup) limit=memory.max
    mnt=$(awk '{for (i = 1; i <= NF; i++) if ($i == "-") t = $(i + 1); if (t == "cgroup2") print $5}' \
      /proc/self/mountinfo | head -1)
  fi
  dir=$mnt${own%/}/trainer-test-$$
  if [ -z "$mnt" ] || ! mkdir "$dir" 2>/dev/null; then
    echo "note: no memory cgroup to make here; the cgroup case is left out"
    return
  fi
  if echo $((1 << 30)) >"$dir/$limit" 2>/dev/null && echo $$ >"$dir/cgroup.procs" 2>/dev/null; then
    expect out-of-memory-cgroup 2 71 "out of memory: each rank needs .* but has about [0-9.]+ MiB \(([0-9.]+ MiB|1\.0 GiB) available to the job on this node / 2 ranks\)" \
      "$deck" model.hidden=8192,8192
    cgroup_micro_case
    echo $$ >"$mnt$own/cgroup.procs"
  else
    echo "note: cannot set a memory limit in $dir; the cgroup case is left out"
  fi
  rmdir "$dir"
}
cgroup_case

# the gpt model and its text data (the byte-level Brown files when prepared, else a
# small token file written here: only headers and sizes matter to these errors)
gdeck=$WORK/gpt.in
printf '[model]\nname = gpt\nn_layer = 1\nn_head = 2\nn_embd = 16\nseq_len = 8\nvocab_size = 256\n[data]\nformat = tokens\n' >"$gdeck"
tok=$WORK/t
"$PYTHON" - "$tok" <<'PY'
import struct, sys
for split, n in (("train", 400), ("val", 100)):
    with open(sys.argv[1] + "." + split + ".tok", "wb") as f:
        f.write(b"TRTOKENS" + struct.pack("<IIQII", 1, 1, n, 300, 0))
        f.write(struct.pack("<%dH" % n, *[(i * 7) % 300 for i in range(n)]))
PY
gtok=(data.train_tokens="$tok.train.tok" data.val_tokens="$tok.val.tok" train.batch_size=4)
expect gpt-vocab-too-small 2 64 "t.train.tok: tokens go up to a vocabulary of 300 but \[model\] vocab_size = 256; set vocab_size = 300" "$gdeck" "${gtok[@]}"
expect gpt-heads 2 64 "n_embd = 16 is not divisible by n_head = 3" "$gdeck" "${gtok[@]}" model.n_head=3 model.vocab_size=300
expect gpt-missing-tokens 2 66 "data.train_tokens=.*nowhere.tok.*\\(run scripts/prepare_text.sh" "$gdeck" "${gtok[@]}" model.vocab_size=300 data.train_tokens="$WORK/nowhere.tok"
expect gpt-format 2 64 "model gpt reads tokens, but \[data\] format = idx; set format = tokens" "$gdeck" "${gtok[@]}" model.vocab_size=300 data.format=idx
expect mlp-on-tokens 2 64 "model mlp reads images, but \[data\] format = tokens; set format = idx" "$deck" data.format=tokens
expect gpt-window-too-long 2 64 "t.val.tok: 100 tokens make no window of seq_len \+ 1 = 101 tokens" "$gdeck" "${gtok[@]}" model.vocab_size=300 model.seq_len=100
expect gpt-batch-too-large 2 64 "global batch 64 is larger than the 49 training samples.*window of seq_len \+ 1 = 9 tokens" "$gdeck" "${gtok[@]}" model.vocab_size=300 train.batch_size=64
expect gpt-tp-heads 2 64 "parallel.tp=2.*tp = 2 does not divide \[model\] n_head = 1" "$gdeck" "${gtok[@]}" model.vocab_size=300 model.n_head=1 parallel.tp=2
expect gpt-pp-blocks 4 64 "parallel.pp=4.*pp = 4 stages is more than the 2 blocks .*and the head.*use pp <= 3" "$gdeck" "${gtok[@]}" model.vocab_size=300 model.n_layer=2 parallel.pp=4
expect gpt-stage-blocks 2 64 "parallel.stage_blocks=2,1.*stage_blocks = 2,1 holds 3 blocks, but \[model\] n_layer = 2: the counts must add up to n_layer \(by cost: " "$gdeck" "${gtok[@]}" model.vocab_size=300 model.n_layer=2 parallel.pp=2 parallel.stage_blocks=2,1
expect gpt-layout-indivisible 3 64 "3 ranks cannot be split into tp=2 x pp=1" "$gdeck" "${gtok[@]}" model.vocab_size=300 parallel.tp=2
expect gpt-zero-range 2 64 "parallel.zero" "$gdeck" "${gtok[@]}" model.vocab_size=300 parallel.zero=3
# random tokens (a benchmark) never end an epoch: a run counted in epochs would not end
expect gpt-random-epochs 2 64 "\\[train\\] steps = 0 counts the run in epochs \\(2\\), and data.format = random_tokens \\(a benchmark\\) has none to count; set \\[train\\] steps" \
  "$gdeck" model.vocab_size=300 data.format=random_tokens train.batch_size=4 train.steps=0 train.epochs=2
# token files of different tokenizers (their headers' vocabularies): shards of one set,
# training against validation, the files against [data] tokenizer (for samples)
mkdir -p "$WORK/shards"
"$PYTHON" - "$WORK/shards/a.tok" "$WORK/shards/b.tok" "$WORK/v256.tok" <<'PY'
import struct, sys
for path, v in ((sys.argv[1], 300), (sys.argv[2], 256), (sys.argv[3], 256)):
    with open(path, "wb") as f:
        f.write(b"TRTOKENS" + struct.pack("<IIQII", 1, 1, 200, v, 0))
        f.write(struct.pack("<200H", *[(i * 7) % 256 for i in range(200)]))
PY
expect gpt-shards-vocab 2 64 "shards/b.tok: made with a vocabulary of 256, but .*shards/a.tok with one of 300: every file of .*must come from the same tokenizer" \
  "$gdeck" "${gtok[@]}" model.vocab_size=300 data.train_tokens="$WORK/shards/*.tok"
expect gpt-val-vocab 2 64 "v256.tok was made with a vocabulary of 256, but the training tokens \(.*t.train.tok\) with one of 300" \
  "$gdeck" "${gtok[@]}" model.vocab_size=300 data.val_tokens="$WORK/v256.tok"
expect gpt-tokens-directory 2 66 "data.val_tokens=.*shards': .*shards: is a directory; name a token file, or shards by a pattern" \
  "$gdeck" "${gtok[@]}" model.vocab_size=300 data.val_tokens="$WORK/shards"
expect gpt-tokenizer-vocab 2 64 "data.tokenizer=bytes': tokenizer bytes has 256 tokens, but the token files were made with a vocabulary of 300: the trainer decodes GPT-2's BPE and bytes only" \
  "$gdeck" "${gtok[@]}" model.vocab_size=300 data.tokenizer=bytes sample.length=4
# the tokenizer's files (loaded by rank 0 alone, for samples): the key of the file that
# failed and 66 for a missing one, at any rank count
for np in 1 2; do
  expect gpt-encoder-missing-np$np $np 66 "command line 'data.encoder=.*nowhere.json': .*nowhere.json: cannot open" \
    "$gdeck" "${gtok[@]}" model.vocab_size=300 sample.length=4 data.encoder="$WORK/nowhere.json"
done
if [ -f data/gpt2/encoder.json ]; then
  expect gpt-merges-missing 2 66 "command line 'data.merges=.*nowhere.bpe': .*nowhere.bpe: cannot open" \
    "$gdeck" "${gtok[@]}" model.vocab_size=300 sample.length=4 data.merges="$WORK/nowhere.bpe"
  # the encoder's path the start of the merges' (vocab, vocab.bpe): still the merges
  cp data/gpt2/encoder.json "$WORK/vocab"
  expect gpt-merges-missing-prefix 2 66 "command line 'data.merges=.*vocab.bpe': .*vocab.bpe: cannot open" \
    "$gdeck" "${gtok[@]}" model.vocab_size=300 sample.length=4 data.encoder="$WORK/vocab" \
    data.merges="$WORK/vocab.bpe"
fi
printf 'not a token file at all, just some text that is long enough' >"$WORK/bad.tok"
expect gpt-corrupt-tokens 2 65 "bad.tok" "$gdeck" "${gtok[@]}" model.vocab_size=300 data.val_tokens="$WORK/bad.tok"
# a token past the header's vocabulary inside the file (opening reads the header and
# the size, not every token): the start-up's check that every rank reads the same
# data reads 64 windows spread over each file, so one there is an input error, printed
# once; one elsewhere is found when a window holding it is read, a run-time fault on
# the rank that reads it. Exit 65, the file, the token and the fix named.
"$PYTHON" - "$tok.train.tok" "$WORK/damaged.tok" "$WORK/damaged_late.tok" <<'PY'
import struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
for i in range(5, 400, 9):  # one token of 301 in every window of 9
    data[32 + 2 * i:34 + 2 * i] = (301).to_bytes(2, "little")
open(sys.argv[2], "wb").write(data)
# 2000 tokens, 249 windows of 8 + 1: 301 in the middle of every window but the 64 the
# start-up's hash reads (tr_token_data_digest's spread)
n, T = 2000, 8
w = (n - 1) // T
sampled = {k * (w - 1) // 63 for k in range(64)}
toks = [(i * 7) % 300 for i in range(n)]
for v in range(w):
    if v not in sampled and v - 1 not in sampled and v + 1 not in sampled:
        toks[v * T + 4] = 301
open(sys.argv[3], "wb").write(b"TRTOKENS" + struct.pack("<IIQII", 1, 1, n, 300, 0)
                              + struct.pack("<%dH" % n, *toks))
PY
expect gpt-damaged-token 2 65 "data.train_tokens=.*damaged.tok: token [0-9]+ is 301, not below vocab_size 300: the file is damaged, or its header's vocabulary is not its tokens'; make it again with the tokenizer that wrote it" \
  "$gdeck" "${gtok[@]}" model.vocab_size=300 data.train_tokens="$WORK/damaged.tok"
run 2 "$WORK/out" "$WORK/err" "$gdeck" "${base[@]}" "${gtok[@]}" model.vocab_size=300 \
  data.train_tokens="$WORK/damaged_late.tok" train.steps=20
check "damaged token at run time: exit code $RC, expected 65" [ "$RC" = 65 ]
check "damaged token at run time: message in: $(head -c 600 "$WORK/err")" \
  grep -qE "damaged_late.tok: token [0-9]+ is 301, not below vocab_size 300: the file is damaged" "$WORK/err"
check "damaged token at run time: not found at start-up" grep -q "^step\|^run:" "$WORK/out"
check "damaged token at run time: a rank is still running" no_leftover_ranks

# [system] device = cuda where it cannot train: a build without CUDA says how to build
# with it; a CUDA build on a machine without a usable GPU (this one) says so, with
# CUDA's reason and the host; on a GPU machine the GPUs are chosen and checked, and
# one rank more than the node's GPUs is refused (two ranks would share a GPU)
probe=$("$TRAINER" --version | tail -n 1)
case $probe in
  "CPU-only build")
    expect cuda-not-built 2 64 "command line 'system.device=cuda': \[system\] device = cuda, but this trainer was built without CUDA: .*cmake -DTRAINER_CUDA=ON" "$deck" system.device=cuda ;;
  *"no usable GPU"*)
    expect cuda-no-gpu 2 64 "command line 'system.device=cuda': \[system\] device = cuda, but host $(hostname) has no usable GPU: .+; or set device = cpu" "$deck" system.device=cuda ;;
  *)
    # a GPU machine ("N CUDA devices visible"): N + 1 ranks on this node
    gpus=$(echo "$probe" | grep -oE '[0-9]+ CUDA device' | cut -d' ' -f1)
    expect cuda-too-many-ranks $((${gpus:-1} + 1)) 64 "device = cuda, but" "$deck" system.device=cuda ;;
esac

# a run that diverges stops at the first step whose loss (or, where it is taken, the
# gradients' norm) is not finite, before evaluating or checkpointing that state: the
# checkpoints written before stay the newest (resume = auto takes them)
expect diverged 2 65 "error: training diverged at step [0-9]+: the loss is (NaN|inf); stopped without evaluating or checkpointing that state \(the newest checkpoint, step [0-9]+'s, is the last finite one\): lower optim.lr" \
  "$deck" train.steps=40 optim.lr=1e5 checkpoint.every=2 run.dir="$WORK/diverged"
step=$(grep -oE 'diverged at step [0-9]+' "$WORK/err" | grep -oE '[0-9]+$')
newest=$(cd "$WORK/diverged/checkpoints" && ls step_*.h5 | tail -1)
check "diverged: the newest checkpoint ($newest) is the one before step $step" \
  [ "$newest" = "$(printf 'step_%08d.h5' $(( (step - 1) / 2 * 2 )))" ]
check "diverged: its weights are finite" "$PYTHON" -c "
import h5py, numpy as np, sys
f = h5py.File(sys.argv[1], 'r')
sys.exit(not all(np.isfinite(f['model'][k][n][()]).all() for k in f['model'] for n in f['model'][k]))" \
  "$WORK/diverged/checkpoints/$newest"
# a fixed fp16 loss scale beyond fp16's range: every gradient overflows at once, and
# the step is not made (dynamic scaling, the default, would skip it and halve)
expect diverged-fp16-fixed-scale 2 65 "error: training diverged at step 1: the gradients' norm is (NaN|inf) .*let fp16-mixed scale the loss dynamically \(train.loss_scale = 0\)" \
  "$deck" train.precision=fp16-mixed train.loss_scale=1e30

# a directory given as the deck; an empty run directory (a slip, not a write failure)
expect deck-is-directory 2 66 "$WORK: is a directory, not a deck" "$WORK"
expect run-dir-empty 2 64 "command line 'run.dir=': is empty: name the run directory" "$deck" run.dir=

# the command line itself
"$TRAINER" --bogus >"$WORK/out" 2>"$WORK/err"
rc=$?
check "unknown option exit code $rc; stderr ends: $(tail -c 600 "$WORK/err")" [ $rc = 64 ]
check "unknown option message" grep -q "unknown option '--bogus'" "$WORK/err"
finish
