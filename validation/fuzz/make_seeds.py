"""make_seeds.py: writes the seeds of the fuzz targets (seeds/<target>/), small valid
inputs from which the mutations start. Run again after changing a format; the files it
writes are committed, and the inputs libFuzzer found (named found-*) sit beside them.

    /usr/bin/python3 validation/fuzz/make_seeds.py

Standard library only."""
import glob
import gzip
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
RS = b'\x1e'  # the targets' separator between files or values


def put(target, name, data):
    d = os.path.join(HERE, 'seeds', target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


def gpt2_alphabet():
    """byte -> its printable stand-in in GPT-2's encoder.json (bytes_to_unicode)"""
    printable = list(range(ord('!'), ord('~') + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    out, extra = {}, 0
    for b in range(256):
        if b in printable:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def decks():
    for path in sorted(glob.glob(os.path.join(ROOT, 'inputs', '*.in'))):
        with open(path, 'rb') as f:
            put('deck', os.path.basename(path), f.read())
    with open(os.path.join(ROOT, 'inputs', 'mnist.in'), 'rb') as f:
        put('deck', 'mnist-overrides', f.read() + RS + b'train.steps=7' + RS +
            b'parallel.dp=2' + RS + b'model.hidden=64,32' + RS + b'run.dir=runs/x y')
    put('deck', 'small', b'[train]\nsteps = 3 ; three\nlr = 1e-3\n\n[model]\nname = gpt\n'
        b'# comment\n[parallel]\ntp = 2\n')


def corpus():
    """JSON-lines records and text with newlines between all kinds of neighbours"""
    put('corpus', 'record.jsonl', json.dumps({'id': 3, 'meta': {'text': 'x', 'l': [1, {'a': '}'}]},
                                             'text': 'caf\u00e9\nline two \U0001F600'}).encode())
    put('corpus', 'ascii.jsonl', json.dumps({'text': 'a\ud800b', 'n': None, 'f': -1.5e3,
                                             't': True}, ensure_ascii=True).encode())
    put('corpus', 'text.txt', b"Line one.\nLine two's end\n\n  indented\n\tx\n7\n'll\n!\n")
    put('corpus', 'unicode.txt', 'a\n\u00a0b\nc\u3000\nd\n\u4e2d\n\U0001F600\n\ufeffe\n'
        .encode() + b'\xff\n\xc3\n\x80x\n')


def jsons():
    put('json', 'small.json', json.dumps({'!': 0, '"': 1, 'a\\b': 2, '\u0120the': 3,
                                          'caf\u00e9': 4, '\U0001F600': 5}).encode())
    put('json', 'escapes.json', b'{"\\u0041\\n\\t\\/\\\\": 7, "\\ud83d\\ude00": 8, "": 0}')
    put('json', 'spaces.json', b' \n{ "x" : -12 ,\r\n"y":0 }\n')
    put('json', 'empty.json', b'{}')


def bpe_texts():
    put('bpe', 'english', b"Hello world! It's a test, isn't it? They'll say we've "
        b"I'm 12,345 times... \"quoted\" (paren) end.\n\nNew   paragraph\t tab")
    put('bpe', 'unicode', 'caf\u00e9 na\u00efve \u20ac5 \u65e5\u672c\u8a9e \U0001F600 '
        '\u0130stanbul \u00bd \u0663\u0664 \u2003em space'.encode())
    put('bpe', 'invalid-utf8', b'ok \xff\xfe bad \xc3 cut \xe2\x82 \xed\xa0\x80 sur \xf4\x90'
        b'\x80\x80 end')
    put('bpe', 'spaces', b'a  b   c\n \n\n  \t\r\n x ')
    put('bpe', 'endoftext', b'one<|endoftext|>two')


def bpe_vocab():
    alpha = gpt2_alphabet()
    toks = [alpha[b] for b in range(256)]
    merges = [('\u0120', 't'), ('h', 'e'), ('\u0120t', 'he'), ('i', 'n')]
    toks += [a + b for a, b in merges] + ['<|endoftext|>']
    enc = json.dumps({t: i for i, t in enumerate(toks)}).encode()
    vocab = ('#version: 0.2\n' + ''.join(f'{a} {b}\n' for a, b in merges)).encode()
    put('bpe_load', 'tiny', enc + RS + vocab)
    put('bpe_load', 'no-merges', enc + RS + b'#version: 0.2\n')


def idx_pair(n, rows, cols, labels, images=None):
    img = struct.pack('>IIII', 0x803, n, rows, cols) + (
        images if images is not None else bytes((i * 37) % 256 for i in range(n * rows * cols)))
    lab = struct.pack('>II', 0x801, len(labels)) + bytes(labels)
    return img, lab


def idx():
    def put_pair(name, img, lab, limit=0):
        put('idx', name, bytes([limit]) + struct.pack('<I', len(img)) + img + lab)
    img, lab = idx_pair(3, 2, 2, [1, 9, 0])
    put_pair('plain', img, lab)
    put_pair('plain-limit2', img, lab, limit=2)
    put_pair('gzip', gzip.compress(img, mtime=0), gzip.compress(lab, mtime=0))
    img, lab = idx_pair(2, 3, 1, [4, 4])
    put_pair('mixed', img, gzip.compress(lab, mtime=0), limit=5)


def token_files():
    def tok(ids, vocab, dtype):
        fmt = '<H' if dtype == 1 else '<I'
        return b'TRTOKENS' + struct.pack('<IIQII', 1, dtype, len(ids), vocab, 0) + \
            b''.join(struct.pack(fmt, i) for i in ids)
    put('token_file', 'u16', tok([1, 2, 3, 50256, 0], 50257, 1))
    put('token_file', 'u32', tok([70000, 5, 99999], 100000, 2))
    put('token_file', 'empty', tok([], 256, 1))

    def llmc(ids, magic, version, fmt):  # llm.c's dev/data format
        header = struct.pack('<256i', magic, version, len(ids), *([0] * 253))
        return header + b''.join(struct.pack(fmt, i) for i in ids)
    put('token_file', 'llmc-gpt2', llmc([15496, 995, 50256, 0], 20240520, 1, '<H'))
    put('token_file', 'llmc-llama3', llmc([128000, 9906, 1917, 128001], 20240801, 7, '<I'))


def slurm():
    names = ['SLURM_JOB_ID', 'SLURM_JOB_NAME', 'SLURM_JOB_PARTITION', 'SLURM_RESTART_COUNT',
             'SLURM_JOB_NODELIST', 'SLURM_JOB_NUM_NODES', 'SLURM_NODEID', 'SLURM_NTASKS',
             'SLURM_STEP_TASKS_PER_NODE', 'SLURM_TASKS_PER_NODE', 'SLURM_NTASKS_PER_NODE',
             'SLURM_CPUS_PER_TASK', 'SLURM_CPUS_ON_NODE', 'SLURM_GPUS_ON_NODE',
             'SLURM_DISTRIBUTION', 'SLURM_ARRAY_JOB_ID', 'SLURM_ARRAY_TASK_ID']

    def env(**kv):
        vals = [kv.get(n, '') for n in names]
        return RS.join(v.encode() for v in vals)
    put('slurm', 'gpu-job', env(SLURM_JOB_ID='1234', SLURM_JOB_NAME='gpt', SLURM_JOB_PARTITION='gpu',
                                SLURM_RESTART_COUNT='1', SLURM_JOB_NODELIST='gpu[001-064]',
                                SLURM_JOB_NUM_NODES='64', SLURM_NODEID='3', SLURM_NTASKS='512',
                                SLURM_STEP_TASKS_PER_NODE='8(x64)', SLURM_TASKS_PER_NODE='8(x64)',
                                SLURM_NTASKS_PER_NODE='8', SLURM_CPUS_PER_TASK='6',
                                SLURM_CPUS_ON_NODE='48', SLURM_GPUS_ON_NODE='8',
                                SLURM_DISTRIBUTION='block'))
    put('slurm', 'array', env(SLURM_JOB_ID='99', SLURM_ARRAY_JOB_ID='98', SLURM_ARRAY_TASK_ID='7',
                              SLURM_TASKS_PER_NODE='2(x3),1', SLURM_NODEID='3',
                              SLURM_CPUS_ON_NODE='2', SLURM_JOB_NUM_NODES='4'))
    put('slurm', 'none', b'')


if __name__ == '__main__':
    decks()
    jsons()
    corpus()
    bpe_texts()
    bpe_vocab()
    idx()
    token_files()
    slurm()
    for t in sorted(os.listdir(os.path.join(HERE, 'seeds'))):
        files = os.listdir(os.path.join(HERE, 'seeds', t))
        print(f'{t}: {len(files)} seeds')
