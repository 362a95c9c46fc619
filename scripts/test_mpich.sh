#!/usr/bin/env bash
# test_mpich.sh: build the trainer against MPICH (Debian's, beside the default Open
# MPI) into build-mpich/ and run the tests labelled "mpich" there: the collectives,
# parallel-HDF5 checkpoints, resume, the ranks' agreement on errors, the watchdog and
# the parallel layouts against one rank, under another MPI and its launcher (Hydra).
# Extra arguments go to ctest. Installs what is missing, as scripts/test.sh does.
#
# One test at a time: MPICH's ranks poll while they wait (Open MPI's yield when a node
# has more ranks than cores), so tests side by side on a small machine starve each
# other's ranks. The ./trainer link stays the default build's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install_deps.sh --mpich
BUILD_DIR=${BUILD_DIR:-$root/build-mpich} TEST_JOBS=${TEST_JOBS:-1} \
  CMAKE_ARGS="-DTRAINER_CUDA=OFF -DTRAINER_CUDA_EMU=OFF -DTRAINER_LINK_ROOT=OFF \
  -DMPI_C_COMPILER=/usr/bin/mpicc.mpich -DMPIEXEC_EXECUTABLE=/usr/bin/mpiexec.mpich \
  -DHDF5_C_COMPILER_EXECUTABLE=/usr/bin/h5pcc.mpich ${CMAKE_ARGS:-}" \
  scripts/test.sh -L mpich "$@"
