/* calibrate.c: measures the peak that MFU is reported against (calibrate.h). */
#include "calibrate.h"
#include "core/error.h"
#include "comm/comm.h"

#include <string.h>

double tr_calibrate_peak_gflops(const tr_kernels *k)
{
    enum { N = 1024, REPS = 5 };
    size_t n = (size_t)N * N;
    float *a = tr_alloc(3 * n * sizeof(float), "GEMM calibration");
    float *b = a + n, *c = b + n;
    for (size_t i = 0; i < n; i++) { /* small, exactly representable values */
        a[i] = (float)(i % 7) * 0.125f;
        b[i] = (float)(i % 5) * 0.25f;
    }
    memset(c, 0, n * sizeof(float));
    double best = 1e30;
    for (int r = 0; r <= REPS; r++) {
        double t0 = tr_wtime();
        k->gemm(0, 0, N, N, N, 1.0f, a, N, b, N, 0.0f, c, N);
        double dt = tr_wtime() - t0;
        if (r > 0 && dt < best) /* the first warms caches and thread pools */
            best = dt;
    }
    tr_free(a);
    return 2.0 * N * N * (double)N / best / 1e9;
}
