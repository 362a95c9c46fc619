/* cuda_device.cu: the GPU of each rank, chosen from its rank on the node (see
 * cuda_device.h), with errors that say what to change instead of aborting: they are
 * start-up errors of the job's set-up, agreed on by all ranks (tr_comm_agree). */
#include "cuda/cuda_device.h"
#include "core/error.h"
#include "cuda/cuda_probe.h"

#include <cuda.h> /* CUuuid, CUresult: types only, the driver is not linked */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* " (CUDA_VISIBLE_DEVICES=...)" when it is set, for messages: it explains a count */
static void visible_note(char *out, size_t len)
{
    const char *v = getenv("CUDA_VISIBLE_DEVICES");
    if (v)
        snprintf(out, len, " (CUDA_VISIBLE_DEVICES=%.100s)", v);
    else
        out[0] = '\0';
}

/* The driver's UUID of device `index`, 32 hex digits, or "" where it has none.
 * Through the runtime's driver entry point (the trainer does not link libcuda, so
 * that a CUDA build runs on CPU nodes): cuDeviceGetUuid from CUDA 11.4 on is the
 * MIG-aware one, which names the MIG compute instance a process was given. */
static void device_uuid(int index, char *out, size_t len)
{
    typedef CUresult (*get_uuid_fn)(CUuuid *, CUdevice);
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    CUuuid u;
    out[0] = '\0';
    if (cudaGetDriverEntryPointByVersion("cuDeviceGetUuid", &fn, 11040, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess || !fn) {
        (void)cudaGetLastError();
        return;
    }
    if (((get_uuid_fn)fn)(&u, (CUdevice)index) != CUDA_SUCCESS || len < 33)
        return;
    for (int i = 0; i < 16; i++)
        snprintf(out + 2 * i, len - 2 * (size_t)i, "%02x", (unsigned char)u.bytes[i]);
}

extern "C" int tr_cuda_device_choose(int local_rank, int local_size, tr_cuda_device *dev,
                                     char *err, size_t errlen)
{
    memset(dev, 0, sizeof *dev);
    if (gethostname(dev->host, sizeof dev->host - 1))
        snprintf(dev->host, sizeof dev->host, "(unknown host)");
    char why[512], note[160];
    visible_note(note, sizeof note);
    int n = tr_cuda_device_count(why, sizeof why); /* why: "no usable GPU: <CUDA's reason>" */
    dev->visible = n > 0 ? n : 0;
    if (n < 1) {
        snprintf(err, errlen, "host %s has %s%s", dev->host, why, note);
        return TR_EXIT_USAGE;
    }
    if (n == 1) {
        dev->index = 0; /* its own GPU, or one all ranks share: the caller compares */
    } else if (local_size <= n) {
        dev->index = local_rank;
    } else {
        snprintf(err, errlen,
                 "%d ranks run on host %s, which shows each of them only %d GPUs%s: run one "
                 "rank per GPU, at most %d ranks per node (srun --ntasks-per-node=%d "
                 "--gpus-per-task=1, or mpirun --map-by ppr:%d:node)",
                 local_size, dev->host, n, note, n, n, n);
        return TR_EXIT_USAGE;
    }
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, dev->index);
    if (e == cudaSuccess)
        e = cudaDeviceGetPCIBusId(dev->pci_bus_id, (int)sizeof dev->pci_bus_id, dev->index);
    if (e == cudaSuccess)
        e = cudaSetDevice(dev->index);
    if (e == cudaSuccess)
        e = cudaFree(0); /* makes the context now: a busy or broken GPU says so here */
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(err, errlen, "GPU %d of the %d that host %s shows%s cannot be used: %s (%s)",
                 dev->index, n, dev->host, note, cudaGetErrorString(e), cudaGetErrorName(e));
        return TR_EXIT_USAGE;
    }
    device_uuid(dev->index, dev->uuid, sizeof dev->uuid);
    snprintf(dev->name, sizeof dev->name, "%s", p.name);
    dev->memory_bytes = p.totalGlobalMem;
    return 0;
}
