#!/usr/bin/env bash
# docs_links.sh: README.md, docs/*.md and validation/*/README.md point at files,
# headings and paths that exist (validation/docs_links.py); and the checker itself
# finds a broken link, anchor and path in a copy made to have them.
source "$(dirname "$0")/../lib.sh"
check "every link, anchor and path of the documents resolves: $("$PYTHON" validation/docs_links.py "$SRC" 2>&1 | tail -5)" \
  "$PYTHON" validation/docs_links.py "$SRC"
# a copy with one of each kind broken: the checker must name all three
mkdir -p "$WORK/repo/docs" "$WORK/repo/src"
printf '# T\n\n## Real heading\n\nsee [a](docs/gone.md), [b](#no-heading), [c](#real-heading), `src/gone.c`, `src/`\n' \
  >"$WORK/repo/README.md"
"$PYTHON" validation/docs_links.py "$WORK/repo" >"$WORK/out" 2>&1
check "a broken link, anchor and path are named: $(cat "$WORK/out")" [ \
  "$(grep -c 'docs/gone.md\|no heading .#no-heading\|src/gone.c' "$WORK/out") $(grep -c 'real-heading' "$WORK/out")" = "3 0" ]
finish
