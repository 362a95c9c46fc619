/* mma_ops.cuh: the GPU's definitions of the primitives attention_mma_kernels.cuh is
 * written against (the CPU test's are validation/unit/warp_emulator.h). mma.sync
 * m16n8k16 with bf16 operands and fp32 accumulators needs compute capability 8.0 or
 * newer, which the build's architectures (80;90 by default) are. */
#ifndef TR_MMA_OPS_CUH
#define TR_MMA_OPS_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

/* d += a b: a 16 x 16 (row-major fragment), b 16 x 8 (column-major fragment), bf16 */
__device__ __forceinline__ void tr_mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* the same on fp16 operands */
__device__ __forceinline__ void tr_mma_16816_f16(float d[4], const uint32_t a[4],
                                                 const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
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

/* ldmatrix .x4.trans: lane 8 i + r gives row r of 8 x 8 bf16 matrix i (16 aligned
 * bytes of shared memory); lane 4 g + t gets matrix i's [2t][g] and [2t+1][g] in
 * r[i]: a B fragment whose k runs down a row-major tile. */
__device__ __forceinline__ void tr_ldmatrix_x4_trans(uint32_t r[4], const uint16_t *row)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(row);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* cp.async of 16 bytes from global to shared memory, bypassing L1 (.cg), or 16 zero
 * bytes where !full (src-size 0: src is not read); both 16-byte aligned. Lands at the
 * cp.async.wait_group that covers its commit group. */
__device__ __forceinline__ void tr_cp_async16(void *dst, const void *src, bool full)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(dst);
    int n = full ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(a), "l"(src), "r"(n)
                 : "memory");
}
__device__ __forceinline__ void tr_cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
/* every committed group but the newest N has landed (this thread's copies) */
template <int N> __device__ __forceinline__ void tr_cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/* lo and hi rounded to fp16 (to nearest even), lo in bits 0-15 */
__device__ __forceinline__ uint32_t tr_pack_f16x2(float lo, float hi)
{
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&v);
}

#define TR_LDS32(p) (*reinterpret_cast<const uint32_t *>(p))
#define TR_STG32(p, v) (*reinterpret_cast<uint32_t *>(p) = (v))
#define TR_STS32(p, v) (*reinterpret_cast<uint32_t *>(p) = (v))

#endif
