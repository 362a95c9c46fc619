#!/usr/bin/env bash
# gpu_stage.sh: packs what the GPU checks need into .gpu-stage/ (ignored by git), for
# a GPU machine that has CUDA but not this project's Debian libraries and no network
# (a lent cloud GPU, a fresh container): the runtime .debs (OpenMPI, parallel HDF5,
# OpenBLAS and what they load), the build's binaries and test lists without its
# object files, and the first 400 K Brown byte tokens (the layout GPT's data). Copy
# or carry the checkout with .gpu-stage/ there and run tools/gpu_stage_run.sh.
# Run from the repository root after scripts/build.sh (a CUDA build), on Debian 12.
set -euo pipefail
S=.gpu-stage
rm -rf "$S/build" && mkdir -p "$S/debs" "$S/data/brown"
(cd "$S/debs" && apt-get download -q ibverbs-providers libaec0 libatomic1 libbrotli1 libcurl4 \
  libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libffi8 libgfortran5 libgmp10 \
  libgnutls30 libgomp1 libgssapi-krb5-2 libhdf5-openmpi-103-1 libhogweed6 libhwloc15 \
  libibverbs1 libidn2-0 libk5crypto3 libkrb5-3 libkrb5support0 libldap-2.5-0 libmunge2 \
  libnettle8 libnghttp2-14 libnl-route-3-200 libnl-3-200 libnuma1 libopenblas0-pthread \
  libopenmpi3 libp11-kit0 libpmix2 libpsl5 libpsm-infinipath1 libpsm2-2 libquadmath0 \
  librdmacm1 librtmp1 libsasl2-2 libssh2-1 libssl3 libsz2 libtasn1-6 libucx0 libunistring2 \
  libzstd1 openmpi-bin openmpi-common libcom-err2 libkeyutils1 libsasl2-modules-db \
  2>&1 | tail -1)
cp -a build "$S/build"
find "$S/build" -name CMakeFiles -type d -prune -exec rm -rf {} +
rm -rf "$S/build"/*.a "$S/build/Testing"
# the CPU-only test programs: not run there, and each GPU one carries its kernels
find "$S/build/validation" -maxdepth 1 -type f -name 'test_*' ! -name 'test_cuda_*' \
  ! -name test_nccl -delete
/usr/bin/python3 - "$S" <<'PY'
import struct, sys
# the first tokens of each Brown byte file, its header's count made to match
for name, n in (('bytes.train.tok', 400000), ('bytes.val.tok', 100000)):
    b = open('data/brown/' + name, 'rb').read()
    hdr = bytearray(b[:32])
    struct.pack_into('<Q', hdr, 16, n)
    open(sys.argv[1] + '/data/brown/' + name, 'wb').write(bytes(hdr) + b[32:32 + 2 * n])
PY
du -sh "$S"
