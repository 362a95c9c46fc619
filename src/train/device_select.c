/* device_select.c: [system] device. The choice of each rank's GPU is in
 * src/cuda/cuda_device.cu (what one rank sees); this file adds what needs the other
 * ranks: no two ranks of a node on one physical GPU, and one verdict for the job.
 *
 * Two ranks on one GPU are refused rather than allowed by a deck key: NCCL does not
 * support one device twice in a communicator (it "may lead to hangs"), and the two
 * would split the GPU's memory and time anyway. */
#include "device_select.h"
#include "core/error.h"
#ifdef TRAINER_HAVE_CUDA
#include "cuda/cuda_backend.h"
#include "cuda/cuda_device.h"
#include "cuda/cuda_probe.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_staged; /* TRAINER_STAGED_COMM as the ranks agreed on it (tr_device_select) */

/* This rank's TRAINER_STAGED_COMM: 0 (unset, empty or 0) or 1; -1, with err set, for
 * any other value */
static int staged_from_env(char *err, size_t errlen)
{
    const char *v = getenv("TRAINER_STAGED_COMM");
    if (!v || !*v || !strcmp(v, "0"))
        return 0;
    if (!strcmp(v, "1"))
        return 1;
    snprintf(err, errlen, "TRAINER_STAGED_COMM=%s in the environment: expected 1 (collectives "
             "on device memory staged through the host, ranks may share a GPU: for tests) or 0",
             v);
    return -1;
}

/* Collective: every rank's TRAINER_STAGED_COMM, which must be valid and the same on all
 * of them (a rank that went its own way would skip, or make, the NCCL communicators
 * that the others wait in); 0 with g_staged set, or TR_EXIT_USAGE, agreed. */
static int agree_staged(const tr_world *w, char *err, size_t errlen)
{
    int mine = staged_from_env(err, errlen), lo = 0, hi = 0;
    tr_allreduce(&mine, &lo, 1, TR_I32, TR_MIN, w->world);
    tr_allreduce(&mine, &hi, 1, TR_I32, TR_MAX, w->world);
    if (lo >= 0 && lo != hi)
        snprintf(err, errlen, "TRAINER_STAGED_COMM is 1 on some ranks and not on others: set "
                 "it for every rank (mpirun -x TRAINER_STAGED_COMM=1), or for none");
    int rc = lo < 0 ? (mine < 0 ? TR_EXIT_USAGE : 0) : lo != hi ? TR_EXIT_USAGE : 0;
    rc = tr_comm_agree(w, rc, err);
    g_staged = rc ? 0 : hi;
    return rc;
}

int tr_staged_comm(void) { return g_staged; }

#ifdef TRAINER_HAVE_CUDA
/* What each rank of a node tells the others about its GPU. */
typedef struct gpu_choice {
    int ok, rank;
    char pci_bus_id[32];
    char uuid[40];
} gpu_choice;

/* One GPU (or one MIG instance): by UUID where both ranks have one, else by PCI bus. */
static int same_gpu(const gpu_choice *a, const gpu_choice *b)
{
    if (a->uuid[0] && b->uuid[0])
        return !strcmp(a->uuid, b->uuid);
    return !strcmp(a->pci_bus_id, b->pci_bus_id);
}

/* TR_EXIT_USAGE with the message in err when two ranks of this node chose one
 * physical GPU; every rank of the node reaches the same verdict. Collective. */
static int check_one_rank_per_gpu(const tr_world *w, const tr_cuda_device *dev, int ok,
                                  const char *where, char *err, size_t errlen)
{
    gpu_choice mine = {ok, w->rank, "", ""};
    memcpy(mine.pci_bus_id, dev->pci_bus_id, sizeof mine.pci_bus_id);
    memcpy(mine.uuid, dev->uuid, sizeof mine.uuid);
    gpu_choice *all = tr_alloc((size_t)w->local_size * sizeof *all, "the node's GPU choices");
    tr_comm_node_allgather(w, &mine, sizeof mine, all);
    int distinct = 0, a = -1, b = -1;
    for (int i = 0; i < w->local_size; i++) {
        if (!all[i].ok)
            continue;
        int first = 1;
        for (int j = 0; j < i; j++)
            if (all[j].ok && same_gpu(&all[j], &all[i])) {
                first = 0;
                if (a < 0)
                    a = j, b = i;
            }
        distinct += first;
    }
    int rc = 0;
    if (a >= 0) {
        snprintf(err, errlen,
                 "%s: [system] device = cuda, but ranks %d and %d on host %s would share one "
                 "GPU (PCI %s): the %d ranks of this node found %d distinct GPU%s. Run one "
                 "rank per GPU: no more ranks per node than GPUs (srun --ntasks-per-node=N "
                 "--gpus-per-task=1, or mpirun --map-by ppr:N:node), or give each rank its "
                 "own GPU through CUDA_VISIBLE_DEVICES",
                 where, all[a].rank, all[b].rank, dev->host, all[a].pci_bus_id, w->local_size,
                 distinct, distinct == 1 ? "" : "s");
        rc = TR_EXIT_USAGE;
    }
    tr_free(all);
    return rc;
}
#endif

int tr_device_select(const tr_deck *d, const tr_world *w)
{
    char where[1400], err[4096] = "";
    if (agree_staged(w, err, sizeof err))
        return TR_EXIT_USAGE;
    if (strcmp(tr_deck_str(d, "system", "device"), "cuda"))
        return 0; /* cpu: main.c has set up the CPU backend */
    tr_deck_where(d, "system", "device", where, sizeof where);
#ifndef TRAINER_HAVE_CUDA
    snprintf(err, sizeof err,
             "%s: [system] device = cuda, but this trainer was built without CUDA: rebuild it "
             "with the CUDA backend, cmake -DTRAINER_CUDA=ON (needs nvcc, cuBLAS and NCCL; "
             "README, Building), or set device = cpu",
             where);
    return tr_comm_agree(w, TR_EXIT_USAGE, err);
#else
    tr_cuda_device dev;
    char why[2048];
    int may_share = g_staged; /* (no NCCL then, which would refuse one device twice) */
    int local_rank = w->local_rank, local_size = w->local_size, gpus;
    if (may_share && (gpus = tr_cuda_device_count(why, sizeof why)) >= 1 && local_size > gpus)
        local_rank %= gpus, local_size = gpus; /* the ranks take the GPUs in turn */
    int rc = tr_cuda_device_choose(local_rank, local_size, &dev, why, sizeof why);
    if (rc)
        snprintf(err, sizeof err, "%s: [system] device = cuda, but %s%s; or set device = cpu",
                 where, why,
                 may_share ? " (with TRAINER_STAGED_COMM=1 ranks share a GPU, which needs its "
                             "compute mode Default, not Exclusive Process: nvidia-smi -c 0)"
                           : "");
    char shared[2048]; /* every rank takes part, whatever its own verdict */
    if (!may_share && check_one_rank_per_gpu(w, &dev, rc == 0, where, shared, sizeof shared) &&
        !rc) {
        rc = TR_EXIT_USAGE;
        snprintf(err, sizeof err, "%s", shared);
    }
    rc = tr_comm_agree(w, rc, err);
    if (rc)
        return rc;
    tr_cuda_init(dev.index); /* the backend's stream and cuBLAS handle, on this GPU */
    if (w->rank == 0) {
        printf("device: cuda, %s (rank 0: %s, device %d of %d, PCI %s, %.0f GiB, host %s)\n",
               may_share ? "ranks may share a GPU (TRAINER_STAGED_COMM=1, for tests)"
                         : "one GPU per rank",
               dev.name, dev.index, dev.visible, dev.pci_bus_id,
               (double)dev.memory_bytes / (1024.0 * 1024.0 * 1024.0), dev.host);
        fflush(stdout);
    }
    return 0;
#endif
}
