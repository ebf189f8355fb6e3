/* train/factories.h - every battery's spec factory on a registry (tr_add_factories). A part of train.h (make train.h joins the parts) */ /* part */
#ifndef TRAIN_FACTORIES_H /* part */
#define TRAIN_FACTORIES_H /* part */
#include "battery.h" /* part */

TR__C_BEGIN /* part */
TR__C_END /* part */

#ifdef TRAIN_IMPLEMENTATION /* implementation */
TR__C_BEGIN /* part */
/* Every standard factory (TR__BATTERIES); names already registered stay as they are (a registry
   handed to two trainers, or given the factories before tr_init). A battery left out of the build
   is registered without a constructor (hooks.h then refuses the name with this reason). */
#define TR__IF_1(on, off) on
#define TR__IF_0(on, off) off
#define TR__IF(c, on, off) TR__IF_(c, on, off)
#define TR__IF_(c, on, off) TR__IF_##c(on, off)
/* Each battery compiled in defines tr__<p>_factory_add (TR__ADD_OF) in its part, which may come after this one: a
   program that includes train/'s parts names the ones it includes (TRAIN_ONLY_SPECIFIC_BATTERIES and
   TRAIN_ENABLE_<NAME> each, train/battery.h); one named but not included is a tr__<p>_factory_add "used but never
   defined" here. */
#define TR__X(name, NAME, p, doc) TR__IF(TR__ON_##NAME, static hk_err tr__##p##_factory_add(hk_registry *reg, const char *n, const char *d);, )
TR__BATTERIES(TR__X)
#undef TR__X
TRAIN_API hk_err tr_add_factories(hk_registry *reg) {
  hk_err e = HK_OK;
  if (!reg) return HK_ERR_INVALID;
#define TR__X(name, NAME, p, doc) \
  if (!e) { \
    e = TR__IF(TR__ON_##NAME, tr__##p##_factory_add(reg, #name, doc), \
               hk_factory_add(reg, #name, NULL, 0, NULL, NULL, "train.h's implementation was compiled without it: with TRAIN_NO_" \
                              #NAME ", its group's TRAIN_NO_CALLBACKS or TRAIN_NO_LOGGERS (lr_finder: TRAIN_NO_TRAINER), or " \
                              "TRAIN_ONLY_SPECIFIC_BATTERIES without TRAIN_ENABLE_" #NAME)); \
    if (e == HK_ERR_DUPLICATE) e = HK_OK; \
  }
  TR__BATTERIES(TR__X)
#undef TR__X
  return e;
}
TR__C_END /* part */
#endif /* implementation */
#endif /* part */
