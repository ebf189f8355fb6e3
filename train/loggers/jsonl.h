/* train/loggers/jsonl.h - jsonl. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_JSONL_H /* part */
#define TRAIN_JSONL_H /* part */
#include "file_loggers.h" /* part */

TR__C_BEGIN /* part */
/* jsonl: metrics.jsonl, one JSON object per line. The first line is {"hparams": {...}} (numbers as
   numbers, the rest as strings, "specs" as a list); then one line per record:
   {"step":49,"epoch":0,"stage":"train","metrics":{"train/loss":0.25}}. NaN and infinities, which
   JSON cannot hold, are written as the strings "NaN", "Infinity" and "-Infinity". */
TRAIN_API tr_err tr_jsonl_logger(hk_registry *reg, const tr_logger_desc *d, hk_handle *out);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
