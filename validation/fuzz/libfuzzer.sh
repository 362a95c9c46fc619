#!/usr/bin/env bash
# libfuzzer.sh: the fuzz targets (fuzz.h) built with clang's libFuzzer, AddressSanitizer
# and UBSan, each run for SECONDS (default 60) from its seeds: a coverage-guided search,
# not a test. What it finds lands in $FUZZ_BUILD_DIR/artifacts (crash-*, leak-*,
# timeout-*); rerun one with `$FUZZ_BUILD_DIR/fuzz_TARGET FILE`, fix it, and keep the
# input as a seed (seeds/TARGET/found-WHAT) so the standalone driver of CTest replays it
# on every build. The growing corpus stays in $FUZZ_BUILD_DIR/corpus between runs.
#
#     validation/fuzz/libfuzzer.sh [SECONDS] [TARGET...]     # targets: deck json bpe ...
#
# Needs clang and its runtime (Debian: clang, libclang-rt-14-dev); builds only the
# readers' sources (no MPI, no BLAS), so the trainer's own build is not involved.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${FUZZ_BUILD_DIR:-$root/build-fuzz}
seconds=${1:-60}
shift || true
if [ $# -gt 0 ]; then
  targets=("$@")
else
  targets=()
  for f in "$here"/fuzz_*.c; do
    t=$(basename "$f" .c)
    targets+=("${t#fuzz_}")
  done
fi
cc=${CC_FUZZ:-clang}
command -v "$cc" >/dev/null || { echo "libfuzzer.sh: $cc not found (apt-get install clang libclang-rt-14-dev)" >&2; exit 69; }

# the readers and what they call: pure C, zlib the only library
lib_sources=(src/core/alloc.c src/core/deck.c src/core/deck_keys.c src/core/error.c src/core/slurm.c
             src/core/rng.c src/data/idx.c src/text/bpe.c src/text/bpe_load.c
             src/text/json_object.c src/text/json_string.c src/text/jsonl.c
             src/text/pretokenize.c src/text/token_file.c
             src/text/unicode.c src/text/unicode_tables.c)
# shellcheck disable=SC2054 # (the commas are -fsanitize= lists, not array separators)
flags=(-std=c17 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer -Wall -Wno-unknown-pragmas
       -fsanitize=address,undefined -fno-sanitize-recover=undefined
       -I"$root/src" -I"$here" -DTRAINER_SOURCE_DIR="\"$root\"")
mkdir -p "$out/obj" "$out/corpus" "$out/artifacts"
objs=()
for s in "${lib_sources[@]}" validation/fuzz/support.c; do
  o="$out/obj/$(echo "$s" | tr / _).o"
  if [ ! -f "$o" ] || [ "$root/$s" -nt "$o" ]; then
    "$cc" "${flags[@]}" -fsanitize=fuzzer-no-link -c "$root/$s" -o "$o"
  fi
  objs+=("$o")
done

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
status=0
for t in "${targets[@]}"; do
  "$cc" "${flags[@]}" -fsanitize=fuzzer "$here/fuzz_$t.c" "${objs[@]}" -lz -o "$out/fuzz_$t"
  mkdir -p "$out/corpus/$t"
  echo "== fuzz_$t: ${seconds} s"
  if ! "$out/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$out/artifacts/$t-" \
      "$out/corpus/$t" "$here/seeds/$t" >"$out/fuzz_$t.log" 2>&1; then
    status=1
    echo "fuzz_$t: FOUND something: $out/fuzz_$t.log, $out/artifacts/$t-*"
    grep -m3 -E "ERROR|check failed|SUMMARY" "$out/fuzz_$t.log" || true
  fi
  grep -E "^stat::number_of_executed_units|^#[0-9]+.*DONE" "$out/fuzz_$t.log" | tail -2 || true
done
exit $status
