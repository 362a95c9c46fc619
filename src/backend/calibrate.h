/* calibrate.h: a measured fp32 peak for model FLOPs utilisation (MFU). */
#ifndef TR_CALIBRATE_H
#define TR_CALIBRATE_H

#include "backend/kernels.h"

/* GFLOP/s of the device's best case, a large square GEMM (1024^3) through the
 * kernel table with all of the rank's threads: as many as fit in 0.3 s after a
 * warm-up. Collective callers should start it on all ranks at once (after a
 * barrier), so that each measures its share of a shared node over the same span. */
double tr_calibrate_peak_gflops(const tr_kernels *k);

#endif
