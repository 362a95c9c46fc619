#!/usr/bin/env bash
# brown_text.sh: the text corpus of scripts/prepare_text.sh: data/brown/brown.txt is
# the pinned plain text (no part-of-speech tags left, the Brown Corpus's size) and the
# token files made from it are sound: TRTOKENS headers whose counts match the file
# sizes, a 90/10 train/val split, bytes that add up to the text, and GPT-2 ids that
# start with the encoding of the text's first line.
# Skipped (77) when the text has not been prepared (run scripts/prepare_text.sh).
source "$(dirname "$0")/../lib.sh"

BROWN=${TRAINER_DATA_DIR:-$SRC/data}/brown
GPT2=${TRAINER_DATA_DIR:-$SRC/data}/gpt2
TEXT=$BROWN/brown.txt
# the tokenize of the same build as the trainer under test (./trainer is a link)
TOKENIZE=$(dirname "$(readlink -f "$TRAINER")")/tokenize
if [ ! -f "$TEXT" ]; then
  echo "skipped: no $TEXT (run scripts/prepare_text.sh)"
  exit 77
fi

# ---- the text -------------------------------------------------------------------------
pinned=$(sed -n 's/^TEXT_SHA256=//p' "$SRC/scripts/prepare_text.sh")
sum=$(sha256sum "$TEXT" | cut -d' ' -f1)
check "brown.txt has the sha256 pinned in prepare_text.sh ($sum vs $pinned)" [ "$sum" = "$pinned" ]

# Brown tags after a word: "The/at", "County/nn-tl", "Georgia's/np$", "not/*"-style
# compounds; the tagged source matches this on 57,001 of its lines. Slashes that remain
# are the corpus's own ("and/or", "1/2", "mg/l", the phonemes "/r/").
tags='[A-Za-z0-9.,$]/(at|nn|nns|np|nps|in|jj|vb|vbd|vbg|vbn|vbz|cc|cs|rb|dt|pps|ppss|ppo|md|cd|to|be|bez|bedz|hv|hvd|wdt)([-+$*][^ ]*)?( |$)'
n=$(grep -cE "$tags" "$TEXT")
check "no part-of-speech tags left ($n lines with one): $(grep -m3 -E "$tags" "$TEXT")" [ "$n" = 0 ]
n=$(grep -c '``' "$TEXT")
check "no Brown opening quotes \`\` left ($n lines)" [ "$n" = 0 ]
n=$(grep -cP '\t| $|^ |  ' "$TEXT")
check "no tabs, double, leading or trailing spaces ($n lines)" [ "$n" = 0 ]
check "plain printable ASCII only" bash -c "! LC_ALL=C grep -qP '[^\x20-\x7e]' '$TEXT'"
# Seen: 5,981,822 bytes, 1,017,401 words, 57,340 sentences (one a line; NLTK counts
# the same), 15,667 paragraphs (blank-line separated; NLTK: 15,667).
bytes=$(stat -c %s "$TEXT")
words=$(wc -w <"$TEXT")
sentences=$(grep -c . "$TEXT")
paragraphs=$(awk 'BEGIN { RS = "" } END { print NR }' "$TEXT")
check "size about 6 MB ($bytes bytes)" [ "$bytes" -gt 5500000 -a "$bytes" -lt 6500000 ]
check "about a million words ($words)" [ "$words" -gt 950000 -a "$words" -lt 1100000 ]
check "57,340 sentences, one a line ($sentences)" [ "$sentences" = 57340 ]
check "15,667 paragraphs ($paragraphs)" [ "$paragraphs" = 15667 ]
check "begins with the first sentence of ca01" \
  bash -c "head -n 1 '$TEXT' | grep -qx 'The Fulton County Grand Jury said Friday an investigation of Atlanta.s recent primary election produced \"no evidence\" that any irregularities took place.'"

# ---- the token files ------------------------------------------------------------------
# count FILE: the token count in the header (uint64 at byte 16)
count() { od -An -tu8 -j16 -N8 --endian=little "$1" | tr -d ' '; }
# field FILE OFFSET: a uint32 of the header
field() { od -An -tu4 -j"$2" -N4 --endian=little "$1" | tr -d ' '; }
for name in gpt2 bytes; do
  for part in train val; do
    f=$BROWN/$name.$part.tok
    if [ ! -f "$f" ]; then
      fail "$f missing"
      continue
    fi
    check "$f starts with TRTOKENS" [ "$(head -c 8 "$f")" = TRTOKENS ]
    check "$f: version 1, uint16 tokens" [ "$(field "$f" 8)/$(field "$f" 12)" = 1/1 ]
    want_vocab=50257
    [ $name = bytes ] && want_vocab=256
    check "$f: vocabulary $want_vocab" [ "$(field "$f" 24)" = $want_vocab ]
    check "$f: count in the header matches the size" \
      [ $((32 + 2 * $(count "$f"))) = "$(stat -c %s "$f")" ]
  done
  train=$(count "$BROWN/$name.train.tok" 2>/dev/null || echo 0)
  val=$(count "$BROWN/$name.val.tok" 2>/dev/null || echo 0)
  # tokenize --split 0.9: train = floor(0.9 * total), so val is within a token of train/9
  check "$name: val ($val) is 1/9 of train ($train)" \
    [ $((9 * val - train)) -ge -9 -a $((9 * val - train)) -le 9 ]
  [ $name = bytes ] && check "bytes: train + val ($train + $val) = the text's $bytes bytes" \
    [ $((train + val)) = "$bytes" ]
  # Seen: 1,210,384 + 134,488 GPT-2 tokens (4.45 bytes a token, <|endoftext|> included)
  [ $name = gpt2 ] && check "gpt2: 3.5 to 5.5 bytes a token ($bytes bytes, $((train + val)) tokens)" \
    [ $((train + val)) -gt $((bytes * 2 / 11)) -a $((train + val)) -lt $((bytes * 2 / 7)) ]
done

# The GPT-2 stream begins with the ids of the first line (which ends at a pre-token
# boundary, "place." then "\n\n"), as tokenize --print encodes it on its own.
if [ -x "$TOKENIZE" ] && [ -f "$GPT2/encoder.json" ] && [ -f "$BROWN/gpt2.train.tok" ]; then
  head -n 1 "$TEXT" | tr -d '\n' >"$WORK/line.txt"
  "$TOKENIZE" --encoder "$GPT2/encoder.json" --merges "$GPT2/vocab.bpe" --print "$WORK/line.txt" \
    | tr -d '[]' | tr ',' '\n' >"$WORK/line.ids"
  n=$(wc -l <"$WORK/line.ids")
  od -An -tu2 -v -w2 -j32 -N$((2 * n)) --endian=little "$BROWN/gpt2.train.tok" | tr -d ' ' \
    >"$WORK/file.ids"
  check "gpt2.train.tok starts with the $n ids of the first line" \
    [ "$n" -gt 10 -a "$(cat "$WORK/line.ids")" = "$(cat "$WORK/file.ids")" ]
  # "The Fulton County" in GPT-2 ids: The=464, " Fulton"=44373, " County"=3418
  check "the first ids are The Fulton County: $(head -n 3 "$WORK/line.ids" | tr '\n' ' ')" \
    [ "$(head -n 3 "$WORK/line.ids" | tr '\n' ' ')" = "464 44373 3418 " ]
else
  fail "cannot compare with tokenize --print: need $TOKENIZE, $GPT2/encoder.json, gpt2.train.tok"
fi
finish
