/* device_guarded_logits.c: the guarded device's own form of a language model's
 * logits. The kernel table lets each backend keep the logits as it likes
 * (kernels.h, logits_format): the CPU keeps fp32 floats, a GPU the format's 16 bits
 * in bf16/fp16-mixed runs. The guarded device exists to run the device code path on
 * the CPU, so it takes the GPU's form: the model's code for 16-bit logits (their
 * buffer's size, the readers given lfmt, the sampler's download and widening, the
 * pipeline's last stage) then runs in every CPU test run of cpu-guarded, not only on
 * a GPU.
 *
 * The values are the CPU's: the head's fp32 product rounded once to the format,
 * which is what the CPU's readers make of its fp32 logits when they read them, and
 * in backward dlogits rounded to the format, written over the logits, then the
 * CPU's linear backward of that gradient widened to fp32. So a guarded run gives the
 * plain CPU run's losses bit for bit (mpi.guarded_device). The fp32 buffers these
 * two entries need are the kernels' own host memory, as a GPU kernel's registers
 * would be; called between tr_guarded_open and _close like every entry. */
#include "backend/device.h"
#include "backend/lowp_math.h"
#include "backend/transformer_kernels.h"

#include <limits.h>

int tr_guarded_logits_format(int format, int C, int Vl)
{
    (void)C, (void)Vl;
    return tr_is_lowp(format) ? format : TR_PREC_FP32;
}

/* a 16-bit lfmt must be the run's own format: the only 16-bit form handed out */
static int own_16(int format, int lfmt, const char *what)
{
    if (!tr_is_lowp(lfmt))
        return 0;
    if (lfmt != format)
        tr_fatal(TR_EXIT_SOFTWARE, "bug: %s: logits stored in format %d in a run of format %d",
                 what, lfmt, format);
    return 1;
}

void tr_guarded_lm_head_forward(void *logits, const void *inp, const float *w, size_t BT, int C,
                                int Vl, int format, int lfmt, float *scratch)
{
    if (!own_16(format, lfmt, "lm_head_forward")) {
        tr_cpu_lm_head_forward(logits, inp, w, BT, C, Vl, format, lfmt, scratch);
        return;
    }
    if (BT > (size_t)INT_MAX)
        tr_fatal(TR_EXIT_SOFTWARE, "lm_head_forward: %zu rows", BT);
    size_t n = BT * (size_t)(Vl > 0 ? Vl : 0);
    float *prod = tr_alloc((n ? n : 1) * sizeof *prod, "16-bit logits' product");
    tr_cpu_linear_forward_stored(prod, inp, w, NULL, (int)BT, C, Vl, format, scratch);
    tr_cpu_narrow_stored(logits, prod, n, format);
    tr_free(prod);
}

void tr_guarded_xent_linear_backward(float *dinp, float *dw, void *logits, const float *stats,
                                     const int *targets, float scale, size_t BT, int Vl, int v0,
                                     int nreal, const void *inp, const float *w, int C,
                                     int format, int lfmt)
{
    if (!own_16(format, lfmt, "xent_linear_backward")) {
        tr_cpu_xent_linear_backward(dinp, dw, logits, stats, targets, scale, BT, Vl, v0, nreal,
                                    inp, w, C, format, lfmt);
        return;
    }
    if (BT > (size_t)INT_MAX)
        tr_fatal(TR_EXIT_SOFTWARE, "xent_linear_backward: %zu rows", BT);
    /* dlogits over the logits, in 16 bits, as a GPU writes them; then the products
     * on that gradient as stored (the entry widens it into its scratch) */
    tr_cpu_xent_shard_backward(logits, logits, stats, targets, scale, BT, Vl, v0, nreal, format,
                               lfmt);
    size_t n = BT * (size_t)(Vl > 0 ? Vl : 0);
    float *wide = tr_alloc((n ? n : 1) * sizeof *wide, "16-bit dlogits widened");
    tr_cpu_linear_backward_stored_dout(dinp, dw, NULL, logits, inp, w, (int)BT, C, Vl, format,
                                       wide);
    tr_free(wide);
}
