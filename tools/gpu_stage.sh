#!/usr/bin/env bash
# gpu_stage.sh: packs what the GPU checks need into .gpu-stage/ (ignored by git), for
# a GPU machine that has CUDA but not this project's Debian libraries and no network
# (a lent cloud GPU, a fresh container): the runtime .debs (OpenMPI, parallel HDF5,
# OpenBLAS and what they load), the build's binaries and test lists without its
# object files (build.tar.xz), and the data the GPU tests read (data.tar.xz: the
# first 400 K Brown byte tokens for the layout GPT, and data/mnist where it has been
# prepared). Copy or carry the checkout with .gpu-stage/ there and run
# tools/gpu_stage_run.sh.
#
# Why archives: each GPU test program links the whole trainer library with its CUDA
# code for every architecture built, so the seven programs are about 9 MB each
# (61 MB in all, 2026-11-26) but nearly identical: xz, whose window spans them,
# packs them into about 9 MB. The device tool of this workplace carries at most
# 64 MiB with the checkout; the folder is checked against STAGE_LIMIT_MIB (56).
# Run from the repository root after scripts/build.sh (a CUDA build), on Debian 12.
set -euo pipefail
S=.gpu-stage
LIMIT=${STAGE_LIMIT_MIB:-56}
rm -rf "$S/build" "$S/data" "$S"/*.tar.xz && mkdir -p "$S/debs"
(cd "$S/debs" && apt-get download -q ibverbs-providers libaec0 libatomic1 libbrotli1 libcurl4 \
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libffi8 libgfortran5 libgmp10 \
  libgnutls30 libgomp1 libgssapi-krb5-2 libhdf5-openmpi-103-1 libhogweed6 libhwloc15 \
  libibverbs1 libidn2-0 libk5crypto3 libkrb5-3 libkrb5support0 libldap-2.5-0 libmunge2 \
  libnettle8 libnghttp2-14 libnl-route-3-200 libnl-3-200 libnuma1 libopenblas0-pthread \
  libopenmpi3 libp11-kit0 libpmix2 libpsl5 libpsm-infinipath1 libpsm2-2 libquadmath0 \
  librdmacm1 librtmp1 libsasl2-2 libssh2-1 libssl3 libsz2 libtasn1-6 libucx0 libunistring2 \
  libzstd1 openmpi-bin openmpi-common libcom-err2 libkeyutils1 libsasl2-modules-db \
  2>&1 | { grep -v "unsandboxed as root" || true; } | tail -1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -a build "$tmp/build"
find "$tmp/build" -name CMakeFiles -type d -prune -exec rm -rf {} +
rm -rf "$tmp/build"/*.a "$tmp/build/Testing"
# the CPU-only test programs: not run there, and each GPU one carries its kernels
find "$tmp/build/validation" -maxdepth 1 -type f -name 'test_*' ! -name 'test_cuda_*' \
  ! -name test_nccl -delete
# the CUDA emulation (validation/emu): for machines without a GPU; its CTest file stays,
# which `ctest -L gpu` reads past
find "$tmp/build/validation/emu" -type f ! -name CTestTestfile.cmake -delete 2>/dev/null || true
tar -C "$tmp" -cJf "$S/build.tar.xz" build
mkdir -p "$tmp/data/brown"
/usr/bin/python3 - "$tmp" <<'PY'
import struct, sys
# the first tokens of each Brown byte file, its header's count made to match
for name, n in (('bytes.train.tok', 400000), ('bytes.val.tok', 100000)):
    b = open('data/brown/' + name, 'rb').read()
    hdr = bytearray(b[:32])
    struct.pack_into('<Q', hdr, 16, n)
    open(sys.argv[1] + '/data/brown/' + name, 'wb').write(bytes(hdr) + b[32:32 + 2 * n])
PY
[ -f data/mnist/train-images-idx3-ubyte ] && cp -a data/mnist "$tmp/data/mnist"
tar -C "$tmp" -cJf "$S/data.tar.xz" data
mib=$(du -sm "$S" | cut -f1)
echo "$S: ${mib} MiB ($(du -sh "$S/build.tar.xz" | cut -f1) build, $(du -sh "$S/data.tar.xz" \
  | cut -f1) data, $(du -sh "$S/debs" | cut -f1) packages)"
if [ "$mib" -gt "$LIMIT" ]; then
  echo "gpu_stage.sh: $S is ${mib} MiB, over the ${LIMIT} MiB that leaves room for the checkout" \
    "within a 64 MiB transfer; build for the GPU's architecture alone" \
    "(-DCMAKE_CUDA_ARCHITECTURES=90) or raise STAGE_LIMIT_MIB" >&2
  exit 1
fi
