"""docs_links.py: the user's documents point at things that exist.

usage: docs_links.py REPO
Reads README.md, docs/*.md and validation/*/README.md. Every relative markdown link
must name a file of the repository and, after '#', a heading of that file (anchors
as GitHub makes them: lower case, punctuation but '-' and '_' dropped, spaces to
'-'); every path in backquotes that starts with a top-level folder of the
repository (src/, docs/, validation/, ...) must exist, or for a pattern (*, {, <, [)
or a template (a PLACEHOLDER in capitals) the part before it must match something. Prints one line a problem and exits 1 if there is any: text moved
between these files leaves "see X" pointers behind that no reader can follow.
"""
import glob
import os
import re
import sys

TOP = ("src", "docs", "validation", "tools", "jobs", "scripts", "inputs", ".ci")


def slug(heading):
    h = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return h.replace(" ", "-")


def headings(path):
    out, fenced = [], False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.append(slug(line.lstrip("#")))
    return out


def main(repo):
    files = ["README.md"] + sorted(glob.glob("docs/*.md", root_dir=repo)) + sorted(
        glob.glob("validation/*/README.md", root_dir=repo))
    anchors = {f: headings(os.path.join(repo, f)) for f in files}
    bad = checked = 0
    for f in files:
        text = open(os.path.join(repo, f), encoding="utf-8").read()
        for m in re.finditer(r"\]\(([^)\s]+)\)", text):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):  # http:, mailto:
                continue
            checked += 1
            path, _, anchor = target.partition("#")
            where = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
            if not os.path.exists(os.path.join(repo, where)):
                print(f"{f}: link ({target}): no file {where}")
                bad += 1
            elif anchor and where in anchors and anchor not in anchors[where]:
                print(f"{f}: link ({target}): {where} has no heading '#{anchor}'")
                bad += 1
        for m in re.finditer(r"`((?:%s)/[^` ]*)`" % "|".join(map(re.escape, TOP)), text):
            path = m.group(1).rstrip("/")
            checked += 1
            if os.path.exists(os.path.join(repo, path)):
                continue
            if any(c in path for c in "*{<[") or re.search(r"[A-Z]{3,}", path):
                # a pattern, or a template with a placeholder in capitals (seeds/TARGET/)
                stem = re.split(r"[*{<\[]|[\w.-]*[A-Z]{3,}", path)[0]
                if glob.glob(os.path.join(repo, stem) + "*"):
                    continue
            print(f"{f}: `{path}`: no such file or folder")
            bad += 1
    print(f"{len(files)} documents, {checked} links and paths, {bad} broken")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
