"""compare_metrics.py: compare the train-loss curves of metrics.csv files.

usage: compare_metrics.py REFERENCE OTHER... [--rtol R] [--exact] [--min-steps N] [--first N]
                          [--common] [--norm-rtol R] [--eval]
Compares the 'loss' column of the rows with phase == 'train', step by step
(--first N: only the first N of them; --common: only the steps the reference and
the other both have, at least --min-steps of them, e.g. a run resumed midway).
--exact demands the same text (bit-identical floats, %.9g); otherwise the largest
relative difference must stay below --rtol. Prints the worst step per file.
Without --exact, two more series can be held to the reference at the same steps:
--norm-rtol R the train rows' 'grad_norm' (within R), --eval the 'eval' rows' 'loss'
(within --rtol); the training loss alone misses a norm that only the log reads
(clipping off) or that moves the update by less than the loss tolerance.
"""
import argparse
import csv
import sys


def series(path, phase="train", column="loss"):
    with open(path) as f:
        rows = [r for r in csv.DictReader(f) if r["phase"] == phase]
    return [(int(r["step"]), r[column]) for r in rows]


def train_losses(path):
    return series(path)


def worst_relative(ref, other):
    """The largest relative difference of two series of the same steps, and its step."""
    worst, at = 0.0, 0
    for (s, x), (_, y) in zip(ref, other):
        x, y = float(x), float(y)
        rel = abs(x - y) / max(abs(x), 1e-12)
        if rel > worst:
            worst, at = rel, s
    return worst, at


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reference")
    ap.add_argument("others", nargs="+")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--min-steps", type=int, default=1)
    ap.add_argument("--first", type=int, default=0, help="compare only the first N train rows")
    ap.add_argument("--common", action="store_true", help="compare only the steps both have")
    ap.add_argument("--norm-rtol", type=float, default=0,
                    help="also compare the train rows' grad_norm within this relative tolerance")
    ap.add_argument("--eval", action="store_true", help="also compare the eval rows' loss")
    a = ap.parse_args()
    cut = a.first if a.first > 0 else None
    ref = train_losses(a.reference)[:cut]
    bad = 0
    if len(ref) < a.min_steps:
        print(f"{a.reference}: only {len(ref)} train rows, need {a.min_steps}")
        return 1
    for path in a.others:
        other = train_losses(path)[:cut]
        ref = train_losses(a.reference)[:cut]
        if a.common:
            steps = {s for s, _ in other} & {s for s, _ in ref}
            ref = [r for r in ref if r[0] in steps]
            other = [r for r in other if r[0] in steps]
            if len(ref) < a.min_steps:
                print(f"{path}: only {len(ref)} steps in common with {a.reference}, "
                      f"need {a.min_steps}")
                bad += 1
                continue
        if [s for s, _ in other] != [s for s, _ in ref]:
            print(f"{path}: steps differ from {a.reference}")
            bad += 1
            continue
        if a.exact:
            diff = [i for i, (x, y) in enumerate(zip(ref, other)) if x[1] != y[1]]
            print(f"{path}: {len(ref)} steps, {len(diff)} differ from the reference"
                  + (f" (first at step {ref[diff[0]][0]})" if diff else ""))
            bad += bool(diff)
            continue
        worst, at = worst_relative(ref, other)
        verdict = "ok" if worst <= a.rtol else "TOO FAR"
        print(f"{path}: {len(ref)} steps, max relative loss difference {worst:.3g} at step {at} "
              f"(tolerance {a.rtol:g}) {verdict}")
        bad += worst > a.rtol
        # the same steps as the training loss (after --first, --common): grad_norm at
        # those steps, the evaluations up to the last of them
        steps = {s for s, _ in ref}
        last = max(steps, default=0)
        extra = [("train", "grad_norm", a.norm_rtol)] if a.norm_rtol > 0 else []
        extra += [("eval", "loss", a.rtol)] if a.eval else []
        for phase, column, tol in extra:
            r2, o2 = ([(s, v) for s, v in series(f, phase, column)
                       if (s in steps if phase == "train" else s <= last)]
                      for f in (a.reference, path))
            if not r2 or [s for s, _ in r2] != [s for s, _ in o2]:
                print(f"{path}: {phase} rows at other steps than {a.reference}'s, or none "
                      f"({column})")
                bad += 1
                continue
            worst, at = worst_relative(r2, o2)
            verdict = "ok" if worst <= tol else "TOO FAR"
            print(f"{path}: {len(r2)} {phase} rows, max relative {column} difference {worst:.3g} "
                  f"at step {at} (tolerance {tol:g}) {verdict}")
            bad += worst > tol
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
