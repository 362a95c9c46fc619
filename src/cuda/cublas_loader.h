/* cublas_loader.h: cuBLAS, loaded on first use (C++, internal to src/cuda).
 * cuBLASLt is loaded the same way, by cublaslt_loader.h.
 *
 * Not linked: cuBLAS and cuBLASLt are hundreds of MiB, and the loader maps over
 * 200 MiB of them resident into every process that links them, so each rank of a CPU
 * run of a CUDA build would carry it. tr_cublas_load (called when the backend's
 * context is made) dlopens the library the build found, and the macros below keep
 * the calls written as cuBLAS's own. Included by cuda_common.h after cublas_v2.h. */
#ifndef TR_CUBLAS_LOADER_H
#define TR_CUBLAS_LOADER_H

#include <cublas_v2.h>

/* cublasGemmEx and cublasGemmStridedBatchedEx (mixed precision's tensor-core GEMMs,
 * cuda_gemm.cu): cublas_api.h overloads both in C++ with an older signature (a
 * cudaDataType compute type), so decltype(&name) is ambiguous and the types of the C
 * functions are spelled out here. The static_asserts pick the overload with exactly
 * this type, so a header whose declaration differs fails to compile; their operands
 * are unevaluated, so they do not reference the symbols (the library is dlopened). */
typedef cublasStatus_t (*tr_cublas_gemm_ex_fn)(cublasHandle_t, cublasOperation_t,
                                               cublasOperation_t, int, int, int, const void *,
                                               const void *, cudaDataType, int, const void *,
                                               cudaDataType, int, const void *, void *,
                                               cudaDataType, int, cublasComputeType_t,
                                               cublasGemmAlgo_t);
typedef cublasStatus_t (*tr_cublas_gemm_strided_batched_ex_fn)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
    const void *, cudaDataType, int, long long, const void *, cudaDataType, int, long long,
    const void *, void *, cudaDataType, int, long long, int, cublasComputeType_t,
    cublasGemmAlgo_t);
static_assert(sizeof(static_cast<tr_cublas_gemm_ex_fn>(&cublasGemmEx)) != 0,
              "cublasGemmEx's C declaration");
static_assert(sizeof(static_cast<tr_cublas_gemm_strided_batched_ex_fn>(
                  &cublasGemmStridedBatchedEx)) != 0,
              "cublasGemmStridedBatchedEx's C declaration");

typedef struct tr_cublas_api {
    decltype(&cublasCreate) Create; /* cublas_v2.h maps these names to their _v2 */
    decltype(&cublasSetStream) SetStream;
    decltype(&cublasSetWorkspace) SetWorkspace;
    decltype(&cublasSgemm) Sgemm;
    decltype(&cublasSetMathMode) SetMathMode;
    decltype(&cublasSetAtomicsMode) SetAtomicsMode;
    decltype(&cublasSgemmStridedBatched) SgemmStridedBatched;
    tr_cublas_gemm_ex_fn GemmEx;
    tr_cublas_gemm_strided_batched_ex_fn GemmStridedBatchedEx;
    decltype(&cublasGetStatusString) GetStatusString;
    decltype(&cublasGetStatusName) GetStatusName;
} tr_cublas_api;

extern tr_cublas_api tr_cublas;
/* Fatal (with dlerror's reason) when the library or a symbol is missing; once. */
void tr_cublas_load(void);

#undef cublasCreate
#undef cublasSetStream
#undef cublasSetWorkspace
#undef cublasSgemm
#define cublasCreate tr_cublas.Create
#define cublasSetStream tr_cublas.SetStream
#define cublasSetWorkspace tr_cublas.SetWorkspace
#define cublasSgemm tr_cublas.Sgemm
#define cublasSetMathMode tr_cublas.SetMathMode
#define cublasSetAtomicsMode tr_cublas.SetAtomicsMode
#define cublasSgemmStridedBatched tr_cublas.SgemmStridedBatched
#define cublasGemmEx tr_cublas.GemmEx
#define cublasGemmStridedBatchedEx tr_cublas.GemmStridedBatchedEx
#define cublasGetStatusString tr_cublas.GetStatusString
#define cublasGetStatusName tr_cublas.GetStatusName

#endif
