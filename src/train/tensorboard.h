/* tensorboard.h: the run's metrics as TensorBoard event files, so that
 * `tensorboard --logdir runs/` plots every run's curves live, as PyTorch Lightning's
 * default logger does, without TensorFlow or protobuf in the trainer.
 *
 * DIR/tensorboard/events.out.tfevents.<seconds>.<host>.<pid>, one file a session,
 * named to sort after the files already there (<seconds> one past theirs if need be):
 * TFRecord framing (length, masked CRC-32C of the length, an Event protobuf, masked
 * CRC-32C of it), the first Event the file version, then a SessionLog START at the
 * session's first step, which makes TensorBoard drop what an earlier session of
 * the run directory logged from that step on (a resumed run's rows replace those
 * after its checkpoint, as in metrics.csv), then one Event a metrics row: scalars
 * tagged train/... and eval/... at the row's step. Rank 0 only. */
#ifndef TR_TENSORBOARD_H
#define TR_TENSORBOARD_H

#include "metrics.h"

#include <stddef.h>
#include <stdint.h>

typedef struct tr_tb tr_tb;

/* Creates DIR/tensorboard and the session's file. first_step: the first step this
 * session trains (resume step + 1). tokens_per_sample > 0: a language model's rows
 * (train/tokens_per_s and eval/perplexity too); loss_scaled: fp16-mixed
 * (train/loss_scale too). NULL with errno. */
tr_tb *tr_tb_open(const char *dir, long first_step, long tokens_per_sample, int loss_scaled);
/* One metrics row as scalars. A write error is reported once (stderr) and ends the
 * file's writing; training goes on. */
void tr_tb_row(tr_tb *tb, const tr_metrics_row *row);
/* The file's path (for messages). */
const char *tr_tb_path(const tr_tb *tb);
void tr_tb_close(tr_tb *tb);

/* CRC-32C (Castagnoli), as TFRecord frames use it before masking. */
uint32_t tr_crc32c(const void *data, size_t n);

#endif
