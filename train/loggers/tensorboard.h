/* train/loggers/tensorboard.h - tensorboard. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_TENSORBOARD_H /* part */
#define TRAIN_TENSORBOARD_H /* part */
#include "file_loggers.h" /* part */

TR__C_BEGIN /* part */
/* tensorboard: events.out.tfevents.<secs>.<host>.<pid>.0, TFRecord-framed Event protos with real
   CRC-32C: a file_version event, the hparams as a text summary (tag "hparams", a Markdown table),
   then per record one event holding every metric as a scalar (tag = the metric's name) and every
   histogram. Look at it with  tensorboard --logdir <save_dir>. */
TRAIN_API tr_err tr_tensorboard_logger(hk_registry *reg, const tr_logger_desc *d, hk_handle *out);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
