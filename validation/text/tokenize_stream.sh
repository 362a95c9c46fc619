#!/usr/bin/env bash
# tokenize_stream.sh: the tokenize tool streams a corpus in pieces on several
# threads, and its token files must hold exactly the ids of each document encoded
# whole (tokenize --print, which compare_with_js.sh checks against the reference
# encoder), each followed by <|endoftext|>, split at floor(0.9 N):
#   - plain files and gzip-compressed ones, at 1, 2 and 3 threads and pieces of 1 KiB
#     to 1 MiB (hundreds of cuts through the Brown corpus and through text made to
#     stress the pre-tokenizer at its newlines: Unicode spaces, CJK, invalid bytes);
#   - the same documents as JSON lines (--jsonl, --field), escaped or not;
#   - byte mode;
#   - bad input: a malformed line, a missing member, a missing or truncated file:
#     the exit code, a message naming FILE:LINE, and no token file left behind;
#   - memory: a 64 MiB corpus in a fraction of its size.
# GPT-2's files (scripts/fetch_gpt2_bpe.sh) for the BPE parts; byte mode always.
# TOKENIZE names the binary (default build/tokenize).
source "$(dirname "$0")/../lib.sh"
TOKENIZE=${TOKENIZE:-$SRC/build/tokenize}
GPT2=${TRAINER_DATA_DIR:-$SRC/data}/gpt2
BROWN=${TRAINER_DATA_DIR:-$SRC/data}/brown/brown.txt
[ -x "$TOKENIZE" ] || { echo "FAIL: $TOKENIZE not built (set TOKENIZE)"; exit 1; }

# The documents: a piece of the Brown corpus (or generated English where it is
# missing), stress text, an empty document, and a one-line document.
"$PYTHON" - "$WORK" "$BROWN" <<'PY'
import gzip, json, os, random, sys
work, brown = sys.argv[1], sys.argv[2]
rnd = random.Random(7)
if os.path.exists(brown):
    text = open(brown, "rb").read()[:1500000]
else:
    words = ["the", "of", "and", "to", "a", "in", "is", "it", "that", "was", "he's", "I'll"]
    text = "\n".join(" ".join(rnd.choice(words) for _ in range(12)) for _ in range(20000)).encode()
atoms = ["\n", "\n", "\n", "\n\n", " ", "  ", "\t", "\r\n", "a", "word", "Word", "7", "42",
         "'s", "'ll", "'", "!", ".", "\u00a0", "\u3000", "\u2028", "\u4e2d", "\U0001F600",
         "\ufeff", "\x0b"]
stress = "".join(rnd.choice(atoms) for _ in range(60000)).encode()
stress_raw = stress + b"\xff tail \xc3\n"  # invalid bytes: plain files only
docs = [text[:700000], stress, b"", b"one line, no newline at the end", text[700000:]]
for i, d in enumerate(docs):
    open(os.path.join(work, "doc%d.txt" % i), "wb").write(d)
open(os.path.join(work, "raw.txt"), "wb").write(stress_raw)
with gzip.open(os.path.join(work, "doc4.txt.gz"), "wb") as f:
    f.write(docs[4])
# the same documents as JSON lines, escaped (ensure_ascii) and not, other members
# around, a blank line between; the documents are valid UTF-8
with open(os.path.join(work, "docs.jsonl"), "w", encoding="utf-8") as f:
    for i, d in enumerate(docs[:3]):
        rec = {"id": i, "meta": {"text": "decoy", "tags": ["a", {"b": "}"}]}, "text": d.decode()}
        f.write(json.dumps(rec, ensure_ascii=(i % 2 == 0)) + "\n")
    f.write("\n")
with gzip.open(os.path.join(work, "docs2.jsonl.gz"), "wt", encoding="utf-8") as f:
    for d in docs[3:]:
        f.write(json.dumps({"body": "not this", "text": d.decode()}) + "\n")
with open(os.path.join(work, "body.jsonl"), "w", encoding="utf-8") as f:
    for d in docs:
        f.write(json.dumps({"body": d.decode()}) + "\n")
PY
DOCS=("$WORK"/doc0.txt "$WORK"/doc1.txt "$WORK"/doc2.txt "$WORK"/doc3.txt "$WORK"/doc4.txt.gz)

# expect_split PRINTED EOT PREFIX: PREFIX.{train,val}.tok hold PRINTED's arrays, each
# followed by EOT (none when EOT is -1), split at floor(0.9 N)
expect_split() {
  "$PYTHON" - "$@" <<'PY'
import json, struct, sys
printed, eot, prefix = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ids = []
for line in open(printed):
    ids += json.loads(line) + ([eot] if eot >= 0 else [])
def read(path):
    b = open(path, "rb").read()
    assert b[:8] == b"TRTOKENS", path
    count, width = struct.unpack("<Q", b[16:24])[0], 2 if b[12] == 1 else 4
    body = b[32:]
    assert len(body) == count * width, path
    fmt = "<%d%s" % (count, "H" if width == 2 else "I")
    return list(struct.unpack(fmt, body))
train, val = read(prefix + ".train.tok"), read(prefix + ".val.tok")
n = len(ids)
ntrain = int(n * 0.9)
if train + val != ids or len(train) != ntrain:
    sys.exit("differ: %d+%d tokens against %d, train %d against %d; first difference at %s" % (
        len(train), len(val), n, len(train), ntrain,
        next((i for i, (a, b) in enumerate(zip(train + val, ids)) if a != b), "the end")))
PY
}

# below LIMIT N: N is a number below LIMIT
below() { [ -n "$2" ] && [ "$2" -lt "$1" ]; }

# no_outputs PREFIX: neither token file nor a .tmp is left
no_outputs() { ! ls "$1".*tok* >/dev/null 2>&1; }

# --- byte mode (no files needed) --------------------------------------------
"$TOKENIZE" --bytes --print "${DOCS[@]}" "$WORK/raw.txt" > "$WORK/bytes.print"
for args in "--threads 1" "--threads 3 --piece-kib 1"; do
  "$TOKENIZE" --bytes $args -o "$WORK/b" "${DOCS[@]}" "$WORK/raw.txt" > "$WORK/out" 2>&1
  rc=$?
  check "bytes, $args: exit 0: $(cat "$WORK/out")" [ $rc = 0 ]
  check "bytes, $args: the documents' bytes" expect_split "$WORK/bytes.print" -1 "$WORK/b"
done

if [ ! -f "$GPT2/encoder.json" ] || [ ! -f "$GPT2/vocab.bpe" ]; then
  echo "skipped: the GPT-2 parts ($GPT2/encoder.json missing: scripts/fetch_gpt2_bpe.sh)"
  finish
  exit
fi
BPE=(--encoder "$GPT2/encoder.json" --merges "$GPT2/vocab.bpe")

# --- GPT-2 BPE: plain and gzip files, any threads and piece size --------------
"$TOKENIZE" "${BPE[@]}" --print "${DOCS[@]}" "$WORK/raw.txt" > "$WORK/bpe.print"
check "--print: one array a document" [ "$(wc -l < "$WORK/bpe.print")" = 6 ]
for args in "--threads 1" "--threads 2 --piece-kib 1" "--threads 3 --piece-kib 4" "--threads 2"; do
  "$TOKENIZE" "${BPE[@]}" $args -o "$WORK/t" "${DOCS[@]}" "$WORK/raw.txt" > "$WORK/out" 2>&1
  rc=$?
  check "bpe, $args: exit 0: $(cat "$WORK/out")" [ $rc = 0 ]
  check "bpe, $args: each document's ids" expect_split "$WORK/bpe.print" 50256 "$WORK/t"
done
check "the summary names the threads: $(head -n 1 "$WORK/out")" \
  grep -q "^tokenize: 6 file(s), [0-9]* bytes -> [0-9]* tokens .* on 2 threads$" "$WORK/out"

# --- JSON lines ---------------------------------------------------------------
head -n 5 "$WORK/bpe.print" > "$WORK/valid.print" # the valid UTF-8 documents
"$TOKENIZE" "${BPE[@]}" --jsonl --field body --print "$WORK/docs.jsonl" > /dev/null 2>&1
check "--jsonl --field body --print on files without body: exit 65" [ $? = 65 ]
for args in "--threads 1" "--threads 3 --piece-kib 1"; do
  "$TOKENIZE" "${BPE[@]}" --jsonl --field body $args -o "$WORK/j" "$WORK/body.jsonl" \
    > "$WORK/out" 2>&1
  rc=$?
  check "jsonl, $args: exit 0: $(cat "$WORK/out")" [ $rc = 0 ]
  check "jsonl, $args: the documents' ids" expect_split "$WORK/valid.print" 50256 "$WORK/j"
  check "jsonl, $args: 5 documents counted" grep -q "^tokenize: 5 documents from" "$WORK/out"
done
# escaped and raw UTF-8, other members and a decoy inside them, a blank line, gzip
"$TOKENIZE" "${BPE[@]}" --jsonl --piece-kib 1 -o "$WORK/k" "$WORK/docs.jsonl" "$WORK/docs2.jsonl.gz" \
  > "$WORK/out" 2>&1
rc=$?
check "jsonl (text member, two files): exit 0: $(cat "$WORK/out")" [ $rc = 0 ]
check "jsonl (text member, two files): the documents' ids" \
  expect_split "$WORK/valid.print" 50256 "$WORK/k"

# a byte order mark before the first record is not part of the JSON
printf '\xef\xbb\xbf' | cat - "$WORK/body.jsonl" > "$WORK/bom.jsonl"
"$TOKENIZE" "${BPE[@]}" --jsonl --field body -o "$WORK/bom" "$WORK/bom.jsonl" > "$WORK/out" 2>&1
rc=$?
check "jsonl with a byte order mark: exit 0: $(cat "$WORK/out")" [ $rc = 0 ]
check "jsonl with a byte order mark: the same ids" expect_split "$WORK/valid.print" 50256 "$WORK/bom"

# --- bad input ----------------------------------------------------------------
printf '{"text": "fine"}\n{"text": "fine"}\n{"text": "broken\n' > "$WORK/bad.jsonl"
"$TOKENIZE" "${BPE[@]}" --jsonl -o "$WORK/bad" "$WORK/bad.jsonl" > "$WORK/out" 2>&1
rc=$?
check "malformed line: exit 65 ($rc)" [ $rc = 65 ]
check "malformed line: FILE:LINE and what: $(cat "$WORK/out")" \
  grep -q "^tokenize: $WORK/bad.jsonl:3: byte 10: unterminated string$" "$WORK/out"
check "malformed line: nothing written" no_outputs "$WORK/bad"
printf '{"text": "fine"}\n{"content": "x"}\n' > "$WORK/field.jsonl"
"$TOKENIZE" "${BPE[@]}" --jsonl -o "$WORK/bad" "$WORK/field.jsonl" > "$WORK/out" 2>&1
rc=$?
check "missing member: exit 65 ($rc)" [ $rc = 65 ]
check "missing member: names it and --field: $(cat "$WORK/out")" \
  grep -q "field.jsonl:2: the object has no member \"text\" (--field names" "$WORK/out"
check "missing member: nothing written" no_outputs "$WORK/bad"
"$TOKENIZE" "${BPE[@]}" -o "$WORK/bad" "$WORK/doc0.txt" "$WORK/nonesuch.txt" > "$WORK/out" 2>&1
rc=$?
check "missing file: exit 66 ($rc)" [ $rc = 66 ]
check "missing file: named: $(cat "$WORK/out")" grep -q "nonesuch.txt: cannot open" "$WORK/out"
check "missing file: nothing written" no_outputs "$WORK/bad"
head -c 20000 "$WORK/doc4.txt.gz" > "$WORK/cut.txt.gz"
"$TOKENIZE" "${BPE[@]}" -o "$WORK/bad" "$WORK/cut.txt.gz" > "$WORK/out" 2>&1
rc=$?
check "truncated gzip: exit 65 ($rc): $(cat "$WORK/out")" [ $rc = 65 ]
check "truncated gzip: nothing written" no_outputs "$WORK/bad"
printf '\x1f\x8bnot gzip at all' > "$WORK/fake.txt"
"$TOKENIZE" --bytes -o "$WORK/bad" "$WORK/fake.txt" > "$WORK/out" 2>&1
rc=$?
check "not gzip after all: exit 65 ($rc), the file named once: $(cat "$WORK/out")" \
  [ $rc = 65 -a "$(grep -o "fake.txt" "$WORK/out" | wc -l)" = 1 ]
# -o names the start of the files, not a directory; its directory must exist; --field
# is for --jsonl
mkdir -p "$WORK/outdir"
for o in "$WORK/outdir" "$WORK/outdir/"; do
  "$TOKENIZE" --bytes -o "$o" "$WORK/doc0.txt" > "$WORK/out" 2>&1
  rc=$?
  check "-o $o: exit 64 ($rc): $(cat "$WORK/out")" \
    [ $rc = 64 -a -z "$(ls -A "$WORK/outdir")" ]
done
"$TOKENIZE" --bytes -o "$WORK/nodir/x" "$WORK/doc0.txt" > "$WORK/out" 2>&1
rc=$?
said=$(grep -c "mkdir -p $WORK/nodir" "$WORK/out")
check "-o in a missing directory: exit 74 ($rc), how to make it: $(cat "$WORK/out")" \
  [ $rc = 74 -a "$said" = 1 ]
"$TOKENIZE" --bytes --field body -o "$WORK/bad" "$WORK/doc0.txt" > "$WORK/out" 2>&1
rc=$?
said=$(grep -c "needs --jsonl" "$WORK/out")
check "--field without --jsonl: exit 64 ($rc): $(head -1 "$WORK/out")" [ $rc = 64 -a "$said" = 1 ]

# --- memory: the corpus streams ------------------------------------------------
if [[ $(ldd "$TOKENIZE" 2>/dev/null) == *libasan* ]]; then # (not ldd | grep -q: lib.sh's sanitized)
  echo "skipped: memory (the sanitizers' shadow and quarantine dominate it; the release build checks it)"
  finish
  exit
fi
# 64 MiB of text (the documents again and again) in one file and as JSON lines:
# peak resident memory must stay well below the text's size (the tool held the
# whole text and all its ids before: about 64 + 60 MiB).
"$PYTHON" - "$WORK" <<'PY'
import json, os, sys
work = sys.argv[1]
doc = open(os.path.join(work, "doc0.txt"), "rb").read()
with open(os.path.join(work, "big.txt"), "wb") as f:
    for _ in range((64 << 20) // len(doc) + 1):
        f.write(doc)
line = json.dumps({"text": doc.decode()}) + "\n"
with open(os.path.join(work, "big.jsonl"), "w") as f:
    for _ in range((64 << 20) // len(line) + 1):
        f.write(line)
PY
for mode in "big.txt" "--jsonl big.jsonl"; do
  set -- $mode
  peak=$("$PYTHON" - "$TOKENIZE" "${BPE[@]}" --threads 2 -o "$WORK/big" "${@/big/$WORK/big}" <<'PY'
import resource, subprocess, sys
p = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
if p.returncode:
    sys.exit(p.stderr.decode())
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)  # MiB
PY
)
  check "64 MiB corpus ($mode): peak ${peak:-?} MiB, below 48" below 48 "$peak"
  echo "64 MiB corpus ($mode): peak resident ${peak:-?} MiB"
done

finish
