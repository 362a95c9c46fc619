#!/usr/bin/env bash
# gpt2_124m_8gpu.sh: GPT-2 124M (inputs/gpt2_124m.in) on one node with 8 GPUs, one
# rank per GPU, data-parallel; checkpoints before the time limit and requeues itself.
#
#   sbatch jobs/gpt2_124m_8gpu.sh                   # from the repository root
#   OVERRIDES="train.steps=2000 optim.lr=3e-4" sbatch jobs/gpt2_124m_8gpu.sh
#
# WHAT WORKS TODAY AND WHAT WAITS
#   Works: everything on the Slurm side (see jobs/gpt_512gpu.sh) and, with
#   DEVICE=cpu, the training itself: DEVICE=cpu sbatch --gpus-per-node=0 ... trains
#   on the node's cores (slowly: GPT-2 124M is a GPU model).
#   The CUDA path (device = cuda, the default here: dp over the 8 GPUs with NCCL) has
#   run on one GPU (an H100: its tests pass, GPT-2 124M at 13 % MFU), not yet on
#   several with NCCL between them: run ctest -L gpu on one node first.
#   Fine-tuning from GPT-2's published weights (README, "Checkpoints"):
#   OVERRIDES="checkpoint.init_from=data/gpt2_124m_openai.h5 optim.lr=6e-5
#   optim.schedule=linear optim.warmup_steps=100 train.steps=2000" sbatch jobs/gpt2_124m_8gpu.sh
#
# FOR YOUR CLUSTER: partition and account (the "##SBATCH" lines), module loads,
# CPUs per task (the node's cores / 8), NCCL settings (jobs/gpt_512gpu.sh explains).
#
#SBATCH --job-name=gpt2-124m
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=12
#SBATCH --time=12:00:00
#SBATCH --signal=USR1@300
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=slurm-%x-%j.out
##SBATCH --partition=gpu
##SBATCH --account=myproject

# module load openmpi/4.1 cuda/12 hdf5/1.14-mpi
# export NCCL_DEBUG=WARN    # one node: NCCL uses NVLink, no network settings needed

DECK=${DECK:-inputs/gpt2_124m.in}
DEVICE=${DEVICE:-cuda}
# Layout: dp = 8 (tp = pp = 1). 124M parameters with AdamW state is 2 GB: every GPU
# holds the whole model, and the 500 MB fp32 gradient all-reduce on NVLink takes a
# few milliseconds, overlapped with backward. The deck's batch of 64 sequences is 8
# per GPU. Splitting the model (TP, PP) would only add communication at this size.
# Precision: bf16-mixed on GPUs, the deck's (fp32) on CPUs (jobs/gpt_512gpu.sh says
# why); PRECISION=fp32 sbatch ... overrides it.
TP=${TP:-1}
PP=${PP:-1}
if [ "$DEVICE" = cuda ]; then PRECISION=${PRECISION:-bf16-mixed}; fi
ARGS=(parallel.tp="$TP" parallel.pp="$PP" parallel.dp=0 system.device="$DEVICE"
  checkpoint.resume=auto ${PRECISION:+train.precision="$PRECISION"})
# shellcheck disable=SC2206 # OVERRIDES is a list of section.key=value words
ARGS+=(${OVERRIDES:-})
SRUN_ARGS=(--cpu-bind=cores)

# sbatch runs a copy of this script, so launch.sh is found from where it was submitted
# shellcheck disable=SC2317 # (reached when the file is missing)
source "${TRAINER_ROOT:-${SLURM_SUBMIT_DIR:-.}}/jobs/launch.sh" ||
  { echo "submit from the repository root, or set TRAINER_ROOT" >&2; exit 66; }
