// tests/compile_user.cc - a C++ translation unit WITHOUT the implementation (compile matrix).
// Plain C++11: no designated initializers. Linked with compile_impl.c built as C or as C++.
#include <cstdio>
#include <cstring>
#include "hooks.h"

namespace {
int calls = 0;
hk_signal on_batch_end(hk_ctx *ctx, void *user) {
  int *seen = static_cast<int *>(user);
  ++*seen;
  ++calls;
  return ctx->global_step == 3 ? HK_STOP : HK_CONTINUE;
}
struct Counter {
  int n;
  static hk_signal step(hk_ctx *, void *user) { static_cast<Counter *>(user)->n++; return HK_CONTINUE; }
  static void destroy(void *user) { static_cast<Counter *>(user)->n = -1; }
};
}  // namespace

int main() {
  hk_registry *reg = hk_create(nullptr);
  if (!reg) return 1;
  int seen = 0;
  hk_opts opts = {};
  opts.name = "batch_end";
  opts.tier = HK_TIER_MODEL;
  hk_handle h = 0;
  if (hk_on(reg, HK_ON_TRAIN_BATCH_END, on_batch_end, &seen, &opts, &h) != HK_OK || h <= 0) return 2;

  Counter counter = { 0 };
  hk_callback cb = {};
  cb.name = "counter";
  cb.user = &counter;
  cb.on_train_batch_end = &Counter::step;
  cb.destroy = &Counter::destroy;
  if (hk_add_callback(reg, &cb, nullptr, nullptr) != HK_OK) return 3;

  hk_ctx ctx = {};
  hk_signal s = HK_CONTINUE;
  int64_t step = 0;
  for (; step < 10 && s < HK_STOP; step++) {
    ctx.global_step = step;
    s = HK_FIRE(reg, HK_ON_TRAIN_BATCH_END, &ctx);
  }
#ifdef HK_DISABLE
  if (s != HK_CONTINUE || step != 10 || calls != 0 || counter.n != 0) return 4;
#else
  if (s != HK_STOP || step != 4 || calls != 4 || seen != 4 || counter.n != 4) return 4;
#endif
  if (std::strcmp(hk_signal_name(HK_STOP), "stop") != 0) return 5;
  // a bare statement and a cast: both must compile warning-free, enabled and with HK_DISABLE
  HK_FIRE(reg, HK_ON_TRAIN_END, &ctx);
  (void)HK_FIRE(reg, HK_ON_FIT_END, &ctx);
  if (HK_ACTIVE(reg, HK_ON_TRAIN_END)) HK_FIRE(reg, HK_ON_TRAIN_END, &ctx);
  hk_ctx_free(&ctx);
  hk_destroy(reg);
  if (counter.n != -1) return 6; // destroy ran
  std::printf("compile_user.cc (C++%s): ok\n",
#ifdef HK_DISABLE
              ", HK_DISABLE"
#else
              ""
#endif
  );
  return 0;
}
