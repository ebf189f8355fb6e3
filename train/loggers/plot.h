/* train/loggers/plot.h - plot. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_PLOT_H /* part */
#define TRAIN_PLOT_H /* part */
#include "file_loggers.h" /* part */

TR__C_BEGIN /* part */
TRAIN_API tr_err tr_plot(hk_registry *reg, const tr_plot_desc *d, hk_handle *out);
/* The same plot from a CSV file in metrics.csv's layout (a "step" column and metric columns; empty
   cells are skipped), or with a "job" column instead of "step" (a sweep's summary.csv: x is the job). why (may be NULL) gets the reason on error: TR_ERR_IO, TR_ERR_INVALID. */
TRAIN_API tr_err tr_plot_csv(const char *csv_path, const char *svg_path, const char *metrics, char *why, size_t why_len);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
