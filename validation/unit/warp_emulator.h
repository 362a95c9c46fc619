/* warp_emulator.h: runs CUDA kernels on the CPU, so that the CPU test suite can prove
 * the index arithmetic, masking and rounding of kernels that only a GPU could
 * otherwise run. It takes kernels written as device code free of CUDA headers
 * (src/cuda/ headers: attention_mma_kernels.cuh, attention_wmma_kernels.cuh,
 * xent_kernels.cuh, gemm_kernels.cuh, norm_kernels.cuh, optim_kernels.cuh,
 * embedding_kernels.cuh, classifier_kernels.cuh, with cuda_launch.cuh's
 * reductions), compiled by g++ as C++.
 *
 * Each CUDA thread of a block is a coroutine with its own stack; one OS
 * thread runs them. A thread runs until it reaches a synchronising operation
 * (__syncthreads, __syncwarp, the shuffles, tr_mma_16816, ldmatrix), where it waits
 * for the
 * others of its warp (or block) to arrive; then all of them go on. The schedule is
 * random from a seed: lanes resume in shuffled order, and between two __syncthreads
 * one warp at a time runs as far as it can, the warps in shuffled order. So a kernel
 * that reads shared memory another thread writes without a barrier between them gets
 * wrong results, or different results from one seed to the next, instead of the right
 * ones by luck. Blocks run one after another.
 *
 * What it models, and what it does not:
 *  - 1-3 dimensional grids and blocks (threadIdx, blockIdx, blockDim, gridDim); warps
 *    are 32 consecutive linear thread ids, as on the GPU;
 *  - mma.sync m16n8k16 (bf16 or fp16 in, fp32 out) by the PTX ISA's fragment layout, given in
 *    attention_mma_kernels.cuh: each lane's accumulators from the whole warp's
 *    fragments, summed in fp32 in k order (the tensor core's order is unspecified);
 *  - __shfl_xor_sync and __shfl_sync of any type up to 8 bytes over the full warp;
 *    __syncthreads over the block; __shared__ variables (one copy: blocks run one at
 *    a time);
 *  - dynamic shared memory: one buffer of exactly the launch's size (128-byte aligned),
 *    so an access past it is a heap overflow that the sanitizer build reports;
 *  - WMMA (nvcuda::wmma, 16 x 16 x 16, 16-bit in, fp32 accumulators): fragments on a
 *    layout of the emulator's own (scrambled, as the GPU's is unspecified), loads,
 *    stores and products as warp collectives that check their arguments agree across
 *    the warp and their pointers' alignment, each lane moving only its own elements
 *    (so a lane's plain access to the tile, unordered by a __syncwarp, can race);
 *    __any_sync, __ballot_sync, __syncthreads_or, __ffs, and atomicAdd and atomicMin on
 *    unsigned;
 *  - ldmatrix .x4.trans as the PTX ISA lays out its fragments, checking that
 *    each row address is 16 aligned bytes of shared memory;
 *  - cp.async of 16 bytes (with zero fill) in commit groups, each copy done only at
 *    the wait_group that covers it, so a tile read before its wait is caught;
 *  - bf16 and fp16 values as their bits, rounded by lowp_math.h (round to nearest
 *    even, as __float2bfloat16_rn and __float2half_rn); __fmul_rn and __fadd_rn as C's
 *    own operations (g++ does not contract them into FMAs for this x86-64 target);
 *  - not: timing, occupancy, register counts, bank conflicts, the memory model beyond
 *    barriers, warp divergence at a collective (reported as a deadlock), or the GPU's
 *    own exp/log (the kernels call tr_expf, the same function on both sides, and logf).
 * Include it first, then the kernels; C++ (g++), not CUDA. */
#ifndef TR_WARP_EMULATOR_H
#define TR_WARP_EMULATOR_H

#include "backend/lowp_math.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <type_traits>
#include <vector>
#include <ucontext.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static /* blocks run one after another: one copy is the block's */

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct float4 {
    float x, y, z, w;
};
struct alignas(8) uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};
struct __nv_bfloat16 {
    uint16_t bits;
};
struct __half {
    uint16_t bits;
};
struct __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
struct __half2 {
    __half x, y;
};
inline uint2 make_uint2(unsigned x, unsigned y) { return uint2{x, y}; }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{tr_f32_to_bf16(f)}; }
inline __half __float2half_rn(float f) { return __half{tr_f32_to_f16(f)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi)
{
    return __nv_bfloat162{__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
}
inline __half2 __floats2half2_rn(float lo, float hi)
{
    return __half2{__float2half_rn(lo), __float2half_rn(hi)};
}
/* the named roundings: C's own float operations, which g++ does not contract here */
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }

/* the running thread's, set before each resume */
inline dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace emu {

enum state { RUNNABLE, AT_WARP, AT_BLOCK, DONE };

struct lane_slot { /* what a lane hands its warp at a collective */
    uint32_t a[4], b[2];
    float c[4];
    unsigned char x[8]; /* a shuffled value's bytes */
    const uint16_t *row;  /* the row this lane gives an ldmatrix */
    const void *frag[3];  /* a WMMA collective's fragments (or memory) and stride */
    unsigned ldm;
};

/* A cp.async a thread issued: done (16 bytes copied, or zeros) only at the
 * cp.async.wait_group that covers its group, the latest moment the GPU may do it, so
 * a read of the tile before that wait sees the 0xff fill, not the data. */
struct async_copy {
    void *dst;
    const void *src;
    bool full;
    long group; /* 0: not yet committed */
};

/* ---- coroutines ----------------------------------------------------------------
 * On x86-64 a switch is a few instructions of our own (switch_stack): the registers
 * the ABI asks a callee to keep, MXCSR and the x87 control word pushed on the old
 * stack, the stack pointer swapped, the same popped from the new one. glibc's
 * swapcontext also saves the signal mask, a system call each way, which made the
 * attention kernels' thousands of shuffles a thread cost a millisecond. Under
 * AddressSanitizer, which follows stack switches only through swapcontext (it
 * intercepts it), and on other machines, the ucontext calls remain. */
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__)
#define TR_EMU_FAST_SWITCH 1
struct fiber {
    void *sp; /* where switch_stack left its registers */
};
/* Saves this stack's state, stores its stack pointer in *from, resumes `to`. */
__attribute__((naked, noinline)) static void switch_stack(void ** /*from: rdi*/, void * /*to: rsi*/)
{
    __asm__("pushq %rbp\n\t"
            "pushq %rbx\n\t"
            "pushq %r12\n\t"
            "pushq %r13\n\t"
            "pushq %r14\n\t"
            "pushq %r15\n\t"
            "subq $8, %rsp\n\t"
            "stmxcsr (%rsp)\n\t"
            "fnstcw 4(%rsp)\n\t"
            "movq %rsp, (%rdi)\n\t"
            "movq %rsi, %rsp\n\t"
            "ldmxcsr (%rsp)\n\t"
            "fldcw 4(%rsp)\n\t"
            "addq $8, %rsp\n\t"
            "popq %r15\n\t"
            "popq %r14\n\t"
            "popq %r13\n\t"
            "popq %r12\n\t"
            "popq %rbx\n\t"
            "popq %rbp\n\t"
            "ret\n\t");
}
/* A new stack's first return lands here, with the function to run in r12 (set up by
 * start_threads) and the stack 16-byte aligned; the function never returns. */
__attribute__((naked, noinline)) static void fiber_start()
{
    __asm__("andq $-16, %rsp\n\t"
            "callq *%r12\n\t"
            "ud2\n\t");
}
#else
typedef ucontext_t fiber;
#endif

struct machine {
    int nthreads = 0;
    std::vector<fiber> ctx;
    std::vector<state> st;
    std::vector<char> stacks;
    std::vector<lane_slot> slots;
    std::vector<std::vector<async_copy>> copies; /* each thread's, in flight */
    std::vector<long> groups;                    /* each thread's groups committed */
    size_t smem_bytes = 0;
    unsigned char *smem = nullptr;        /* exactly the launch's bytes (aligned new[]) */
    fiber sched;
    int current = 0;
    uint64_t rng = 0x9e3779b97f4a7c15ull; /* the schedule's random state (shuffle_first) */
    std::function<void()> body;
    long switches = 0;
};
inline machine M;
static const size_t STACK = 64 * 1024;
static const size_t SMEM_ALIGN = 128; /* the GPU's dynamic shared memory is at least this */

inline void wait(state s)
{
    M.st[M.current] = s;
#ifdef TR_EMU_FAST_SWITCH
    switch_stack(&M.ctx[M.current].sp, M.sched.sp);
#else
    swapcontext(&M.ctx[M.current], &M.sched);
#endif
}

/* the scheduler's turn to thread t, until it waits or ends */
inline void resume(int t)
{
#ifdef TR_EMU_FAST_SWITCH
    switch_stack(&M.sched.sp, M.ctx[t].sp);
#else
    swapcontext(&M.sched, &M.ctx[t]);
#endif
}

inline void entry()
{
    M.body();
    M.st[M.current] = DONE;
#ifdef TR_EMU_FAST_SWITCH
    switch_stack(&M.ctx[M.current].sp, M.sched.sp); /* never resumed */
    __builtin_unreachable();
#endif
    /* (ucontext: returns to uc_link, the scheduler) */
}

/* The first n of v in a random order (Fisher-Yates on xorshift64*): the schedule's
 * only randomness. std::shuffle on std::mt19937 cost a tenth of an emulated kernel's
 * time. */
/* A schedule of its own from each seed (tests run kernels under several). */
inline void seed_schedule(uint64_t seed) { M.rng = (seed + 1) * 0x9e3779b97f4a7c15ull | 1; }

inline void shuffle_first(std::vector<int> &v, int n)
{
    for (int i = n - 1; i > 0; i--) {
        M.rng ^= M.rng >> 12;
        M.rng ^= M.rng << 25;
        M.rng ^= M.rng >> 27;
        uint32_t r = (uint32_t)((M.rng * 0x2545f4914f6cdd1dull) >> 32);
        int j = (int)(((uint64_t)r * (uint64_t)(i + 1)) >> 32);
        std::swap(v[i], v[j]);
    }
}

/* Whether the warp's 32 lanes all wait at a collective; if so they go on. */
inline bool release_warp(int w)
{
    for (int l = 0; l < 32; l++)
        if (M.st[32 * w + l] != AT_WARP)
            return false;
    for (int l = 0; l < 32; l++)
        M.st[32 * w + l] = RUNNABLE;
    return true;
}

/* Runs warp w's lanes, in shuffled order, until none can go on: all have exited or
 * wait at __syncthreads. */
inline void run_warp(int w, std::vector<int> &order)
{
    for (;;) {
        release_warp(w);
        int n = 0;
        for (int l = 0; l < 32; l++)
            if (M.st[32 * w + l] == RUNNABLE)
                order[n++] = 32 * w + l;
        if (n == 0)
            return;
        shuffle_first(order, n);
        for (int i = 0; i < n; i++) {
            M.current = order[i];
            unsigned id = (unsigned)order[i];
            threadIdx = dim3(id % blockDim.x, id / blockDim.x % blockDim.y,
                             id / (blockDim.x * blockDim.y));
            M.switches++;
            resume(order[i]);
        }
    }
}

/* A fresh coroutine for every thread of the block, each to start at entry(). Its own
 * function: getcontext returns twice, which would make the caller's locals suspect. */
__attribute__((noinline)) inline void start_threads()
{
#ifdef TR_EMU_FAST_SWITCH
    uint32_t mxcsr; /* this thread's floating-point control words, for every fiber */
    uint16_t x87;
    __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(x87));
    uint64_t control = mxcsr | (uint64_t)x87 << 32;
#endif
    for (int t = 0; t < M.nthreads; t++) {
#ifdef TR_EMU_FAST_SWITCH
        /* the frame switch_stack pops: control words, r15, r14, r13, r12 = entry,
         * rbx, rbp, and the return address fiber_start, 64 bytes below the top */
        uintptr_t top = (uintptr_t)&M.stacks[(size_t)(t + 1) * STACK] & ~(uintptr_t)15;
        uint64_t *frame = (uint64_t *)(top - 64);
        frame[0] = control;
        frame[1] = frame[2] = frame[3] = 0;
        frame[4] = (uint64_t)(uintptr_t)&entry;
        frame[5] = frame[6] = 0;
        frame[7] = (uint64_t)(uintptr_t)&fiber_start;
        M.ctx[t].sp = frame;
#else
        getcontext(&M.ctx[t]);
        M.ctx[t].uc_stack.ss_sp = &M.stacks[(size_t)t * STACK];
        M.ctx[t].uc_stack.ss_size = STACK;
        M.ctx[t].uc_link = &M.sched;
        makecontext(&M.ctx[t], entry, 0);
#endif
        M.st[t] = RUNNABLE;
        M.copies[t].clear(); /* the last block's unwaited copies: never landed */
        M.groups[t] = 0;
    }
}

/* Runs body() as every thread of a `grid` of `block`s (whole warps), with `smem` bytes
 * of dynamic shared memory (all bits set first: NaN as floats, so a read before a
 * write shows). Between two __syncthreads, one warp at a time runs as far as it can,
 * the warps in a random order: the schedule that most separates warps, so a warp that
 * overwrites a tile another still reads (a missing barrier) is caught. */
inline void launch(dim3 grid, dim3 block, size_t smem, std::function<void()> body)
{
    int threads = (int)(block.x * block.y * block.z);
    if (threads % 32) {
        fprintf(stderr, "warp_emulator: %d threads is not whole warps\n", threads);
        exit(1);
    }
    int nwarps = threads / 32;
    M.nthreads = threads;
    M.ctx.assign(threads, fiber{});
    M.st.assign(threads, RUNNABLE);
    if (M.stacks.size() < (size_t)threads * STACK)
        M.stacks.resize((size_t)threads * STACK);
    M.slots.assign(threads, lane_slot{});
    M.copies.assign(threads, {});
    M.groups.assign(threads, 0);
    M.smem_bytes = smem;
    M.body = std::move(body);
    std::vector<int> order(32), warps(nwarps);
    ::operator delete[](M.smem, std::align_val_t(SMEM_ALIGN));
    M.smem = static_cast<unsigned char *>(
        ::operator new[](smem > 0 ? smem : 1, std::align_val_t(SMEM_ALIGN)));
    blockDim = block;
    gridDim = grid;
    for (unsigned bz = 0; bz < grid.z; bz++)
        for (unsigned by = 0; by < grid.y; by++)
            for (unsigned bx = 0; bx < grid.x; bx++) {
                memset(M.smem, 0xff, smem);
                blockIdx = dim3(bx, by, bz);
                start_threads();
                for (;;) {
                    for (int w = 0; w < nwarps; w++)
                        warps[w] = w;
                    shuffle_first(warps, nwarps);
                    for (int w : warps)
                        run_warp(w, order);
                    /* every warp is stuck: at __syncthreads, exited, or at different
                     * collectives */
                    int live = 0, at_block = 0;
                    for (int t = 0; t < threads; t++) {
                        live += M.st[t] != DONE;
                        at_block += M.st[t] == AT_BLOCK;
                    }
                    if (live == 0)
                        break;
                    if (at_block != live) {
                        fprintf(stderr, "warp_emulator: block (%u, %u, %u) deadlocks (threads "
                                        "wait at different collectives)\n", bx, by, bz);
                        exit(1);
                    }
                    for (int t = 0; t < threads; t++)
                        if (M.st[t] == AT_BLOCK)
                            M.st[t] = RUNNABLE;
                }
            }
}
inline void launch(unsigned grid, int threads, size_t smem, std::function<void()> body)
{
    launch(dim3(grid), dim3((unsigned)threads), smem, std::move(body));
}

inline lane_slot *warp_slots() { return &M.slots[M.current & ~31]; }

} /* namespace emu */

inline void __syncthreads() { emu::wait(emu::AT_BLOCK); }

namespace emu {
/* Every lane hands over v and gets lane src's */
template <typename T> inline T shuffle(T v, int src)
{
    static_assert(sizeof(T) <= sizeof(lane_slot::x), "shuffled type too large");
    lane_slot *w = warp_slots();
    memcpy(w[M.current & 31].x, &v, sizeof v);
    wait(AT_WARP);
    T r;
    memcpy(&r, w[src].x, sizeof r);
    wait(AT_WARP); /* all read before any lane writes its next value */
    return r;
}
} /* namespace emu */

template <typename T> inline T __shfl_xor_sync(unsigned mask, T v, int m)
{
    (void)mask;
    return emu::shuffle(v, (emu::M.current & 31) ^ m);
}
/* lane src's value (src taken modulo 32, as CUDA does for width 32) */
template <typename T> inline T __shfl_sync(unsigned mask, T v, int src)
{
    (void)mask;
    return emu::shuffle(v, src & 31);
}

/* CUDA's integer min and max */
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    (void)mask;
    emu::wait(emu::AT_WARP);
}

/* bf16 value k of a packed pair (k = 0: bits 0-15) */
inline float emu_bf16(uint32_t w, int k) { return tr_bf16_to_f32((uint16_t)(w >> (16 * k))); }

/* fp16 value k of a packed pair */
inline float emu_f16(uint32_t w, int k) { return tr_f16_to_f32((uint16_t)(w >> (16 * k))); }

namespace emu {
/* mma.sync m16n8k16 with fp32 accumulators, the 16-bit operands decoded by `value` */
inline void mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2],
                      float (*value)(uint32_t, int))
{
    int lane = emu::M.current & 31, g = lane / 4, t = lane % 4;
    emu::lane_slot *w = emu::warp_slots();
    memcpy(w[lane].a, a, sizeof w[lane].a);
    memcpy(w[lane].b, b, sizeof w[lane].b);
    emu::wait(emu::AT_WARP);
    float out[4];
    for (int e = 0; e < 4; e++) {
        int row = g + 8 * (e >> 1), col = 2 * t + (e & 1);
        float acc = d[e];
        for (int k = 0; k < 16; k++) {
            /* A[row][k]: lane 4 (row % 8) + (k % 8) / 2, register (row >= 8) + 2 (k >= 8) */
            const emu::lane_slot &la = w[4 * (row % 8) + (k % 8) / 2];
            float av = value(la.a[(row >= 8) + 2 * (k >= 8)], k % 2);
            /* B[k][col]: lane 4 col + (k % 8) / 2, register (k >= 8) */
            const emu::lane_slot &lb = w[4 * col + (k % 8) / 2];
            float bv = value(lb.b[k >= 8], k % 2);
            acc += av * bv;
        }
        out[e] = acc;
    }
    emu::wait(emu::AT_WARP);
    memcpy(d, out, sizeof out);
}
} /* namespace emu */

inline void tr_mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    emu::mma_16816(d, a, b, emu_bf16);
}
inline void tr_mma_16816_f16(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    emu::mma_16816(d, a, b, emu_f16);
}

inline uint32_t tr_pack_bf16x2(float lo, float hi)
{
    return (uint32_t)tr_f32_to_bf16(lo) | (uint32_t)tr_f32_to_bf16(hi) << 16;
}
inline uint32_t tr_pack_f16x2(float lo, float hi)
{
    return (uint32_t)tr_f32_to_f16(lo) | (uint32_t)tr_f32_to_f16(hi) << 16;
}

inline uint32_t TR_LDS32(const uint16_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}
inline void TR_STS32(uint16_t *p, uint32_t v) { memcpy(p, &v, sizeof v); }

inline void TR_STG32(uint16_t *p, uint32_t v) { memcpy(p, &v, sizeof v); }

#define TR_DYNAMIC_SMEM(name) unsigned char *name = emu::M.smem

namespace emu {
/* Whether [p, p + n) lies in the launch's dynamic shared memory */
inline bool in_smem(const void *p, size_t n)
{
    const unsigned char *c = (const unsigned char *)p;
    return c >= M.smem && c + n <= M.smem + M.smem_bytes;
}

/* ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16: lane 8 i + r gives the address of
 * row r of 8 x 8 matrix i (8 bf16, 16-byte aligned, in shared memory); lane 4 g + t
 * gets in r[i] matrix i's elements [2t][g] and [2t+1][g]. */
inline void ldmatrix_trans(uint32_t r[4], const uint16_t *row)
{
    int lane = M.current & 31, g = lane / 4, t = lane % 4;
    if ((uintptr_t)row % 16 || !in_smem(row, 16)) {
        fprintf(stderr, "warp_emulator: ldmatrix row %p is not 16 aligned bytes of shared "
                        "memory\n", (const void *)row);
        exit(1);
    }
    lane_slot *w = warp_slots();
    w[lane].row = row;
    wait(AT_WARP);
    uint32_t out[4];
    for (int i = 0; i < 4; i++) {
        uint16_t lo = w[8 * i + 2 * t].row[g], hi = w[8 * i + 2 * t + 1].row[g];
        out[i] = (uint32_t)lo | (uint32_t)hi << 16;
    }
    wait(AT_WARP); /* all read before any lane names its next row */
    memcpy(r, out, sizeof out);
}
} /* namespace emu */

inline void tr_ldmatrix_x4_trans(uint32_t r[4], const uint16_t *row)
{
    emu::ldmatrix_trans(r, row);
}

/* cp.async.cg.shared.global of 16 bytes (full) or 16 zero bytes (src-size 0): both
 * addresses 16-byte aligned, dst in shared memory. Done at the covering wait. */
inline void tr_cp_async16(void *dst, const void *src, bool full)
{
    if ((uintptr_t)dst % 16 || (uintptr_t)src % 16 || !emu::in_smem(dst, 16)) {
        fprintf(stderr, "warp_emulator: cp.async %p <- %p: not 16-byte aligned, or the "
                        "destination is not shared memory\n", dst, src);
        exit(1);
    }
    emu::M.copies[emu::M.current].push_back({dst, src, full, 0});
}
inline void tr_cp_async_commit()
{
    long g = ++emu::M.groups[emu::M.current];
    for (emu::async_copy &c : emu::M.copies[emu::M.current])
        if (c.group == 0)
            c.group = g;
}
/* cp.async.wait_group N: every committed group but the newest N has landed */
template <int N> inline void tr_cp_async_wait()
{
    std::vector<emu::async_copy> &v = emu::M.copies[emu::M.current];
    long upto = emu::M.groups[emu::M.current] - N;
    size_t keep = 0;
    for (size_t i = 0; i < v.size(); i++) {
        if (v[i].group != 0 && v[i].group <= upto) {
            if (v[i].full)
                memcpy(v[i].dst, v[i].src, 16);
            else
                memset(v[i].dst, 0, 16);
        } else {
            v[keep++] = v[i];
        }
    }
    v.resize(keep);
}

/* __any_sync over the full warp: whether any lane's predicate is true */
inline int __any_sync(unsigned mask, int pred)
{
    (void)mask;
    emu::lane_slot *w = emu::warp_slots();
    w[emu::M.current & 31].x[0] = pred != 0;
    emu::wait(emu::AT_WARP);
    int any = 0;
    for (int l = 0; l < 32; l++)
        any |= w[l].x[0];
    emu::wait(emu::AT_WARP); /* all read before any lane writes its next value */
    return any;
}

/* __ballot_sync over the full warp: bit l set where lane l's predicate is true */
inline unsigned __ballot_sync(unsigned mask, int pred)
{
    (void)mask;
    emu::lane_slot *w = emu::warp_slots();
    w[emu::M.current & 31].x[0] = pred != 0;
    emu::wait(emu::AT_WARP);
    unsigned bits = 0;
    for (int l = 0; l < 32; l++)
        bits |= (unsigned)w[l].x[0] << l;
    emu::wait(emu::AT_WARP);
    return bits;
}

/* __syncthreads_or: a barrier that also tells every thread whether any thread of the
 * block had a true predicate */
inline int __syncthreads_or(int pred)
{
    emu::M.slots[emu::M.current].x[0] = pred != 0;
    __syncthreads();
    int any = 0;
    for (int t = 0; t < emu::M.nthreads; t++)
        any |= emu::M.slots[t].x[0];
    __syncthreads(); /* all read before any thread writes its slot again */
    return any;
}

/* 1 + the index of the lowest set bit, 0 for none */
inline int __ffs(int x) { return __builtin_ffs(x); }

/* One OS thread runs every CUDA thread and switches only at the collectives above, so
 * a read-modify-write is atomic as it stands. An integer add: exact in any order. */
inline unsigned atomicAdd(unsigned *address, unsigned val)
{
    unsigned old = *address;
    *address = old + val;
    return old;
}
/* An integer minimum: the same answer in any order. */
inline unsigned atomicMin(unsigned *address, unsigned val)
{
    unsigned old = *address;
    *address = old < val ? old : val;
    return old;
}

/* ---- WMMA ------------------------------------------------------------------------
 * A 16 x 16 fragment's 256 elements, 8 a lane. Which lane holds which element the GPU
 * leaves unspecified, and the kernels never ask; the emulator scrambles them (element
 * e = 16 row + column is slot p % 8 of lane p / 8, p = 37 e + 11 mod 256), so that a
 * kernel that read a fragment's x[] as if it knew would get wrong results. */
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int m, int n, int k, typename T, typename Layout = void>
struct fragment {
    static_assert(m == 16 && n == 16 && k == 16, "the emulator has the 16 x 16 x 16 shape only");
    static const int num_elements = 8;
    T x[8];
};
} /* namespace wmma */
} /* namespace nvcuda */

namespace emu {
/* Element (row, column) of slot s of this lane, for a 16 x 16 fragment */
inline void wmma_element(int s, int &row, int &col)
{
    int p = 8 * (M.current & 31) + s, e = (p + 245) * 173 & 255; /* 173 = 1 / 37, 245 = -11 */
    row = e / 16;
    col = e % 16;
}
/* The slot and lane holding element (row, column) */
inline void wmma_owner(int row, int col, int &lane, int &s)
{
    int p = (37 * (16 * row + col) + 11) & 255;
    lane = p / 8;
    s = p % 8;
}
inline float wmma_value(float v) { return v; }
inline float wmma_value(__nv_bfloat16 v) { return tr_bf16_to_f32(v.bits); }
inline float wmma_value(__half v) { return tr_f16_to_f32(v.bits); }
inline void wmma_set(float &d, float v) { d = v; }
inline void wmma_set(__nv_bfloat16 &d, float v) { d = __float2bfloat16_rn(v); }
inline void wmma_set(__half &d, float v) { d = __half{tr_f32_to_f16(v)}; }

/* A load's or a store's arrival: every lane of the warp names the same memory and
 * stride (the GPU requires it), 32-byte aligned, the stride a multiple of 16 bytes */
inline void wmma_arrive(const char *what, const void *p, unsigned ldm, size_t elem)
{
    lane_slot *w = warp_slots();
    w[M.current & 31].frag[0] = p;
    w[M.current & 31].ldm = ldm;
    wait(AT_WARP);
    for (int l = 0; l < 32; l++)
        if (w[l].frag[0] != p || w[l].ldm != ldm) {
            fprintf(stderr, "warp_emulator: %s: the warp's lanes name different memory or "
                            "strides\n", what);
            exit(1);
        }
    wait(AT_WARP); /* all checked before any lane names its next collective's */
    if ((uintptr_t)p % 32 || ldm * elem % 16) {
        fprintf(stderr, "warp_emulator: %s at %p, stride %u: not 32-byte aligned, or the "
                        "stride not a multiple of 16 bytes\n", what, p, ldm);
        exit(1);
    }
}
/* Element (row, column) of a matrix at p, stride ldm, laid out row- or column-major */
template <typename T> inline T &wmma_at(T *p, unsigned ldm, bool row_major, int row, int col)
{
    return row_major ? p[(size_t)row * ldm + col] : p[(size_t)col * ldm + row];
}
template <typename L> constexpr bool wmma_row_major() { return std::is_same<L, nvcuda::wmma::row_major>::value; }
} /* namespace emu */

namespace nvcuda {
namespace wmma {
template <typename Use, typename T, typename L, typename E>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, L> &f, E v)
{
    for (int s = 0; s < 8; s++)
        emu::wmma_set(f.x[s], (float)v);
}

/* matrix_a / matrix_b: the layout is the fragment's */
template <typename Use, typename T, typename L>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm)
{
    static_assert(!std::is_same<Use, accumulator>::value, "an accumulator's load names its layout");
    emu::wmma_arrive("load_matrix_sync", p, ldm, sizeof(T));
    for (int s = 0; s < 8; s++) {
        int r, c;
        emu::wmma_element(s, r, c);
        f.x[s] = emu::wmma_at(p, ldm, emu::wmma_row_major<L>(), r, c);
    }
}
template <typename T>
inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, T, void> &f, const T *p,
                             unsigned ldm, layout_t layout)
{
    emu::wmma_arrive("load_matrix_sync", p, ldm, sizeof(T));
    for (int s = 0; s < 8; s++) {
        int r, c;
        emu::wmma_element(s, r, c);
        f.x[s] = emu::wmma_at(p, ldm, layout == mem_row_major, r, c);
    }
}
template <typename T>
inline void store_matrix_sync(T *p, const fragment<accumulator, 16, 16, 16, T, void> &f,
                              unsigned ldm, layout_t layout)
{
    emu::wmma_arrive("store_matrix_sync", p, ldm, sizeof(T));
    for (int s = 0; s < 8; s++) {
        int r, c;
        emu::wmma_element(s, r, c);
        emu::wmma_at(p, ldm, layout == mem_row_major, r, c) = f.x[s];
    }
}

/* d = a b + c: each element of d the fp32 sum, in k order, of c's and the 16
 * products (the tensor core's order is unspecified) */
template <typename T, typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float, void> &d,
                     const fragment<matrix_a, 16, 16, 16, T, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, T, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float, void> &c)
{
    typedef fragment<matrix_a, 16, 16, 16, T, LA> fa;
    typedef fragment<matrix_b, 16, 16, 16, T, LB> fb;
    emu::lane_slot *w = emu::warp_slots();
    w[emu::M.current & 31].frag[0] = &a;
    w[emu::M.current & 31].frag[1] = &b;
    emu::wait(emu::AT_WARP);
    float out[8];
    for (int s = 0; s < 8; s++) {
        int r, col, lane, slot;
        emu::wmma_element(s, r, col);
        float acc = c.x[s];
        for (int k = 0; k < 16; k++) {
            emu::wmma_owner(r, k, lane, slot);
            float av = emu::wmma_value(static_cast<const fa *>(w[lane].frag[0])->x[slot]);
            emu::wmma_owner(k, col, lane, slot);
            float bv = emu::wmma_value(static_cast<const fb *>(w[lane].frag[1])->x[slot]);
            acc += av * bv;
        }
        out[s] = acc;
    }
    emu::wait(emu::AT_WARP); /* all read before any lane changes its fragments */
    for (int s = 0; s < 8; s++)
        d.x[s] = out[s];
}
} /* namespace wmma */
} /* namespace nvcuda */

#endif
