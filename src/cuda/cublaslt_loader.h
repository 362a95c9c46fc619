/* cublaslt_loader.h: cuBLASLt, loaded on first use (C++, internal to src/cuda).
 *
 * Not linked, for the reason cuBLAS is not (cublas_loader.h): a CPU run of a CUDA
 * build must not map it. tr_cublaslt_load (called when the backend's context is
 * made, after tr_cublas_load) dlopens the library the build found (CMake's
 * CUDA_cublasLt_LIBRARY), and the macros below keep the calls written as
 * cuBLASLt's own. Only the calls of cuda_linear_lt.cu are here. Included by
 * cuda_common.h after cublas_loader.h. */
#ifndef TR_CUBLASLT_LOADER_H
#define TR_CUBLASLT_LOADER_H

#include <cublasLt.h>

typedef struct tr_cublaslt_api {
    decltype(&cublasLtCreate) Create;
    decltype(&cublasLtMatmul) Matmul;
    decltype(&cublasLtMatmulDescCreate) MatmulDescCreate;
    decltype(&cublasLtMatmulDescDestroy) MatmulDescDestroy;
    decltype(&cublasLtMatmulDescSetAttribute) MatmulDescSetAttribute;
    decltype(&cublasLtMatrixLayoutCreate) MatrixLayoutCreate;
    decltype(&cublasLtMatrixLayoutDestroy) MatrixLayoutDestroy;
    decltype(&cublasLtMatmulPreferenceCreate) MatmulPreferenceCreate;
    decltype(&cublasLtMatmulPreferenceDestroy) MatmulPreferenceDestroy;
    decltype(&cublasLtMatmulPreferenceSetAttribute) MatmulPreferenceSetAttribute;
    decltype(&cublasLtMatmulAlgoGetHeuristic) MatmulAlgoGetHeuristic;
} tr_cublaslt_api;

extern tr_cublaslt_api tr_cublaslt;
/* Fatal (with dlerror's reason) when the library or a symbol is missing; once. */
void tr_cublaslt_load(void);

#define cublasLtCreate tr_cublaslt.Create
#define cublasLtMatmul tr_cublaslt.Matmul
#define cublasLtMatmulDescCreate tr_cublaslt.MatmulDescCreate
#define cublasLtMatmulDescDestroy tr_cublaslt.MatmulDescDestroy
#define cublasLtMatmulDescSetAttribute tr_cublaslt.MatmulDescSetAttribute
#define cublasLtMatrixLayoutCreate tr_cublaslt.MatrixLayoutCreate
#define cublasLtMatrixLayoutDestroy tr_cublaslt.MatrixLayoutDestroy
#define cublasLtMatmulPreferenceCreate tr_cublaslt.MatmulPreferenceCreate
#define cublasLtMatmulPreferenceDestroy tr_cublaslt.MatmulPreferenceDestroy
#define cublasLtMatmulPreferenceSetAttribute tr_cublaslt.MatmulPreferenceSetAttribute
#define cublasLtMatmulAlgoGetHeuristic tr_cublaslt.MatmulAlgoGetHeuristic

#endif
