#!/usr/bin/env bash
# install_deps.sh: the Debian 12 packages the trainer needs to build, test and run.
# Idempotent: installs only what is missing. Needs root (or sudo).
# --mpich: also MPICH and its parallel HDF5, beside Open MPI (scripts/test_mpich.sh);
# Open MPI stays the default mpicc and mpirun (Debian's alternatives rank it first).
set -euo pipefail

PACKAGES=(build-essential cmake pkg-config git
  openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools
  libopenblas-dev zlib1g-dev
  python3 python3-torch python3-numpy python3-h5py python3-protobuf
  dataset-fashion-mnist
  slurm-wlm munge)  # the slurm tests start a private Slurm (slurmctld, slurmd, munged)
if [ "${1:-}" = --mpich ]; then
  PACKAGES+=(mpich libmpich-dev libhdf5-mpich-dev)
fi

missing=()
# node and npm fetch the npm data packages; a machine may already have them from
# elsewhere (nodesource bundles npm inside nodejs, and Debian's npm would conflict).
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "install_deps: run as root or install sudo" >&2; exit 1; }
  SUDO=sudo
fi
echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install_deps: done"
