"""random_layouts.py: cases for gpt_random_layouts.sh, drawn from a seed.

usage: random_layouts.py SEED COUNT BYTES_PREFIX
Prints COUNT lines, one case each: ranks, the loss tolerance, a name, then the deck
overrides of the one-rank reference and, after a lone '--', the layout's own. Each
case draws a small GPT of odd shapes (1-5 blocks, 1-6 heads of 3-16 values, so that a
tensor-parallel rank's width may be odd, windows of 7, 16 or 33 tokens, a vocabulary of
256, 257 or 300 padded to 1, 7 or 64, so that its shards may differ in real rows), a
layout of 2, 3, 4 or 8 ranks (dp x tp x pp that the heads and blocks allow),
micro-batches, the pipeline's split of the blocks (by cost or by hand), sequence
parallelism (whose rows split unevenly where B x T is not a multiple of tp), ZeRO
stage, schedule, recomputation, reduction path and bucket size,
precision, optimizer, clipping and dropout. The fixed layouts of gpt_layouts.sh cover
each feature; these cover the features' mixes and the shapes nobody writes by hand.
"""
import random
import sys


def divisors(x):
    return [d for d in range(1, x + 1) if x % d == 0]


def case(rng, split_rng, sp_rng, tokens):
    layers = rng.choice([1, 2, 3, 5])
    heads = rng.choice([1, 2, 3, 4, 6])
    width = max(8, heads * rng.choice([3, 4, 5, 8, 16]))
    ranks = rng.choice([2, 3, 4, 4, 8])
    tp = rng.choice([d for d in divisors(ranks) if heads % d == 0])
    pp = rng.choice([d for d in divisors(ranks // tp) if d <= layers + 1])
    dp = ranks // (tp * pp)
    micro = rng.choice([1, 2, 3, 4])
    batch = dp * micro * rng.choice([1, 2])
    precision = rng.choice(["fp32", "fp32", "bf16-mixed", "fp16-mixed"])
    # fp32: only the summation order differs (measured at most 1.4e-8 over 6 steps);
    # 16-bit storage rounds those differences to its own steps (at most 3.6e-5)
    tol = {"fp32": 2e-6, "bf16-mixed": 1e-3, "fp16-mixed": 1e-3}[precision]
    common = [
        f"model.n_layer={layers}", f"model.n_head={heads}", f"model.n_embd={width}",
        f"model.seq_len={rng.choice([7, 16, 33])}",
        f"model.vocab_size={rng.choice([256, 257, 300])}",
        f"model.vocab_pad={rng.choice([1, 7, 64])}", "data.format=tokens",
        "data.tokenizer=bytes", f"data.train_tokens={tokens}.train.tok",
        f"data.val_tokens={tokens}.val.tok", "data.val_limit=8", "data.shuffle=false",
        f"train.batch_size={batch}", "train.eval_every=0", "train.log_every=1",
        f"train.precision={precision}", f"optim.name={rng.choice(['adamw', 'sgd'])}",
        "optim.lr=1e-3", "optim.weight_decay=0.1",
        f"optim.clip_grad_norm={rng.choice([0, 1.0])}", "run.progress=off",
        "run.tensorboard=false", "sample.length=0", "checkpoint.at_end=false",
    ]
    if rng.random() < 0.4:
        p = rng.choice([0.1, 0.2])
        common += [f"model.embd_pdrop={p}", f"model.attn_pdrop={p}", f"model.resid_pdrop={p}"]
    layout = [
        f"parallel.tp={tp}", f"parallel.pp={pp}", f"train.micro_batches={micro}",
        f"parallel.zero={rng.choice([0, 1, 2])}",
        f"train.recompute={rng.choice(['none', 'block'])}",
        f"parallel.schedule={rng.choice(['1f1b', 'gpipe'])}",
        f"parallel.shm_allreduce={rng.choice(['true', 'false'])}",
        f"parallel.bucket_kib={rng.choice([4, 256])}",
    ]
    name = f"dp{dp}_tp{tp}_pp{pp}_m{micro}_{precision}"
    # a split by hand: a block each but the last's (drawn from a stream of its own, so
    # a seed's other draws stay those its cases were chosen by)
    if pp > 1 and split_rng.random() < 0.5:
        counts = [1] * (pp - 1) + [0]
        for _ in range(layers - (pp - 1)):
            counts[split_rng.randrange(pp)] += 1
        layout.append("parallel.stage_blocks=" + ",".join(map(str, counts)))
        name += "_split" + "".join(map(str, counts))
    # sequence parallelism at tp > 1, half the time (a stream of its own, as above)
    if tp > 1 and sp_rng.random() < 0.5:
        layout.append("parallel.sequence_parallel=true")
        name += "_sp"
    return ranks, tol, name, common, layout


def main():
    seed, count, tokens = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    rng, split_rng = random.Random(seed), random.Random(seed + 1000003)
    sp_rng = random.Random(seed + 2000003)
    for i in range(count):
        ranks, tol, name, common, layout = case(rng, split_rng, sp_rng, tokens)
        print(ranks, tol, f"c{i}_{name}", *common, "--", *layout)


if __name__ == "__main__":
    main()
