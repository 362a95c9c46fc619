#!/usr/bin/env python3
"""tamper_checkpoint.py SRC OUTDIR: writes OUTDIR/<case>.h5 for every case below,
each a copy of the trainer checkpoint SRC with one thing changed through h5py, as a
damaged file or a careless hand edit would change it. validation/mpi/
checkpoint_tampered.sh resumes from each and checks what the trainer says.

The tensors' CRCs cover their values, not the root attributes (the run's step,
epoch, layout, loss scaler) nor the kinds and shapes of the datasets: most cases
are there. The last ones change only how the values are stored (float64, gzip
chunks, an extra dataset, no /deck, a /deck of unknown keys): the trainer must
resume from them as from SRC.
"""
import os
import shutil
import sys

import h5py
import numpy as np

W = "model/fc1/weight"


def attr(name, value):
    """root attribute `name` set to value (None: removed)"""
    def change(f):
        if name in f.attrs:
            del f.attrs[name]
        if value is not None:
            f.attrs[name] = value
    return change


def dataset(path, make):
    """the dataset at path replaced by make(file, path, data, attrs)"""
    def change(f):
        d = f[path]
        data, attrs = d[()], dict(d.attrs)
        del f[path]
        made = make(f, path, data)
        if made is not None:
            for k, v in attrs.items():
                made.attrs[k] = v
    return change


def crc(value):
    """W's crc32 attribute set to value (None: removed)"""
    def change(f):
        d = f[W]
        del d.attrs["crc32"]
        if value is not None:
            d.attrs["crc32"] = value
    return change


def s(text):
    return np.bytes_(text.encode())


CASES = {
    # root attributes: kind
    "step-array": attr("step", np.array([20, 21], np.int64)),
    "step-float": attr("step", 20.5),
    "step-string": attr("step", s("20")),
    "step-missing": attr("step", None),
    "model-variable-length": attr("model", "mlp"),
    "model-too-long": attr("model", s("m" * 1000)),
    "seed-string": attr("seed", s("1234")),
    "data-digest-string": attr("data_digest", s("1234")),
    # root attributes: range
    "step-negative": attr("step", np.int64(-1)),
    "step-huge": attr("step", np.int64(9 * 10**18)),
    "epoch-nan": attr("epoch", np.nan),
    "epoch-past-step": attr("epoch", 1e300),
    "ranks-zero": attr("written_ranks", np.int64(0)),
    "dp-past-int": attr("written_dp", np.int64(2**33)),
    "layout-inconsistent": attr("written_pp", np.int64(2)),
    "zero-stage-5": attr("written_zero", np.int64(5)),
    "loss-scale-nan": attr("loss_scale", np.nan),
    "loss-scale-negative": attr("loss_scale", -1.0),
    "skipped-past-step": attr("skipped_steps", np.int64(21)),
    "precision-unknown": attr("precision", s("fp8")),
    # datasets
    "weight-transposed": dataset(W, lambda f, p, d: f.create_dataset(p, data=d.T)),
    "weight-group": dataset(W, lambda f, p, d: (f.create_group(p), None)[1]),
    "weight-string": dataset(W, lambda f, p, d: f.create_dataset(p, data=s("x"))),
    "weight-float16": dataset(W, lambda f, p, d: f.create_dataset(p, data=d.astype(np.float16))),
    "crc-missing": crc(None),
    "crc-array": crc(np.array([1, 2], np.uint32)),
    "crc-string": crc(s("1")),
    # stored differently, the same values: these resume
    "same-float64": dataset(W, lambda f, p, d: f.create_dataset(p, data=d.astype(np.float64))),
    "same-gzip": dataset(W, lambda f, p, d: f.create_dataset(p, data=d, chunks=True,
                                                             compression="gzip")),
    "same-extra-dataset": lambda f: f.create_dataset("model/extra/weight", data=np.zeros(3)),
    "same-no-deck": lambda f: f.__delitem__("deck"),
    # written from other data (by its hash): resumes, with a warning
    "same-other-data-digest": attr("data_digest", np.uint64(0x1234)),
    # an older trainer's file, without the hash: resumes, nothing compared
    "same-no-data-digest": attr("data_digest", None),
    # a deck as another version of the trainer might have written it: not compared
    "same-foreign-deck": dataset("deck", lambda f, p, d: f.create_dataset(
        p, data=np.bytes_(d + b"\n[train]\nold_key = 1\n"))),
}


def main():
    src, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    for name, change in CASES.items():
        dst = os.path.join(out, name + ".h5")
        shutil.copy(src, dst)
        with h5py.File(dst, "r+") as f:
            change(f)
    print("\n".join(CASES))


if __name__ == "__main__":
    main()
