#!/usr/bin/env bash
# mnist.sh: the MLP on MNIST (inputs/mnist.in) on CPU nodes: 2 nodes x 4 ranks, 4
# cores each; checkpoints before the time limit and requeues itself.
#
#   sbatch jobs/mnist.sh                            # from the repository root
#   DECK=inputs/mnist_cnn.in sbatch jobs/mnist.sh   # the CNN
#   OVERRIDES="train.epochs=20" sbatch jobs/mnist.sh
#
# Works today, end to end; the test suite runs it on a private Slurm (ctest -L slurm).
#
# FOR YOUR CLUSTER: partition and account (the "##SBATCH" lines), the module loads
# (the MPI the trainer was built with, parallel HDF5), and CPUs per task: the ranks
# of a node x CPUs per task should be the node's cores (the trainer runs that many
# OpenMP threads per rank and checks that they fit what the job holds).
#
#SBATCH --job-name=mnist
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=4
#SBATCH --time=00:30:00
#SBATCH --signal=USR1@60
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=slurm-%x-%j.out
##SBATCH --partition=cpu
##SBATCH --account=myproject

# module load openmpi/4.1 hdf5/1.14-mpi openblas

DECK=${DECK:-inputs/mnist.in}
# Layout: data parallel over all 8 ranks (the mlp and cnn models are data-parallel
# only); the deck's global batch of 128 is 16 samples per rank.
ARGS=(parallel.dp=0 checkpoint.resume=auto)
# shellcheck disable=SC2206 # OVERRIDES is a list of section.key=value words
ARGS+=(${OVERRIDES:-})
SRUN_ARGS=(--cpu-bind=cores)

# sbatch runs a copy of this script, so launch.sh is found from where it was submitted
# shellcheck disable=SC2317 # (reached when the file is missing)
source "${TRAINER_ROOT:-${SLURM_SUBMIT_DIR:-.}}/jobs/launch.sh" ||
  { echo "submit from the repository root, or set TRAINER_ROOT" >&2; exit 66; }
