#!/usr/bin/env bash
# quickstart.sh: from a fresh Debian 12 machine to a trained MNIST model.
# Installs the packages, builds, prepares the data (MNIST; the Brown text corpus for
# the GPT model) and runs
#   mpirun -np 8 ./trainer inputs/mnist.in
# Every step is idempotent: run it again and only the training runs again, which in
# the same run directory (runs/mnist) resumes the first run's checkpoint, at its last
# step, and only evaluates it; give another run.dir=... to train anew.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scripts/install_deps.sh
scripts/build.sh
scripts/prepare_data.sh
scripts/prepare_text.sh
# 8 ranks on a small machine: allow more ranks than cores; as root, say so to OpenMPI.
export OMPI_MCA_rmaps_base_oversubscribe=1
if [ "$(id -u)" = 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
mpirun -np 8 ./trainer inputs/mnist.in "$@"
