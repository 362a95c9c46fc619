#!/usr/bin/env bash
# gpt_512gpu.sh: GPT-2 1558M (inputs/gpt2_1558m.in) on 64 nodes x 8 GPUs = 512 ranks,
# one rank per GPU, for as long as it takes: checkpoints before the time limit and
# requeues itself, resuming exactly (same final parameters as a run never stopped).
#
#   sbatch jobs/gpt_512gpu.sh                       # from the repository root
#   OVERRIDES="train.steps=20000" sbatch jobs/gpt_512gpu.sh
#
# WHAT WORKS TODAY AND WHAT WAITS
#   Works: the Slurm side, all of it: allocation, srun with PMIx, binding, the
#   trainer's checks of the layout against the allocation, run directory by job id,
#   the checkpoint on --signal, exit 75, requeue and exact resume; and the layout:
#   tensor and pipeline parallelism and ZeRO run on CPUs. The test suite
#   (ctest -L slurm) runs this very script on a private Slurm, shrunk to one node on
#   the CPU as a 2-stage pipeline:  DEVICE=cpu PP=2 sbatch --nodes=1
#   --ntasks-per-node=2 ... .
#   Waits: a first run on real GPUs. The CUDA training path runs dp, tp, pp (the
#   stages' messages as NCCL sends and receives, a communicator and a stream per
#   direction between neighbours) and ZeRO, but none of it has run on a GPU yet: run
#   ctest -L gpu on one node first (gpu.pipeline_on_gpu and gpu.test_nccl_pipeline
#   check the pipeline there).
#
# FOR YOUR CLUSTER, change:
#   - partition and account: uncomment and fill in the two "##SBATCH" lines below;
#   - modules: the "module load" lines (an MPI built with PMIx and Slurm support, the
#     same one the trainer was built with; CUDA; parallel HDF5);
#   - CPUs per task: your node's cores / 8 (the trainer runs that many threads);
#   - NCCL: the network interface and InfiniBand HCAs (NCCL_SOCKET_IFNAME,
#     NCCL_IB_HCA), and GPUDirect RDMA if the fabric has it (see the NCCL lines);
#   - --signal: the lead time must cover one training step plus writing a
#     checkpoint: 1558M parameters with AdamW state is about 19 GB, written by all
#     ranks at once through MPI-IO; 10 minutes is generous on a parallel file system
#     (Slurm may deliver the signal up to a minute early);
#   - --time: your partition's limit; the job goes on across as many limits as it
#     needs (MAX_RESTARTS caps the requeues, default 50).
#
#SBATCH --job-name=gpt2-1558m
#SBATCH --nodes=64
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=12
#SBATCH --exclusive
#SBATCH --time=24:00:00
#SBATCH --signal=USR1@600
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=slurm-%x-%j.out
##SBATCH --partition=gpu
##SBATCH --account=myproject

# ---- environment (your cluster's modules) ----
# module load openmpi/4.1 cuda/12 hdf5/1.14-mpi
# NCCL over InfiniBand; name your fabric's interfaces:
# export NCCL_SOCKET_IFNAME=ib0           # bootstrap traffic
# export NCCL_IB_HCA=mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_7
# export NCCL_NET_GDR_LEVEL=PHB            # GPUDirect RDMA where the NIC shares a PCIe switch
# export NCCL_DEBUG=WARN

# ---- deck and size (each overridable from the environment at submission) ----
DECK=${DECK:-inputs/gpt2_1558m.in}
DEVICE=${DEVICE:-cuda}
# Layout: tp x pp x dp = 1 x 8 x 64. The process grid puts tp innermost, then pp,
# then dp, and srun deals consecutive ranks to a node, so with tp = 1 the 8 ranks of a
# node are the 8 pipeline stages of one model replica and dp = 64 runs across nodes.
#  - tp = 1: tensor parallelism splits the attention heads, and GPT-2 1558M has 25:
#    8 does not divide them, 5 would straddle nodes. Nor is it needed: the model in
#    bf16 with fp32 master weights, gradients and AdamW state (18 bytes a parameter,
#    28 GB) fits one 80 GB GPU.
#  - pp = 8 inside the node: pure data parallelism would all-reduce the 6.2 GB of fp32
#    gradients (they accumulate in fp32) per GPU per step across the network, each GPU
#    sending 11.6 GiB, about 0.5 s at 25 GB/s per GPU against about 50 ms of compute
#    for a 1M-token step; 8 stages (blocks 0-5, ..., 30-36, 37-43, then 44-47 and the
#    head, split by cost) cut that to an eighth, each GPU on its
#    own network rail, while the activations between stages (3 MB per sequence) stay
#    on NVLink. `trainer --plan inputs/gpt2_1558m.in --ranks 512 --ranks-per-node 8
#    --device-memory 80GiB --layouts --tflops 400 --node-gbps 150 --network-gbps 25
#    system.device=cuda train.precision=bf16-mixed` with this script's other overrides
#    compares every layout (README, "Which layout to choose"): this one first, an
#    estimated 170 ms a step against 530 ms for dp 512. The split by cost counts
#    FLOPs; each session's log ends with a "stage balance:" line, the split the
#    stages' measured times would choose: OVERRIDES=parallel.stage_blocks=... sets it.
#  - batch: 1024 sequences (1M tokens a step, GPT-3 XL's batch) = 64 replicas x 16
#    micro-batches of one sequence; the 1F1B pipeline bubble is (pp - 1) /
#    (micro_batches + pp - 1) = 30%: raise micro_batches with the batch to shrink it.
# A model whose head count 8 divides (and that does not fit one GPU, e.g. 6.7B) wants
# TP=8 instead: each node one tensor-parallel group, pipeline stages across nodes.
# Precision: bf16-mixed on GPUs (bf16 weights, activations and tensor-core products,
# fp32 master weights, AdamW state and gradient sums), the deck's own (fp32) on CPUs,
# where bf16 storage only adds conversions. PRECISION=fp32 sbatch ... overrides it.
TP=${TP:-1}
PP=${PP:-8}
if [ "$DEVICE" = cuda ]; then PRECISION=${PRECISION:-bf16-mixed}; fi
ARGS=(parallel.tp="$TP" parallel.pp="$PP" parallel.dp=0 system.device="$DEVICE"
  train.batch_size=1024 train.micro_batches=16 checkpoint.resume=auto
  ${PRECISION:+train.precision="$PRECISION"})
# shellcheck disable=SC2206 # OVERRIDES is a list of section.key=value words
ARGS+=(${OVERRIDES:-})
# one rank per GPU: each rank sees the node's GPUs and takes the one of its local
# rank (NVLink peer access between ranks stays possible); cores bound per rank
SRUN_ARGS=(--cpu-bind=cores)

# sbatch runs a copy of this script, so launch.sh is found from where it was submitted
# shellcheck disable=SC2317 # (reached when the file is missing)
source "${TRAINER_ROOT:-${SLURM_SUBMIT_DIR:-.}}/jobs/launch.sh" ||
  { echo "submit from the repository root, or set TRAINER_ROOT" >&2; exit 66; }
