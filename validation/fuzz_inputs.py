r"""fuzz_inputs.py: random bad input against the trainer, looking for crashes, hangs,
sanitizer reports and exit codes outside the documented ones. Not a test (random,
and minutes long): run it after changing the deck parser or a data reader, best on
the AddressSanitizer + UBSan build, which turns a silent overrun into a report.

    BUILD_DIR=$PWD/build-asan scripts/build.sh -DTRAINER_SANITIZE=ON \
        -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINER_CUDA=OFF -DTRAINER_LINK_ROOT=OFF
    /usr/bin/python3 validation/fuzz_inputs.py deck --trainer build-asan/trainer --cases 300
    /usr/bin/python3 validation/fuzz_inputs.py idx  --trainer build-asan/trainer --cases 150

deck: mutates the decks of inputs/ (values replaced by odd ones, lines inserted,
      deleted, duplicated, cut or with a byte flipped, stray section headers) and
      sometimes adds an odd command-line override, then runs `trainer --plan DECK`,
      which parses and checks everything without training.
idx:  mutates a 256-image MNIST subset (header fields, truncation, flipped header
      bytes, gzip with corrupted or cut streams, out-of-range labels, trailing
      junk) and trains 2 steps on it in one process (needs data/mnist, from
      scripts/prepare_data.sh).

A case fails on: a signal or an exit code other than 0, 64 (deck, layout), 65
(malformed data), 66 (missing file) or 74 (run directory); a sanitizer report; or a
run past the timeout. Failing inputs are kept in --out. Exit status 1 if any failed.
Uses only the standard library; the sanitizer settings are .ci/run's."""
import argparse
import glob
import gzip
import os
import random
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OK_CODES = (0, 64, 65, 66, 74)
ODD = [b'', b'=', b'[', b']', b'[]', b'[train', b'nan', b'inf', b'-inf', b'1e999', b'-1e999',
       b'99999999999999999999999', b'-9223372036854775808', b'0x10', b'1.5', b'-1', b'0',
       b'"x"', b"'", b';', b'#', b'\xff\xfe', b'\x00', b'a' * 5000, b'true', b'yes', b'maybe',
       b' = ', b'\t', b'\r', b'${HOME}', b'%s%n', b'1,2,3', b',', b'1 2', b'2147483648',
       b'4294967297', b'1e-45', b'.', b'..', b'/', b'/dev/null']
SECTIONS = [b'train', b'optim', b'model', b'data', b'run', b'parallel', b'system', b'zz']


def sanitizer_env():
    supp = os.path.join(ROOT, 'validation', 'lsan.supp')
    return dict(os.environ,
                ASAN_OPTIONS='detect_leaks=1:abort_on_error=1:detect_odr_violation=0:'
                             'fast_unwind_on_malloc=0:intercept_tls_get_addr=0',
                LSAN_OPTIONS='suppressions=%s:print_suppressions=0:fast_unwind_on_malloc=0'
                             % supp,
                UBSAN_OPTIONS='print_stacktrace=1:halt_on_error=1',
                OMPI_ALLOW_RUN_AS_ROOT='1', OMPI_ALLOW_RUN_AS_ROOT_CONFIRM='1')


def mutate_deck(text, rng):
    lines = text.split(b'\n')
    for _ in range(rng.randint(1, 4)):
        op, i = rng.randrange(7), rng.randrange(len(lines))
        if op == 0 and b'=' in lines[i]:
            lines[i] = lines[i].partition(b'=')[0] + b'= ' + rng.choice(ODD)
        elif op == 1:
            lines.insert(i, rng.choice(ODD))
        elif op == 2:
            del lines[i]
            lines = lines or [b'']
        elif op == 3:
            lines.insert(i, lines[rng.randrange(len(lines))])
        elif op == 4 and lines[i]:
            line = bytearray(lines[i])
            line[rng.randrange(len(line))] = rng.randrange(256)
            lines[i] = bytes(line)
        elif op == 5:
            lines[i] = lines[i][:rng.randrange(len(lines[i]) + 1)]
        else:
            lines.insert(i, b'[' + rng.choice(SECTIONS) + b']')
    return b'\n'.join(lines)


def deck_cases(args, rng):
    """(name, files {path: bytes}, argv) of each case"""
    decks = sorted(glob.glob(os.path.join(ROOT, 'inputs', '*.in')))
    texts = [open(d, 'rb').read() for d in decks]
    path = os.path.join(args.out, 'case.in')
    for n in range(args.cases):
        j = rng.randrange(len(decks))
        argv = [args.trainer, '--plan', path]
        if rng.random() < 0.3:  # argv cannot hold a NUL
            key = rng.choice(['train.batch_size=', 'model.layers=', 'optim.lr=', 'parallel.tp=',
                              'run.dir=', 'zz.q=', 'train=', '=3'])
            argv.append(key + rng.choice([v for v in ODD if b'\x00' not in v]).decode('latin1'))
        yield ('%d (%s)' % (n, os.path.basename(decks[j])), {path: mutate_deck(texts[j], rng)},
               argv)


def idx_subset(n0):
    mnist = os.path.join(ROOT, 'data', 'mnist')
    img = open(os.path.join(mnist, 'train-images-idx3-ubyte'), 'rb').read()
    lab = open(os.path.join(mnist, 'train-labels-idx1-ubyte'), 'rb').read()
    return (struct.pack('>IIII', 0x803, n0, 28, 28) + img[16:16 + n0 * 784],
            struct.pack('>II', 0x801, n0) + lab[8:8 + n0])


def mutate_idx(b, fields, n0, rng):
    """the mutated file and its suffix ('.gz' where it is gzipped)"""
    b = bytearray(b)
    op = rng.randrange(6)
    if op == 0:  # one header field: the magic, or a count / dimension
        f = rng.randrange(fields)
        v = (rng.choice([0x803, 0x801, 0x802, 0x903, 0xc03, 0xd03, 0x804, 0x800, 0x10803, 0])
             if f == 0 else
             rng.choice([0, 1, 2, 27, 28, 29, 255, 0x7fffffff, 0x80000000, 0xffffffff, n0 - 1,
                         n0 + 1, 10**6]))
        b[4 * f:4 * f + 4] = struct.pack('>I', v)
    elif op == 1:
        b = b[:rng.randrange(len(b))]
    elif op == 2:
        for _ in range(3):
            b[rng.randrange(4 * fields)] = rng.randrange(256)
    elif op == 3:
        z = bytearray(gzip.compress(bytes(b)))
        if rng.random() < 0.5:
            z = z[:rng.randrange(len(z))]
        else:
            for _ in range(rng.randint(1, 5)):
                z[rng.randrange(len(z))] = rng.randrange(256)
        return bytes(z), '.gz'
    elif op == 4 and fields == 2:  # labels the model has no class for
        for _ in range(5):
            b[8 + rng.randrange(n0)] = rng.choice([10, 11, 200, 255])
    else:
        b += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 100)))
    return bytes(b), ''


def idx_cases(args, rng):
    n0 = 256
    img, lab = idx_subset(n0)
    for n in range(args.cases):
        bad_img = rng.random() < 0.6
        data, ext = mutate_idx(img if bad_img else lab, 4 if bad_img else 2, n0, rng)
        pi = os.path.join(args.out, 'images' + (ext if bad_img else ''))
        pl = os.path.join(args.out, 'labels' + ('' if bad_img else ext))
        argv = [args.trainer, 'inputs/mnist.in', 'data.train_images=' + pi,
                'data.train_labels=' + pl, 'train.steps=2', 'train.epochs=0',
                'train.batch_size=32', 'train.eval_every=0', 'run.progress=off',
                'system.threads=1', 'run.dir=' + os.path.join(args.out, 'run')]
        yield ('%d (%s%s)' % (n, 'images' if bad_img else 'labels', ext),
               {pi: data if bad_img else img, pl: lab if bad_img else data}, argv)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('mode', choices=['deck', 'idx'], help='what to mutate (above)')
    ap.add_argument('--trainer', default=os.path.join(ROOT, 'trainer'),
                    help='the binary to run (default: the repository\'s ./trainer)')
    ap.add_argument('--cases', type=int, default=200, help='how many mutated inputs')
    ap.add_argument('--seed', type=int, default=1, help='seed of the mutations (the same seed '
                    'gives the same cases)')
    ap.add_argument('--timeout', type=float, default=60.0, help='seconds a case may run')
    ap.add_argument('--out', default='/tmp/trainer_fuzz', help='scratch and failing inputs')
    args = ap.parse_args()
    args.trainer = os.path.abspath(args.trainer)
    os.makedirs(args.out, exist_ok=True)
    rng, env = random.Random(args.seed), sanitizer_env()
    cases = deck_cases(args, rng) if args.mode == 'deck' else idx_cases(args, rng)
    codes, failed = {}, 0
    for name, files, argv in cases:
        for path, data in files.items():
            with open(path, 'wb') as f:
                f.write(data)
        try:
            r = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True,
                               timeout=args.timeout)
            code, out = r.returncode, (r.stdout + r.stderr).decode('latin1')
        except subprocess.TimeoutExpired:
            code, out = 'timeout', ''
        codes[code] = codes.get(code, 0) + 1
        if code in OK_CODES and 'Sanitizer' not in out and 'runtime error' not in out:
            continue
        failed += 1
        keep = os.path.join(args.out, 'failed_%s' % name.split()[0])
        os.makedirs(keep, exist_ok=True)
        for path, data in files.items():
            with open(os.path.join(keep, os.path.basename(path)), 'wb') as f:
                f.write(data)
        print('FAIL case %s: exit %s, %s\n  %s' % (name, code, ' '.join(argv[1:]),
                                                 out[-1500:].replace('\n', '\n  ')))
    print('%s: %d cases, %d failed; exit codes %s' % (args.mode, args.cases, failed,
                                                     dict(sorted(codes.items(), key=str))))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
