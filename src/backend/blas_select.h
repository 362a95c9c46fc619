/* blas_select.h: make sure OpenBLAS runs its fast kernel on this CPU.
 *
 * OpenBLAS picks its kernel when the library loads. Older builds (Debian 12's
 * 0.3.21) do not know recent CPUs and fall back to a generic SSE3 kernel about 5x
 * slower. OPENBLAS_CORETYPE overrides the choice, but only if it is in the
 * environment before the library loads, so the trainer re-executes itself once
 * with it set (before MPI_Init, so the launcher never sees a second process). */
#ifndef TR_BLAS_SELECT_H
#define TR_BLAS_SELECT_H

/* Call first thing in main. May not return (re-exec). Returns the kernel name. */
const char *tr_blas_ensure_fast_kernel(char **argv);
/* One line for the start-up banner: library, kernel, and why it was chosen. */
const char *tr_blas_describe(void);

#endif
