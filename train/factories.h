/* train/factories.h - a run's settings with every battery's spec factory: tr_run_setup, tr_add_factories. A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_FACTORIES_H /* part */
#define TRAIN_FACTORIES_H /* part */
#include "battery.h" /* part */

TR__C_BEGIN /* part */
/* Set the run's settings (d NULL = defaults), register the standard factories (tr_add_factories) and apply
   d->spec; refused during a run. TR_ERR_INVALID naming the field for a bad setting. It comes after the
   batteries it registers: a program that includes train/'s parts includes this one (or train/loop.h) after
   them. */
TRAIN_API tr_err tr_run_setup(hk_registry *reg, const tr_run_desc *d);
/* Every compiled battery's spec factory; a name already registered is kept. The trainer's own (lr_finder)
   tr_init registers. */
TRAIN_API hk_err tr_add_factories(hk_registry *reg);
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* Every standard factory (TR__BATTERIES) but the trainer's (TR__LATE_<NAME>: tr_init's, after it); names
   already registered stay as they are (a registry handed to two trainers, or given the factories before
   tr_init). A battery left out of the build is registered without a constructor (hooks.h then refuses the
   name with this reason). */
#define TR__IF_1(on, off) on
#define TR__IF_0(on, off) off
#define TR__IF(c, on, off) TR__IF_(c, on, off)
#define TR__IF_(c, on, off) TR__IF_##c(on, off)
TRAIN_API hk_err tr_add_factories(hk_registry *reg) {
  hk_err e = HK_OK;
  if (!reg) return HK_ERR_INVALID;
#define TR__X(name, NAME, p, doc) \
  if (!e) { \
    e = TR__IF(TR__ON_##NAME, TR__IF(TR__LATE_##NAME, HK_OK, tr__##p##_factory_add(reg, #name, doc)), \
               hk_factory_add(reg, #name, NULL, 0, NULL, NULL, "train.h's implementation was compiled without it: with TRAIN_NO_" \
                              #NAME ", its group's TRAIN_NO_CALLBACKS or TRAIN_NO_LOGGERS (lr_finder: TRAIN_NO_TRAINER), or " \
                              "TRAIN_ONLY_SPECIFIC_BATTERIES without TRAIN_ENABLE_" #NAME)); \
    if (e == HK_ERR_DUPLICATE) e = HK_OK; \
  }
  TR__BATTERIES(TR__X)
#undef TR__X
  return e;
}

TRAIN_API tr_err tr_run_setup(hk_registry *reg, const tr_run_desc *d) {
  tr_err e = tr__run_settings(reg, d);
  if (e) return e;
  if (tr_add_factories(reg) != HK_OK) return tr__run_refuse(reg, TR_ERR_NOMEM, "tr_run_setup: %s", hk_last_error(reg));
  if (d && d->spec && hk_spec_apply(reg, d->spec) != HK_OK) /* (the settings stay: a spec fixed and given again applies) */
    return tr__run_refuse(reg, TR_ERR_INVALID, "tr_run_setup: the spec: %s", hk_last_error(reg));
  return TR_OK;
}
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
