#!/usr/bin/env python3
"""kernel_breakdown.py: where one training step's GPU time goes, from Nsight
Compute's per-kernel durations (validation/bench/gpu_profile.sh makes the CSV).

    kernel_breakdown.py NCU_CSV [STEP]

NCU_CSV is `ncu --csv --print-units base --metrics gpu__time_duration.sum` output
(program output and ==PROF== lines may be mixed in). A step starts at an
embedding_forward_kernel (the model's first kernel); STEP (default 2: the first
step warms caches and plans) picks which, and the step runs to the next one or to
the end. Prints milliseconds per part of the step (matrix products, attention, the
16-bit operand copies, ...) and the costliest kernels. Standard library only."""
import csv
import re
import sys

# (part, pattern on the kernel's name); the first match wins
PARTS = [
    ("attention", r"flash_|tc_forward|tc_dkv|tc_dq|mma_forward|mma_dkv|mma_dq"),
    ("rounding passes", r"round_lowp"),
    ("LM head gradient copies", r"xent_grad_16"),
    ("16-bit operand copies", r"cast_packed4|cast_rows"),
    # a stored 16-bit input widened to fp32, or a product's fp32 output stored where
    # it could not store 16 bits itself (qkv): fallbacks a bf16 GPT step should not take
    ("stored inputs widened (fallback)", r"widen_stored"),
    ("products stored after them (fallback)", r"narrow_stored"),
    ("cross-entropy", r"xent|rows_argmax|sum_in_order"),
    ("layernorm", r"layernorm"),
    ("GELU", r"gelu"),
    ("residual", r"residual"),
    ("embedding", r"embedding"),
    ("optimizer and norms", r"adamw|sgd_kernel|sum_squares|sum_partials|scale_kernel"),
    ("bias and column sums", r"colsum|add_partials|bias_|broadcast_rows"),
    ("matrix products (cuBLAS)", r"gemm|nvjet|cutlass|xmma|sm\d\d_|ampere_|hopper_|splitK|Kernel"),
]

UNITS = {"ns": 1e-6, "nsecond": 1e-6, "us": 1e-3, "usecond": 1e-3, "ms": 1.0,
         "msecond": 1.0, "s": 1e3, "second": 1e3}


def read_kernels(path):
    """[(name, ms)] in launch order"""
    with open(path, newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    rows = list(csv.DictReader(lines))
    if not rows or "Kernel Name" not in rows[0]:
        sys.exit(f"{path}: no ncu CSV rows with a 'Kernel Name' column")
    out = []
    for r in rows:
        if r.get("Metric Name", "gpu__time_duration.sum") != "gpu__time_duration.sum":
            continue
        unit = r.get("Metric Unit", "ns").strip() or "ns"
        value = float(r["Metric Value"].replace(",", ""))
        out.append((int(r.get("ID", len(out))), r["Kernel Name"], value * UNITS.get(unit, 1e-6)))
    out.sort()
    return [(name, ms) for _, name, ms in out]


def part_of(name):
    for part, pattern in PARTS:
        if re.search(pattern, name):
            return part
    return "other"


def short(name):
    """the kernel's name without its signature, template arguments kept"""
    name = re.sub(r"^void\s+", "", name)
    depth, end = 0, len(name)
    for i, c in enumerate(name):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            end = i
            break
    return name[:end]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    step = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    kernels = read_kernels(sys.argv[1])
    starts = [i for i, (name, _) in enumerate(kernels) if "embedding_forward_kernel" in name]
    if len(starts) < step:
        sys.exit(f"{sys.argv[1]}: {len(starts)} step(s) found (embedding_forward_kernel), "
                 f"step {step} asked for")
    lo = starts[step - 1]
    hi = starts[step] if len(starts) > step else len(kernels)
    ks = kernels[lo:hi]
    total = sum(ms for _, ms in ks)
    by_part, by_kernel = {}, {}
    for name, ms in ks:
        p = part_of(name)
        n, t = by_part.get(p, (0, 0.0))
        by_part[p] = (n + 1, t + ms)
        n, t = by_kernel.get(short(name), (0, 0.0))
        by_kernel[short(name)] = (n + 1, t + ms)
    print(f"step {step}: {len(ks)} kernels, {total:.2f} ms of kernel time")
    print(f"  {'part':<28} {'ms':>8} {'share':>6} {'kernels':>8}")
    for p, (n, t) in sorted(by_part.items(), key=lambda kv: -kv[1][1]):
        print(f"  {p:<28} {t:8.2f} {100 * t / total:5.1f}% {n:8d}")
    print("  costliest kernels:")
    for k, (n, t) in sorted(by_kernel.items(), key=lambda kv: -kv[1][1])[:15]:
        print(f"  {t:8.2f} ms {n:5d}x  {k[:90]}")


if __name__ == "__main__":
    main()
