/* cublas_loader.h: cuBLAS, loaded on first use (C++, internal to src/cuda).
 *
 * Not linked: cuBLAS and cuBLASLt are hundreds of MiB, and the loader maps over
 * 200 MiB of them resident into every process that links them, so each rank of a CPU
 * run of a CUDA build would carry it. tr_cublas_load (called when the backend's
 * context is made) dlopens the library the build found, and the macros below keep
 * the calls written as cuBLAS's own. Included by cuda_common.h after cublas_v2.h. */
#ifndef TR_CUBLAS_LOADER_H
#define TR_CUBLAS_LOADER_H

#include <cublas_v2.h>

typedef struct tr_cublas_api {
    decltype(&cublasCreate) Create; /* cublas_v2.h maps these names to their _v2 */
    decltype(&cublasSetStream) SetStream;
    decltype(&cublasSgemm) Sgemm;
    decltype(&cublasSetMathMode) SetMathMode;
    decltype(&cublasSetAtomicsMode) SetAtomicsMode;
    decltype(&cublasSgemmStridedBatched) SgemmStridedBatched;
    decltype(&cublasGetStatusString) GetStatusString;
    decltype(&cublasGetStatusName) GetStatusName;
} tr_cublas_api;

extern tr_cublas_api tr_cublas;
/* Fatal (with dlerror's reason) when the library or a symbol is missing; once. */
void tr_cublas_load(void);

#undef cublasCreate
#undef cublasSetStream
#undef cublasSgemm
#define cublasCreate tr_cublas.Create
#define cublasSetStream tr_cublas.SetStream
#define cublasSgemm tr_cublas.Sgemm
#define cublasSetMathMode tr_cublas.SetMathMode
#define cublasSetAtomicsMode tr_cublas.SetAtomicsMode
#define cublasSgemmStridedBatched tr_cublas.SgemmStridedBatched
#define cublasGetStatusString tr_cublas.GetStatusString
#define cublasGetStatusName tr_cublas.GetStatusName

#endif
