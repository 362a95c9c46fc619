#!/usr/bin/env bash
# straggler.sh: ranks.csv (each rank's busy time a step and its waits) and the
# "slowest rank:" line (summary.json's slowest_rank) name the rank that the others
# waited for. One rank is made slow (fault_preload.c: each of its GEMMs sleeps
# first, as on a throttled or shared node). In a data-parallel run (MLP, 4 ranks) it
# is named, and the others' time went into the gradient sync. In a pipeline (GPT,
# dp 2 x pp 2) it is named with its stage, and the rank of the other stage that
# waited for its messages is not busy: its wait is "for the other stages". A run
# whose ranks have no peer doing the same work (pp 2 alone) names none.
source "$(dirname "$0")/../lib.sh"
require_data
BYTES=$SRC/data/brown/bytes
[ -f "$BYTES.train.tok" ] || { echo "skipped: no $BYTES.train.tok (run scripts/prepare_text.sh)"; exit 77; }
# a preload library ahead of the sanitizers' runtime is refused by it; the search
# for the slowest rank itself runs at the end of every multi-rank test there
if sanitized; then
  echo "skipped under the sanitizers: they refuse a preload library ahead of theirs"
  exit 77
fi
check "the preload library is built: $FAULT_PRELOAD" [ -f "$FAULT_PRELOAD" ]

# ranks DIR EXPR: EXPR holds for ranks.csv's rows (r[RANK][COLUMN], numbers as floats)
ranks() {
  "$PYTHON" - "$1/ranks.csv" "$2" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
r = [{k: (v if k == "host" else float(v)) for k, v in row.items()} for row in rows]
ok = eval("(" + sys.argv[2] + ")")
if not ok:
    print(sys.argv[2], "fails for", r)
sys.exit(0 if ok else 1)
PY
}
# summary DIR KEY: a value of summary.json (None for null)
summary() { "$PYTHON" -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" \
  "$1/summary.json" "$2"; }

# 1. data parallel: rank 2 of 4 sleeps 3 ms before each GEMM
LD_PRELOAD="$FAULT_PRELOAD" TR_TEST_SLOW_RANK=2 TR_TEST_SLOW_US=3000 run 4 "$WORK/out" \
  "$WORK/err" inputs/mnist.in train.steps=20 run.progress=off run.dir="$WORK/dp"
check "dp 4, rank 2 slow: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "it is named: $(grep '^slowest' "$WORK/out")" \
  grep -q "^slowest rank: 2 on $(hostname), busy .* over the 4 ranks doing its work (+[0-9]*%)$" \
  "$WORK/out"
check "summary.json: slowest_rank 2, busy more than twice the median" "$PYTHON" -c "
import json, sys
s = json.load(open('$WORK/dp/summary.json'))
sys.exit(0 if s['slowest_rank'] == 2 and s['slowest_rank_host'] == '$(hostname)' and
         s['slowest_rank_busy_seconds'] > 2 * s['median_busy_seconds'] > 0 else 1)"
check "ranks.csv: 4 ranks on this node, rank 2 busiest, the others waiting in the sync" \
  ranks "$WORK/dp" "len(r) == 4 and all(x['host'] == '$(hostname)' for x in r) and
    max(range(4), key=lambda i: r[i]['busy_seconds_per_step']) == 2 and
    all(r[i]['sync_wait_seconds'] > r[2]['sync_wait_seconds'] for i in (0, 1, 3))"

# 2. a pipeline: rank 3 (stage 1 of the second pipeline) slow; rank 2, its stage 0,
# waits for it at every message
printf '[model]\nname = gpt\n' >"$WORK/gpt.in"
G=("$WORK/gpt.in" model.n_layer=2 model.n_head=2 model.n_embd=32 model.seq_len=16
  model.vocab_size=256 data.format=tokens data.train_tokens="$BYTES.train.tok"
  data.val_tokens="$BYTES.val.tok" data.val_limit=8 train.batch_size=8 train.micro_batches=2
  train.steps=8 optim.name=adamw run.progress=off parallel.pp=2)
LD_PRELOAD="$FAULT_PRELOAD" TR_TEST_SLOW_RANK=3 TR_TEST_SLOW_US=3000 run 4 "$WORK/out" \
  "$WORK/err" "${G[@]}" run.dir="$WORK/pp"
check "dp 2 x pp 2, rank 3 slow: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "it is named with its stage: $(grep '^slowest' "$WORK/out")" \
  grep -q "^slowest rank: 3 (pipeline stage 1) on .* over the 2 ranks doing its work" "$WORK/out"
check "ranks.csv: rank 2 waited for rank 3's messages and was not busy" ranks "$WORK/pp" \
  "[(x['dp'], x['pp']) for x in r] == [(0, 0), (0, 1), (1, 0), (1, 1)] and
    r[2]['busy_seconds_per_step'] < 0.25 * r[3]['busy_seconds_per_step'] and
    r[2]['pipeline_wait_seconds'] > r[0]['pipeline_wait_seconds']"
check "the time line has the waits for the other stages: $(grep '^time:' "$WORK/out")" \
  grep -q "^time: .*, for the other stages [0-9.]*) + " "$WORK/out"
check "the parts of the pipeline run's time" time_accounted "$WORK/pp" "$WORK/out"

# 3. no peers: pp 2 on 2 ranks, each stage alone
run 2 "$WORK/out" "$WORK/err" "${G[@]}" run.dir="$WORK/alone"
check "pp 2 alone: exit $RC $(tail -2 "$WORK/err")" [ "$RC" = 0 ]
check "no rank named" [ "$(grep -c '^slowest' "$WORK/out")" = 0 ]
check "summary.json: slowest_rank null" [ "$(summary "$WORK/alone" slowest_rank)" = None ]
check "ranks.csv: both stages" ranks "$WORK/alone" "[x['pp'] for x in r] == [0, 1]"
check "no rank left running" no_leftover_ranks
finish
