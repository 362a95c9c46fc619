// encode_js.js: the reference side of compare_with_js.sh. Encodes each file named on
// the command line with the gpt-3-encoder npm package (GPT-2's encoder ported to
// JavaScript) and prints its ids as one JSON array a line, in order.
//   node encode_js.js PACKAGE_DIR FILE...
'use strict';
const fs = require('fs');
const path = require('path');

const [pkg, ...files] = process.argv.slice(2);
const { encode } = require(path.resolve(pkg));
for (const f of files) {
  process.stdout.write(JSON.stringify(encode(fs.readFileSync(f, 'utf8'))) + '\n');
}
