#!/usr/bin/env bash
# gpu_sample.sh: sampling's key-value cache on a GPU (or DEVICE=cpu): GPT-2 124M's
# shape with a byte vocabulary (no tokenizer files needed), untrained, LENGTH (512)
# greedy tokens after a 3-byte prompt in bf16-mixed, once with the cache and once
# recomputing (train.recompute = block keeps no keys and values: a whole window per
# token). Prints each run's "sample (...) in S s" line and whether the two texts are
# the same (greedy picks on the same weights: they should be, unless two logits tie
# within the one-row products' rounding).
# Usage: validation/bench/gpu_sample.sh   (from the repository root; TRAINER, DEVICE,
# LENGTH, PRECISION override)
TRAINER=${TRAINER:-./build/trainer}
DEVICE=${DEVICE:-cuda} LENGTH=${LENGTH:-512} PRECISION=${PRECISION:-bf16-mixed}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
W=$(mktemp -d /tmp/gpu_sample.XXXXXX)
trap 'rm -rf "$W"' EXIT
for rc in none block; do
  mpirun -np 1 "$TRAINER" inputs/gpt2_124m.in system.device="$DEVICE" \
    train.precision="$PRECISION" data.format=random_tokens data.tokenizer=bytes \
    model.vocab_size=256 train.steps=0 train.epochs=0 train.batch_size=1 data.val_limit=1 \
    data.unigram_baseline=false checkpoint.at_end=false checkpoint.resume=none \
    sample.length="$LENGTH" sample.top_k=1 sample.prompt=The sample.every=0 \
    train.recompute=$rc run.dir="$W/$rc" run.progress=off >"$W/$rc.out" 2>&1 ||
    { echo "sample: the trainer failed (recompute $rc):"; tail -5 "$W/$rc.out"; exit 1; }
  echo "sample with recompute = $rc: $(grep -m1 '^sample' "$W/$rc.out")"
done
text() { grep -a -A1 '^sample' "$1" | tail -n +2; }
if [ "$(text "$W/none.out")" = "$(text "$W/block.out")" ]; then
  echo "sample: the cache's text is the whole windows' text"
else
  echo "sample: the texts differ (the cache's first: $(text "$W/none.out" | head -c 80))"
fi
