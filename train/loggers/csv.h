/* train/loggers/csv.h - csv. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_CSV_H /* part */
#define TRAIN_CSV_H /* part */
#include "file_loggers.h" /* part */

TR__C_BEGIN /* part */
/* csv: metrics.csv and hparams.yaml as Lightning's CSVLogger writes them. Columns: the union of every
   key logged, epoch and step included, sorted by name; one row per record; an empty cell where a
   record lacks a column; numbers in the shortest form that reads back exactly (nan, inf, -inf as
   Python writes them). metrics.csv is made with its first rows (none when nothing is logged, as
   Lightning); rows are appended as whole lines. A new column rewrites the file (atomically: a crash
   leaves the old file or the new one): at once while it is under 16 KiB; in a larger file the rows
   are appended without the new column until the rewrite is paid for (the bytes appended since the
   last rewrite reach half of it), 2 seconds have passed, or the run ends (teardown), so that a new
   column at every record costs work linear in the rows per column instead of rewriting everything
   each time. hparams.yaml: "key: value" lines sorted by key; the spec strings in effect as a list
   under "specs". */
TRAIN_API tr_err tr_csv_logger(hk_registry *reg, const tr_logger_desc *d, hk_handle *out);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
