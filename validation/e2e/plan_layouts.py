#!/usr/bin/env python3
"""plan_layouts.py TRAINER RANKS PER_NODE [args...]: checks `trainer --plan --layouts`
against `trainer --plan` of each layout it lists, and its own rules.

Every row's memory must be the total that --plan prints for that layout (dp x tp x pp
at the row's micro-batches), its "fits" the fit --plan judges, at micro-batches of the deck's size or, marked
"+", at the fewest that fit (--plan at the next fewer that divide the rank's batch
does not fit),
its "busy" (1 - the least wait) x (1 - the bubble) of --plan's stage work line, its
"sent" the most bytes a rank sends by the ring formulas from --plan's own numbers
(stage 0's); rows in order (fit, tp within a node, busiest, fewest model-parallel
ranks, fewest bytes); the deck's layout marked. Prints what it checked; exits 1 on
the first difference."""
import re
import subprocess
import sys

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def size(text):
    v, u = text.split()
    return float(v) * UNITS[u]


def slack(text):
    """half the last printed digit of a size: how far the printed value may be off"""
    v, u = text.split()
    digits = len(v.split(".")[1]) if "." in v else 0
    return 0.5 * 10**-digits * UNITS[u]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def run(trainer, args):
    p = subprocess.run([trainer, "--plan", *args], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"trainer --plan {' '.join(args)}: exit {p.returncode}: {p.stderr}")
    return p.stdout


ROW = re.compile(
    r"^  ([* ]) +(\d+) +(\d+) +(\d+) +(\d+)([+ ]) +([0-9.]+ [KMGT]?i?B) +(\d+ %|no|\?)"
    r" +(\d+) % +([0-9.]+ [KMGT]?i?B)(  tp spans nodes)?$"
)


def main():
    trainer, ranks, per_node, *args = sys.argv[1:]
    ranks, per_node = int(ranks), int(per_node)
    common = ["--ranks", str(ranks), "--ranks-per-node", str(per_node), *args]
    out = run(trainer, [*common, "--layouts"])
    rows = []
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            rows.append(
                dict(deck=m[1] == "*", dp=int(m[2]), tp=int(m[3]), pp=int(m[4]),
                     micro=int(m[5]), raised=m[6] == "+", mem=m[7], fit=m[8], busy=int(m[9]),
                     sent=size(m[10]), sent_text=m[10], spans=bool(m[11]), line=line))
    if not rows:
        fail("no layout rows in:\n" + out)
    head = re.search(r"global batch (\d+) in micro-batches of (\d+)", out)
    batch, mbs = int(head[1]), int(head[2])
    if sum(r["deck"] for r in rows) != 1:
        fail("the deck's layout is not marked once")
    for r in rows:
        if r["dp"] * r["tp"] * r["pp"] != ranks:
            fail(f"{r['line']}: not {ranks} ranks")
        lay = [f"parallel.dp={r['dp']}", f"parallel.tp={r['tp']}", f"parallel.pp={r['pp']}"]
        plan = run(trainer, [*common, *lay, f"train.micro_batches={r['micro']}"])
        total = re.search(r"^  total +([0-9.]+ [KMGT]?i?B)$", plan, re.M)[1]
        if total != r["mem"]:
            fail(f"{r['line']}: memory {r['mem']}, --plan's total {total}")
        fits = re.search(r"^(fits: |warning: does not fit)", plan, re.M)
        if r["fit"].endswith("%") != bool(fits and fits[1] == "fits: "):
            fail(f"{r['line']}: --plan says {fits[0] if fits else 'nothing'}")
        # micro-batches of the deck's size (the largest dividing the rank's batch), or
        # where those do not fit, the fewest that do (marked +): one fewer does not
        local = batch // r["dp"]
        size0 = max(k for k in range(1, min(mbs, local) + 1) if local % k == 0)
        if r["raised"] != (r["micro"] > local // size0) or local % r["micro"]:
            fail(f"{r['line']}: the deck's micro-batches of {size0} make {local // size0}")
        if r["raised"]:
            fewer = max(k for k in range(local // size0, r["micro"]) if local % k == 0)
            at = run(trainer, [*common, *lay, f"train.micro_batches={fewer}"])
            if not re.search(r"^warning: does not fit", at, re.M):
                fail(f"{r['line']}: --plan at micro_batches {fewer} fits too")
        # busy: from --plan's stage work line (percentages rounded: within 1.5 %)
        work = re.search(r"waits at least (\d+) % .* bubble is (\d+) %", plan)
        want = 100.0 if r["pp"] == 1 else 100 * (1 - int(work[1]) / 100) * (1 - int(work[2]) / 100)
        if abs(want - r["busy"]) > 1.5:
            fail(f"{r['line']}: busy {r['busy']} %, --plan's stage work gives {want:.1f} %")
        # sent by stage 0: dp's, tp's and, in a pipeline, the activations forward and
        # the tied embedding's all-reduce of 2 ranks (--plan prints stage 0's figures)
        # (each figure as printed, with its rounding: tol)
        parts = [(1, re.search(p, plan)) for p in (
            r"dp group .*each rank sending about ([0-9.]+ [KMGT]?i?B)",
            r"tp group .*each rank sending about ([0-9.]+ [KMGT]?i?B)")]
        if r["pp"] > 1:
            parts += [(r["micro"], re.search(r"per micro-batch ([0-9.]+ [KMGT]?i?B) of activations",
                                             plan)),
                      (1, re.search(r"tied wte's gradient, ([0-9.]+ [KMGT]?i?B) per step", plan))]
        stage0 = sum(k * size(m[1]) for k, m in parts if m)
        tol = sum(k * slack(m[1]) for k, m in parts if m) + slack(r["sent_text"])
        # the row is the most of any stage: at least stage 0's
        if r["sent"] < stage0 - tol:
            fail(f"{r['line']}: sent {r['sent']:.4g} B, stage 0 alone sends {stage0:.4g} B")
        if r["pp"] == 1 and abs(r["sent"] - stage0) > tol:
            fail(f"{r['line']}: sent {r['sent']:.4g} B, --plan's {stage0:.4g} B")
        if r["spans"] != (r["tp"] > per_node):
            fail(f"{r['line']}: 'tp spans nodes' where tp {r['tp']} and {per_node} per node")
    key = [((not r["fit"].endswith("%")) and r["fit"] != "?", r["spans"], -r["busy"]) for r in rows]
    for a, b, ra in zip(key, key[1:], rows):
        # busy is printed rounded: order within a point of it
        if (a[0], a[1]) > (b[0], b[1]) or ((a[0], a[1]) == (b[0], b[1]) and a[2] > b[2] + 1):
            fail(f"out of order after {ra['line']}")
    print(f"{len(rows)} layouts of {ranks} ranks agree with --plan of each")


main()
