"""plan_lines.py: a --plan report's memory lines in bytes, for plan.sh's checks."""
import re

UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}


def bytes_of(path, line=None):
    """The named line of the (largest stage's) rank's memory (`line`), else the sum of
    its lines: the total to 0.1 MiB a line where the total line prints 0.1 GiB."""
    text = open(path).read()
    sect = text.split("memory per rank", 1)[1]
    if "the largest:" in sect:  # a pipeline: the largest stage's lines follow
        sect = sect.split("the largest:", 1)[1]
    found = {}
    for row in sect.splitlines()[1:]:
        m = re.match(r"^  ([a-z][a-z ]*?[a-z]) +([0-9.]+) (B|KiB|MiB|GiB)", row)
        if not m or m.group(1) in ("total", "host memory"):
            break
        found[m.group(1)] = float(m.group(2)) * UNITS[m.group(3)]
    if line is not None:
        return found[line]
    return sum(found.values())
