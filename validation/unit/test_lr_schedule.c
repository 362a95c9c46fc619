/* test_lr_schedule.c: the learning rate at each step (tr_optim_lr, train/optim.h), in
 * double from the formulas the deck reference states, for 100 steps of 10 warmup:
 *  - warmup: lr (s + 1) / warmup at 0-based step s, reaching lr at its last step;
 *  - constant: lr after it;
 *  - cosine: min_lr + (lr - min_lr) (1 + cos(pi t / T)) / 2 with t = s - warmup and
 *    T = steps - warmup, as PyTorch's CosineAnnealingLR(T_max = T);
 *  - linear: min_lr + (lr - min_lr) (1 - t / T), which at min_lr = 0 is Hugging Face's
 *    get_linear_schedule_with_warmup, lr (steps - s) / (steps - warmup);
 *  - wsd: lr until the last D steps (decay_steps, or a fifth of T rounded up; at most
 *    T), then min_lr + (lr - min_lr) (1 - sqrt(t' / D)) with t' the steps into them;
 *    a longer run of the same decay_steps has the same rates up to its own decay;
 *  - no warmup, a single step, and steps past the end (held at the last value).
 * Within 2 float32 ulps of lr. */
#include "test_util.h"
#include "train/optim.h"

#include <math.h>
#include <string.h>

static double expected(tr_sched_kind k, double lr, double min_lr, long warmup, long total,
                       long decay_steps, long s)
{
    if (warmup > 0 && s < warmup)
        return lr * (double)(s + 1) / (double)warmup;
    if (k == TR_SCHED_CONSTANT)
        return lr;
    if (k == TR_SCHED_WSD) {
        long span = total - warmup > 0 ? total - warmup : 0;
        long D = decay_steps > 0 ? decay_steps : (long)ceil(span / 5.0);
        D = D < span ? D : span;
        if (s < total - D)
            return lr;
        double x = D > 0 ? (double)(s - (total - D)) / (double)D : 1;
        return min_lr + (lr - min_lr) * (1 - sqrt(x > 1 ? 1 : x));
    }
    double T = (double)(total - warmup), t = (double)(s - warmup);
    double x = T > 0 ? (t / T > 1 ? 1 : t / T) : 1;
    if (k == TR_SCHED_LINEAR)
        return min_lr + (lr - min_lr) * (1 - x);
    return min_lr + (lr - min_lr) * (1 + cos(M_PI * x)) / 2;
}

int main(void)
{
    const tr_sched_kind kinds[] = {TR_SCHED_CONSTANT, TR_SCHED_COSINE, TR_SCHED_LINEAR,
                                   TR_SCHED_WSD};
    const char *names[] = {"constant", "cosine", "linear", "wsd"};
    const struct {
        long warmup, total, decay;
        float min_lr;
    } runs[] = {{10, 100, 0, 0.0f}, {10, 100, 0, 6e-5f},  {0, 100, 0, 0.0f},    {0, 1, 0, 0.0f},
                {5, 6, 0, 1e-4f},   {10, 100, 30, 6e-5f}, {10, 100, 500, 0.0f}, {0, 7, 0, 0.0f}};
    for (int k = 0; k < 4; k++)
        for (size_t r = 0; r < sizeof runs / sizeof *runs; r++) {
            tr_optim o;
            memset(&o, 0, sizeof o);
            o.lr = 6e-4f;
            o.min_lr = runs[r].min_lr;
            o.warmup_steps = runs[r].warmup;
            o.total_steps = runs[r].total;
            o.decay_steps = runs[r].decay;
            o.schedule = kinds[k];
            double worst = 0;
            long at = -1;
            for (long s = 0; s < runs[r].total + 3; s++) {
                double e = fabs((double)tr_optim_lr(&o, s) - expected(kinds[k], o.lr, o.min_lr,
                                                                      o.warmup_steps, o.total_steps,
                                                                      o.decay_steps, s));
                if (e > worst)
                    worst = e, at = s;
            }
            CHECK(worst <= 2 * 6e-4 * 0x1p-23,
                  "%s, warmup %ld of %ld, decay %ld, min_lr %g: off by %.3g at step %ld", names[k],
                  runs[r].warmup, runs[r].total, runs[r].decay, (double)runs[r].min_lr, worst, at);
        }
    /* the shapes, on the first run: warmup reaches lr; linear halfway is halfway */
    tr_optim o;
    memset(&o, 0, sizeof o);
    o.lr = 1.0f, o.warmup_steps = 10, o.total_steps = 110, o.schedule = TR_SCHED_LINEAR;
    CHECK(tr_optim_lr(&o, 0) == 0.1f && tr_optim_lr(&o, 9) == 1.0f, "warmup 0.1 .. 1");
    CHECK(tr_optim_lr(&o, 60) == 0.5f, "linear: half at the middle (%g)",
          (double)tr_optim_lr(&o, 60));
    CHECK(tr_optim_lr(&o, 110) == 0.0f && tr_optim_lr(&o, 500) == 0.0f, "linear: 0 at the end");
    /* wsd: 100 steps after the warmup's 10, the default decay the last 20; a quarter of
     * the way into it 1 - sqrt(1/4) = half; a run of 300 with the same decay_steps has the
     * same rates up to step 290, where its own decay starts */
    o.schedule = TR_SCHED_WSD;
    CHECK(tr_optim_lr(&o, 89) == 1.0f && tr_optim_lr(&o, 90) == 1.0f && tr_optim_lr(&o, 91) < 1.0f,
          "wsd: the decay starts after step 90");
    CHECK(tr_optim_lr(&o, 95) == 0.5f, "wsd: half a quarter into the decay (%g)",
          (double)tr_optim_lr(&o, 95));
    CHECK(tr_optim_lr(&o, 110) == 0.0f, "wsd: 0 at the end");
    tr_optim longer = o;
    o.decay_steps = longer.decay_steps = 20;
    longer.total_steps = 310;
    int same = 1;
    for (long s = 0; s < 290; s++)
        same &= tr_optim_lr(&longer, s) == (s < 90 ? tr_optim_lr(&o, s) : 1.0f);
    CHECK(same && tr_optim_lr(&longer, 295) == 0.5f,
          "wsd: a longer run of the same decay_steps continues the curve");
    return tr_test_finish();
}
