/* calibrate.c: measures the peak that MFU is reported against (calibrate.h). */
#include "calibrate.h"
#include "core/error.h"
#include "comm/comm.h"

#include <string.h>

double tr_calibrate_peak_gflops(const tr_kernels *k)
{
    enum { N = 1024 };
    const double window = 0.3; /* seconds of GEMMs after the warm-up */
    size_t n = (size_t)N * N;
    float *a = tr_alloc(3 * n * sizeof(float), "GEMM calibration");
    float *b = a + n, *c = b + n;
    for (size_t i = 0; i < n; i++) { /* small, exactly representable values */
        a[i] = (float)(i % 7) * 0.125f;
        b[i] = (float)(i % 5) * 0.25f;
    }
    memset(c, 0, n * sizeof(float));
    k->gemm(0, 0, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N); /* warms caches and threads */
    /* as many GEMMs as fit in the window: ranks that share a node run theirs over
     * the same span of time, so each measures its share, not the idle machine */
    long count = 0;
    double t0 = tr_wtime(), dt;
    do {
        k->gemm(0, 0, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
        count++;
        dt = tr_wtime() - t0;
    } while (dt < window);
    tr_free(a);
    return 2.0 * N * N * (double)N * count / dt / 1e9;
}
