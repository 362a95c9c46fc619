#!/usr/bin/env python3
"""plan_layouts.py TRAINER RANKS PER_NODE [args...]: checks `trainer --plan --layouts`
against `trainer --plan` of each layout it lists, and its own rules.

Every row's memory must be the total that --plan prints for that layout (dp x tp x pp
at the row's micro-batches); its "fits" the fit --plan judges, at micro-batches of
the deck's size or, marked "+", at the fewest that fit (--plan at the next fewer that
divide the rank's batch does not fit), or where none fits, a pipeline's at the deck's
size under the split of the blocks it names (stage_blocks: --plan of it fits, of the
usual split at one sample a micro-batch does not); its "busy" (1 - the least wait) x (1 - the
bubble) of --plan's stage work line; its bytes sent at least what --plan's figures
give stage 0 by the ring formulas (and exactly that without a pipeline), split into
the node's and the network's by where each group's ranks lie (tp innermost, then pp,
then dp, PER_NODE consecutive ranks a node). With --tflops (in args), the estimated
step of a layout without a pipeline is recomputed here from --plan's FLOPs and bytes,
a pipeline's is at least its compute over its busy share, and the rows that fit come
in the order of their steps; without, in the order of fit, tp within a node and busy.
The deck's layout is marked once. A deck's [parallel] stage_blocks holds at its own
stage count (the others' --plan leaves it empty). Prints what it checked; exits 1 on the first
difference."""
import re
import subprocess
import sys

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
SIZE = r"([0-9.]+ [KMGT]?i?B)"


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
    r"^  ([* ]) +(\d+) +(\d+) +(\d+) +(\d+)([+ ]) +" + SIZE + r" +(\d+ %|no|\?) +(\d+) % +"
    + SIZE + " +" + SIZE + r"(?: +([0-9.]+) (ms|s) +([0-9.]+)( [kM])?)?(  tp spans nodes)?"
    r"(?:  stage_blocks ([0-9,]+))?$"
)


def crosses(span, per_node):
    return span > per_node or per_node % span != 0


def option(args, name):
    return float(args[args.index(name) + 1]) if name in args else None


def main():
    trainer, ranks, per_node, *args = sys.argv[1:]
    ranks, per_node = int(ranks), int(per_node)
    tflops = option(args, "--tflops")
    bw_node = option(args, "--node-gbps")
    bw_net = option(args, "--network-gbps") or bw_node
    common = ["--ranks", str(ranks), "--ranks-per-node", str(per_node), *args]
    # --plan of one layout takes no speeds
    plain = list(common)
    for name in ("--tflops", "--node-gbps", "--network-gbps"):
        if name in plain:
            del plain[plain.index(name):plain.index(name) + 2]
    out = run(trainer, [*common, "--layouts"])
    rows = []
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            step = None
            if m[12]:
                step = float(m[12]) * (1e-3 if m[13] == "ms" else 1)
            rows.append(
                dict(deck=m[1] == "*", dp=int(m[2]), tp=int(m[3]), pp=int(m[4]),
                     micro=int(m[5]), raised=m[6] == "+", mem=m[7], fit=m[8], busy=int(m[9]),
                     node=m[10], net=m[11], step=step, spans=bool(m[16]), split=m[17] or "",
                     line=line))
    if not rows:
        fail("no layout rows in:\n" + out)
    if len(re.findall(r"^fits: ", out, re.M)) != 1:
        fail("not one fits: line in:\n" + out)
    if (tflops is not None) != all(r["step"] is not None for r in rows):
        fail("estimated steps printed without --tflops, or missing with it")
    head = re.search(r"global batch (\d+) in micro-batches of (\d+)", out)
    batch, mbs = int(head[1]), int(head[2])
    recompute = "train.recompute=block" in args
    # a split of the blocks by hand holds at its own stage count, the others by cost
    split = next((a.split("=", 1)[1] for a in args if a.startswith("parallel.stage_blocks=")), "")
    if split and f"; stage_blocks {split} at pp {len(split.split(','))}, other stage " \
            "counts split by cost" not in out:
        fail("--layouts does not name the deck's stage_blocks")
    if sum(r["deck"] for r in rows) != 1:
        fail("the deck's layout is not marked once")
    for r in rows:
        if r["dp"] * r["tp"] * r["pp"] != ranks:
            fail(f"{r['line']}: not {ranks} ranks")
        lay = [f"parallel.dp={r['dp']}", f"parallel.tp={r['tp']}", f"parallel.pp={r['pp']}"]
        if r["split"]:  # a split that fits where no micro-batch count does
            lay.append(f"parallel.stage_blocks={r['split']}")
        elif split and len(split.split(",")) != r["pp"]:  # the deck's split is for its pp
            lay.append("parallel.stage_blocks=")
        plan = run(trainer, [*plain, *lay, f"train.micro_batches={r['micro']}"])
        total = re.search(r"^  total +" + SIZE + "$", plan, re.M)[1]
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
        if r["split"]:
            # ... where at the most micro-batches (of one sample) the usual split does not fit
            usual = [a for a in lay if not a.startswith("parallel.stage_blocks=")]
            if split and len(split.split(",")) != r["pp"]:
                usual.append("parallel.stage_blocks=")
            at = run(trainer, [*plain, *usual, f"train.micro_batches={local}"])
            if r["raised"] or not re.search(r"^warning: does not fit", at, re.M):
                fail(f"{r['line']}: a split where micro_batches = {local} fits, or raised")
            if "stage_blocks" not in out.split("\nbusy:")[0].split("\n")[-1]:
                fail("no legend for the rows' stage_blocks")
        if r["raised"]:
            fewer = max(k for k in range(local // size0, r["micro"]) if local % k == 0)
            at = run(trainer, [*plain, *lay, f"train.micro_batches={fewer}"])
            if not re.search(r"^warning: does not fit", at, re.M):
                fail(f"{r['line']}: --plan at micro_batches {fewer} fits too")
        # busy: from --plan's stage work line (percentages rounded: within 1.5 %)
        work = re.search(r"waits at least (\d+) % .* bubble is (\d+) %", plan)
        want = 100.0 if r["pp"] == 1 else 100 * (1 - int(work[1]) / 100) * (1 - int(work[2]) / 100)
        if abs(want - r["busy"]) > 1.5:
            fail(f"{r['line']}: busy {r['busy']} %, --plan's stage work gives {want:.1f} %")
        # bytes sent by stage 0: dp's, tp's and, in a pipeline, the activations forward
        # and the tied embedding's all-reduce of 2 ranks (--plan prints stage 0's), each
        # as printed, with its rounding (tol), on the network where its group crosses
        # nodes (dp: all ranks; tp: tp consecutive ranks; pp and embedding: tp x pp)
        found = {g: re.search(p, plan) for g, p in (
            ("dp", r"dp group .*each rank sending about " + SIZE),
            ("tp", r"tp group .*each rank sending about " + SIZE),
            ("pp", r"per micro-batch " + SIZE + " of activations"),
            ("emb", r"tied wte's gradient, " + SIZE + " per step"))}
        times = {"dp": 1, "tp": 1, "pp": r["micro"], "emb": 1}
        span = {"dp": ranks, "tp": r["tp"], "pp": r["tp"] * r["pp"], "emb": r["tp"] * r["pp"]}
        got = {g: (times[g] * size(m[1]), times[g] * slack(m[1])) for g, m in found.items() if m}
        net = sum(v for g, (v, _) in got.items() if crosses(span[g], per_node))
        node = sum(v for g, (v, _) in got.items() if not crosses(span[g], per_node))
        tol = sum(t for _, t in got.values())
        if r["pp"] == 1:  # one stage: exactly stage 0's
            for what, mine, theirs in (("in node", r["node"], node), ("across", r["net"], net)):
                if abs(size(mine) - theirs) > tol + slack(mine):
                    fail(f"{r['line']}: sent {what} {mine}, --plan's figures give {theirs:.4g} B")
        elif size(r["node"]) + size(r["net"]) < node + net - tol - slack(r["node"]) - slack(r["net"]):
            fail(f"{r['line']}: sends less than stage 0 alone ({node + net:.4g} B)")
        if r["spans"] != crosses(r["tp"], per_node):
            fail(f"{r['line']}: 'tp spans nodes' where tp {r['tp']} and {per_node} per node")
        if tflops is None:
            continue
        # the estimate: compute (model FLOPs / rank / speed, 4/3 with recomputation),
        # tp's all-reduces inside the step, what the last micro-batch's backward (2/3 of
        # its compute) leaves of the dp reduction
        flops = float(re.search(r"GFLOP per rank, ([0-9.e+]+) GFLOP in all", plan)[1]) * 1e9
        compute = flops / ranks / (tflops * 1e12) * (4 / 3 if recompute else 1)
        bw = {g: 1e9 * (bw_net if crosses(span[g], per_node) else bw_node) for g in span}
        if r["pp"] == 1:
            tp_t = got["tp"][0] / bw["tp"] if "tp" in got else 0
            dp_t = got["dp"][0] / bw["dp"] if "dp" in got else 0
            want = compute + tp_t + max(0, dp_t - 2 / 3 * compute / r["micro"])
            if abs(r["step"] - want) > 0.02 * want:
                fail(f"{r['line']}: estimated step {r['step']:.4g} s, here {want:.4g} s")
        elif r["step"] < 0.98 * compute / (r["busy"] / 100):
            fail(f"{r['line']}: estimated step {r['step']:.4g} s is less than its compute "
                 f"{compute:.4g} s over its busy share")
    # the order: fit first; then the estimated step (printed to 2-3 digits), or else tp
    # within a node and then the busiest (printed rounded: within a point)
    for a, b in zip(rows, rows[1:]):
        fa, fb = not a["fit"].endswith("%") and a["fit"] != "?", not b["fit"].endswith("%") and b["fit"] != "?"
        if fa != fb:
            if fa > fb:
                fail(f"out of order: {b['line']} after {a['line']}")
            continue
        if tflops is not None:
            if a["step"] > b["step"] * 1.01:
                fail(f"out of order: {b['line']} after {a['line']}")
        elif a["spans"] != b["spans"]:
            if a["spans"]:
                fail(f"out of order: {b['line']} after {a['line']}")
        elif a["busy"] < b["busy"] - 1:
            fail(f"out of order: {b['line']} after {a['line']}")
    print(f"{len(rows)} layouts of {ranks} ranks agree with --plan of each")


main()
