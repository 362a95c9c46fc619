"""tb_events.py: reads a run's TensorBoard event files as TensorBoard does and checks
them against the run's metrics.csv.

    /usr/bin/python3 validation/tb_events.py RUN_DIR [--lm TOKENS_PER_SAMPLE] [--loss-scale]

The framing (length, masked CRC-32C of the length, data, masked CRC-32C of the data)
is checked with a CRC-32C of its own (bit by bit, checked on the standard test
vector), and each record is parsed by the protobuf library (Debian's
python3-protobuf) with the Event, Summary and SessionLog messages declared here with
TensorBoard's field numbers (tensorboard/compat/proto/event.proto, summary.proto).
Files are read in name order and a SessionLog START at step s drops the scalars of
steps >= s read before it, as TensorBoard's reader purges a restarted run's orphaned
steps. What remains must be metrics.csv: for every row, <phase>/loss and
<phase>/accuracy (train rows also lr, grad_norm, samples_per_s and, with
--loss-scale, loss_scale; a language model's, --lm T, also tokens_per_s =
samples_per_s x T, and its eval rows perplexity) at the row's step, equal to the
row's values as float32 to the digits metrics.csv prints, and nothing else. Exits 1
with the first difference."""
import csv
import decimal
import glob
import math
import os
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

F = descriptor_pb2.FieldDescriptorProto


def declare():
    fd = descriptor_pb2.FileDescriptorProto(name="tb_check.proto", package="tbcheck",
                                            syntax="proto3")

    def msg(name, fields):
        m = fd.message_type.add(name=name)
        for fname, num, ftype, label, tname in fields:
            f = m.field.add(name=fname, number=num, type=ftype, label=label)
            if tname:
                f.type_name = tname
        return m
    opt, rep = F.LABEL_OPTIONAL, F.LABEL_REPEATED
    msg("Value", [("tag", 1, F.TYPE_STRING, opt, None), ("simple_value", 2, F.TYPE_FLOAT, opt, None)])
    msg("Summary", [("value", 1, F.TYPE_MESSAGE, rep, ".tbcheck.Value")])
    msg("SessionLog", [("status", 1, F.TYPE_INT32, opt, None)])  # an enum on the wire: a varint
    msg("Event", [("wall_time", 1, F.TYPE_DOUBLE, opt, None), ("step", 2, F.TYPE_INT64, opt, None),
                  ("file_version", 3, F.TYPE_STRING, opt, None),
                  ("summary", 5, F.TYPE_MESSAGE, opt, ".tbcheck.Summary"),
                  ("session_log", 7, F.TYPE_MESSAGE, opt, ".tbcheck.SessionLog")])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fd)
    desc = pool.FindMessageTypeByName("tbcheck.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
    return c ^ 0xFFFFFFFF


def masked(c):
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(path):
    data = open(path, "rb").read()
    pos = 0
    while pos < len(data):
        if len(data) - pos < 12:
            sys.exit("%s: a record header cut short at byte %d" % (path, pos))
        (n,) = struct.unpack_from("<Q", data, pos)
        (lcrc,) = struct.unpack_from("<I", data, pos + 8)
        if masked(crc32c(data[pos:pos + 8])) != lcrc:
            sys.exit("%s: the length's CRC is wrong at byte %d" % (path, pos))
        body = data[pos + 12:pos + 12 + n]
        (dcrc,) = struct.unpack_from("<I", data, pos + 12 + n)
        if masked(crc32c(body)) != dcrc:
            sys.exit("%s: the data's CRC is wrong at byte %d" % (path, pos))
        yield body
        pos += 12 + n + 4


def main():
    run = sys.argv[1]
    lm = int(sys.argv[sys.argv.index("--lm") + 1]) if "--lm" in sys.argv else 0
    loss_scale = "--loss-scale" in sys.argv
    assert crc32c(b"123456789") == 0xE3069283  # the CRC-32C check value
    Event = declare()
    scalars = {}  # (tag, step) -> value
    files = sorted(glob.glob(os.path.join(run, "tensorboard", "events.out.tfevents.*")))
    if not files:
        sys.exit("no event file under %s/tensorboard" % run)
    starts = 0
    for path in files:
        for i, body in enumerate(records(path)):
            ev = Event()
            ev.ParseFromString(body)
            if i == 0:
                if ev.file_version != "brain.Event:2":
                    sys.exit("%s: first event is not the file version" % path)
                continue
            if ev.HasField("session_log"):
                if ev.session_log.status != 1:
                    sys.exit("%s: a session log other than START" % path)
                starts += 1
                scalars = {k: v for k, v in scalars.items() if k[1] < ev.step}
            elif ev.HasField("summary"):
                for v in ev.summary.value:
                    scalars[(v.tag, ev.step)] = v.simple_value
            else:
                sys.exit("%s: an event with neither a summary nor a session log" % path)
    if starts != len(files):
        sys.exit("%d files but %d session starts" % (len(files), starts))

    def f32(x):
        return struct.unpack("<f", struct.pack("<f", x))[0]
    def printed(text):
        """the value metrics.csv printed, and half a unit of its last digit"""
        if text in ("inf", "-inf", "nan", "-nan"):
            return float(text), 0.0
        return float(text), 0.5 * 10.0 ** decimal.Decimal(text).as_tuple().exponent
    want = {}  # (tag, step) -> (value, how far the print may be from it)
    for row in csv.DictReader(open(os.path.join(run, "metrics.csv"))):
        step, phase = int(row["step"]), row["phase"]
        names = ["loss", "accuracy"]
        if phase == "train":
            names += ["lr", "grad_norm", "samples_per_s"] + (["loss_scale"] if loss_scale else [])
        for name in names:
            want[("%s/%s" % (phase, name), step)] = printed(row[name])
        if phase == "train" and lm:
            rate, tol = printed(row["samples_per_s"])
            want[("train/tokens_per_s", step)] = (rate * lm, tol * lm)
        if phase == "eval" and lm:
            loss, tol = printed(row["loss"])
            want[("eval/perplexity", step)] = (math.exp(loss), math.exp(loss) * tol)
    missing = sorted(set(want) - set(scalars))
    extra = sorted(set(scalars) - set(want))
    if missing or extra:
        sys.exit("tags and steps differ: missing %s, extra %s" % (missing[:5], extra[:5]))
    for key, (value, tol) in sorted(want.items()):
        got = scalars[key]
        # the event holds the value as float32; metrics.csv printed it to some digits
        if not (got == f32(value) or abs(got - value) <= tol + 1.2e-7 * abs(value) or
                (math.isnan(got) and math.isnan(value))):
            sys.exit("%s at step %d: %r in the event file, %r in metrics.csv" % (key[0], key[1], got, value))
    print("%d event file(s), %d scalars at %d steps: as metrics.csv" %
          (len(files), len(scalars), len({k[1] for k in scalars})))


if __name__ == "__main__":
    main()
