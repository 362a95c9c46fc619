/* calibrate.h: a measured fp32 peak for model FLOPs utilisation (MFU). */
#ifndef TR_CALIBRATE_H
#define TR_CALIBRATE_H

#include "backend/kernels.h"

/* GFLOP/s of the device's best case, a large square GEMM (1024^3) through the
 * kernel table with all of the rank's threads: the best of a few after a warm-up.
 * Takes about 0.1-0.5 s on a CPU core pair. Collective callers should run it on all
 * ranks at once, so each measures its fair share of a shared node. */
double tr_calibrate_peak_gflops(const tr_kernels *k);

#endif
