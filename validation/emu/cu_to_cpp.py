#!/usr/bin/env python3
"""cu_to_cpp.py IN.cu OUT.cpp: a .cu file of the backend as C++ for the CUDA
emulation build (validation/emu/README.md).

The one piece of CUDA syntax g++ cannot read is the launch. Each

    kernel<T><<<grid, block, smem, stream>>>(args);

becomes

    tr_emu_launch((const void *)&kernel<T>, "kernel<T>", grid, block, smem, stream,
                  [&] { kernel<T>(args); });

(validation/emu/include/cuda_runtime.h), which checks the configuration as a GPU
would and runs the kernel as every thread of the grid under the warp emulator. The
rest is left as it is, line for line, and a #line directive names the .cu file, so a
compiler message or a fatal error's file:line points at the source."""
import re
import sys

LAUNCH = re.compile(r"<<<")


def kernel_start(text, end):
    """Start of the kernel expression ending at text[end] (exclusive): an
    identifier, optionally followed by template arguments <...>."""
    i = end
    while i > 0 and text[i - 1].isspace():
        i -= 1
    if i > 0 and text[i - 1] == ">":  # template arguments: back to their '<'
        depth = 0
        while i > 0:
            i -= 1
            c = text[i]
            if c == ">":
                depth += 1
            elif c == "<":
                depth -= 1
                if depth == 0:
                    break
        if depth != 0:
            raise ValueError("unbalanced template arguments before <<<")
    j = i
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_:"):
        j -= 1
    if j == i:
        raise ValueError("no kernel name before <<<")
    return j


def matching_paren(text, open_at):
    """Index of the ')' that closes the '(' at open_at."""
    depth = 0
    for k in range(open_at, len(text)):
        c = text[k]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return k
    raise ValueError("unbalanced parentheses in a launch's arguments")


def convert(text, name):
    out = []
    pos = 0
    for m in LAUNCH.finditer(text):
        if m.start() < pos:
            continue
        start = kernel_start(text, m.start())
        kernel = text[start:m.start()].strip()
        close = text.index(">>>", m.end())
        config = text[m.end():close]
        k = close + 3
        while text[k].isspace():
            k += 1
        if text[k] != "(":
            raise ValueError("%s: a launch without arguments after >>>" % name)
        end = matching_paren(text, k)
        args = text[k + 1:end]
        out.append(text[pos:start])
        out.append('tr_emu_launch((const void *)&%s, "%s", %s, [&] { %s(%s); })'
                   % (kernel, kernel, config, kernel, args))
        pos = end + 1
    out.append(text[pos:])
    return "".join(out)


def main():
    src, dst = sys.argv[1], sys.argv[2]
    with open(src) as f:
        text = f.read()
    try:
        body = convert(text, src)
    except ValueError as e:
        sys.exit("cu_to_cpp.py: %s: %s" % (src, e))
    with open(dst, "w") as f:
        f.write('#line 1 "%s"\n' % src)
        f.write(body)


if __name__ == "__main__":
    main()
