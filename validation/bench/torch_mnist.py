"""torch_mnist.py: the PyTorch side of validation/bench/mnist.sh.

Trains the trainer's workload in PyTorch and prints ONE line of JSON on stdout
(everything else goes to stderr): samples/s over the training loop only, plus the
configuration it ran with (torch, OpenBLAS core and threads, oneDNN use).

    /usr/bin/python3 validation/bench/torch_mnist.py --model mlp --threads 2
    /usr/bin/python3 validation/bench/torch_mnist.py --model mlp --threads 1 --world 2
    /usr/bin/python3 validation/bench/torch_mnist.py --sgemm 2048 --threads 2

Workload (same as the trainer's decks): Fashion-MNIST's 60,000 training images,
parsed here from the gzipped IDX files with gzip + numpy, scaled to [0, 1] and held
in memory; model mlp (784-256-256-10, ReLU) or cnn (LeNet-5 style, as the trainer's
model.name=cnn); cross-entropy; SGD momentum 0.9, lr 0.05; global batch 128, fp32;
one epoch = 468 steps (the last partial batch is dropped, as the trainer does).

Timing: a few untimed warm-up steps (allocator, oneDNN primitive caches), then
--reps timed epochs, each a fresh shuffle; the reported figure is the median epoch.
A timed epoch covers the loop only: batch gather, forward, loss, backward
(including DDP's gradient all-reduce), optimizer step; not start-up, data loading or
evaluation. --world 2 runs DistributedDataParallel over gloo on loopback with two
processes, each taking its 64-sample half of every global batch of 128.

Environment knobs that must be set before torch loads (mnist.sh tries several):
OPENBLAS_CORETYPE, OPENBLAS_NUM_THREADS, OMP_WAIT_POLICY. They are reported, not set,
here. --channels-last and --no-mkldnn choose the CNN's convolution path.
"""
import argparse
import ctypes
import gzip
import json
import os
import socket
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def read_idx(path):
    """An IDX file (gzipped or not) as a numpy array of its declared shape (ubyte only)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    if raw[0] != 0 or raw[1] != 0 or raw[2] != 0x08:
        raise ValueError(f"{path}: not an unsigned-byte IDX file")
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    off = 4 + 4 * ndim
    n = int(np.prod(dims))
    if len(raw) - off != n:
        raise ValueError(f"{path}: {len(raw) - off} data bytes, header says {n}")
    return np.frombuffer(raw, dtype=np.uint8, offset=off).reshape(dims)


def load_train(model):
    x = read_idx(f"{DATA}/train-images-idx3-ubyte.gz").astype(np.float32) / np.float32(255)
    y = read_idx(f"{DATA}/train-labels-idx1-ubyte.gz").astype(np.int64)
    x = torch.from_numpy(x.copy())
    x = x.reshape(-1, 784) if model == "mlp" else x.reshape(-1, 1, 28, 28)
    return x.contiguous(), torch.from_numpy(y.copy())


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 256), nn.Linear(256, 256), nn.Linear(256, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class CNN(nn.Module):
    """conv 1->6 5x5 pad 2, ReLU, maxpool 2; conv 6->16 5x5, ReLU, maxpool 2;
    fc 400->120, ReLU; fc 120->84, ReLU; fc 84->10 (the trainer's model.name=cnn)."""

    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(1, 6, 5, padding=2), nn.Conv2d(6, 16, 5)
        self.f1, self.f2, self.f3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c2(x)), 2)
        x = torch.flatten(x, 1)
        return self.f3(F.relu(self.f2(F.relu(self.f1(x)))))


def forward_flops(model):
    """Multiply-adds x 2 of one sample's forward pass (as the trainer counts: GEMM/conv only)."""
    if model == "mlp":
        return 2.0 * (784 * 256 + 256 * 256 + 256 * 10)
    conv1 = 6 * 28 * 28 * 1 * 25
    conv2 = 16 * 10 * 10 * 6 * 25
    return 2.0 * (conv1 + conv2 + 400 * 120 + 120 * 84 + 84 * 10)


def openblas_info():
    """Core name, config and thread count of the OpenBLAS that this process loaded."""
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            p = line.split()[-1]
            if "openblas" in p and ".so" in p:
                libs.add(p)
    for p in sorted(libs):
        try:
            lib = ctypes.CDLL(p)
            lib.openblas_get_corename.restype = ctypes.c_char_p
            lib.openblas_get_config.restype = ctypes.c_char_p
            return {
                "lib": p,
                "core": lib.openblas_get_corename().decode(),
                "config": lib.openblas_get_config().decode(),
                "threads": lib.openblas_get_num_threads(),
            }
        except (OSError, AttributeError):
            continue
    return {"lib": None, "core": "not loaded", "config": "", "threads": 0}


def config(args):
    # a tiny matmul makes sure the BLAS is loaded before we look for it
    torch.mm(torch.ones(4, 4), torch.ones(4, 4))
    return {
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "openblas": openblas_info(),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE", ""),
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS", ""),
        "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", ""),
        "mkldnn": bool(torch.backends.mkldnn.enabled and torch.backends.mkldnn.is_available()),
        "channels_last": bool(args.channels_last),
    }


def train(rank, world, args, port, out):
    torch.set_num_threads(args.threads)
    if not args.mkldnn:
        torch.backends.mkldnn.enabled = False
    if world > 1:
        import torch.distributed as dist
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # loopback, whatever the hostname says
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}",
                                rank=rank, world_size=world)
    torch.manual_seed(1234)
    x, y = load_train(args.model)
    net = MLP() if args.model == "mlp" else CNN()
    if args.channels_last and args.model == "cnn":
        net = net.to(memory_format=torch.channels_last)
    model = net
    if world > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP
        model = DDP(net)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    B = args.batch
    if B % world:
        raise SystemExit("global batch must divide by world size")
    local = B // world
    steps = x.shape[0] // B  # 468: the last partial batch is dropped
    if args.steps:
        steps = min(steps, args.steps)
    gen = torch.Generator().manual_seed(1234)  # same order on every rank

    def step(idx):
        xb = x.index_select(0, idx)
        if args.channels_last and args.model == "cnn":
            xb = xb.contiguous(memory_format=torch.channels_last)
        yb = y.index_select(0, idx)
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss

    def epoch(nsteps):
        perm = torch.randperm(x.shape[0], generator=gen)
        for s in range(nsteps):
            g = perm[s * B:(s + 1) * B]
            loss = step(g[rank * local:(rank + 1) * local])
        return float(loss)

    epoch(args.warmup)
    times, losses = [], []
    for _ in range(args.reps):
        if world > 1:
            dist.barrier()
        t0 = time.perf_counter()
        losses.append(epoch(steps))
        if world > 1:
            dist.barrier()
        times.append(time.perf_counter() - t0)
        if rank == 0:
            log(f"torch {args.model} world {world}: epoch {times[-1]:.3f} s, "
                f"{steps * B / times[-1]:.0f} samples/s, last loss {losses[-1]:.4f}")
    if rank == 0:
        med = statistics.median(times)
        res = {
            "model": args.model, "world": world, "steps": steps, "global_batch": B,
            "epoch_seconds": times, "median_seconds": med,
            "samples_per_second": steps * B / med,
            "gflops_per_second": 3.0 * forward_flops(args.model) * steps * B / med / 1e9,
            "last_loss": losses[-1],
            "config": config(args),
        }
        if out is not None:
            out.put(res)
        else:
            print(json.dumps(res), flush=True)
    if world > 1:
        dist.destroy_process_group()


def worker(rank, world, args, port, q):
    train(rank, world, args, port, q)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sgemm(args):
    """fp32 GEMM ceiling: best of several n x n x n torch.mm (OpenBLAS) calls."""
    torch.set_num_threads(args.threads)
    n = args.sgemm
    a, b = torch.randn(n, n), torch.randn(n, n)
    c = torch.empty(n, n)
    torch.mm(a, b, out=c)
    best = float("inf")
    for _ in range(args.reps):
        t0 = time.perf_counter()
        torch.mm(a, b, out=c)
        best = min(best, time.perf_counter() - t0)
    print(json.dumps({"n": n, "best_seconds": best, "gflops_per_second": 2.0 * n ** 3 / best / 1e9,
                      "config": config(args)}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--threads", type=int, default=2, help="torch intra-op threads per process")
    ap.add_argument("--world", type=int, default=1, help="processes (DDP over gloo when > 1)")
    ap.add_argument("--batch", type=int, default=128, help="global batch")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--reps", type=int, default=3, help="timed epochs (median reported)")
    ap.add_argument("--steps", type=int, default=0, help="timed steps per epoch (0 = all 468)")
    ap.add_argument("--warmup", type=int, default=20, help="untimed warm-up steps")
    ap.add_argument("--no-mkldnn", dest="mkldnn", action="store_false",
                    help="disable oneDNN (convolutions fall back to im2col + BLAS)")
    ap.add_argument("--channels-last", action="store_true", help="cnn: NHWC activations")
    ap.add_argument("--sgemm", type=int, default=0, metavar="N",
                    help="instead of training, time an N x N fp32 matmul (best of --reps)")
    args = ap.parse_args()
    torch.set_num_interop_threads(1)
    if args.sgemm:
        return sgemm(args)
    if args.world == 1:
        return train(0, 1, args, None, None)
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, args.world, args, port, q if r == 0 else None))
             for r in range(args.world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    if any(p.exitcode for p in procs):
        raise SystemExit(f"a DDP process failed: exit codes {[p.exitcode for p in procs]}")
    print(json.dumps(q.get()), flush=True)


if __name__ == "__main__":
    main()
