/* mma_ops.cuh: the GPU's definitions of the primitives attention_mma_kernels.cuh is
 * written against (the CPU test's are validation/unit/warp_emulator.h). mma.sync
 * m16n8k16 with bf16 operands and fp32 accumulators needs compute capability 8.0 or
 * newer, which the build's architectures (80;90 by default) are. */
#ifndef TR_MMA_OPS_CUH
#define TR_MMA_OPS_CUH

#include <cuda_bf16.h>
#include <stdint.h>

/* d += a b: a 16 x 16 (row-major fragment), b 16 x 8 (column-major fragment) */
__device__ __forceinline__ void tr_mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* lo and hi rounded to bf16 (to nearest even), lo in bits 0-15 */
__device__ __forceinline__ uint32_t tr_pack_bf16x2(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

#define TR_LDS32(p) (*reinterpret_cast<const uint32_t *>(p))
#define TR_STS32(p, v) (*reinterpret_cast<uint32_t *>(p) = (v))
#define TR_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]

#endif
