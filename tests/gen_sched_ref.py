#!/usr/bin/env python3
"""Reference learning-rate sequences from PyTorch's own schedulers, for tests/test_train.c
(test_schedule_torch_ref). Run once with torch installed (CPU is enough):

    python3 tests/gen_sched_ref.py > tests/sched_ref.h

Each case is a torch.optim.lr_scheduler object (or a SequentialLR of them: train.h's warmup is
LinearLR(1/w -> 1 over w-1 steps)) stepped once per scheduler step; the table holds the lr of each step
before scheduler.step(), i.e. what train.h's tr_sched_lr gives for t = 0, 1, 2, ...  Only wsd's 1-sqrt
decay has no torch class: it is LambdaLR with Hugging Face's get_wsd_schedule formula.
"""
import math
import sys

import torch
from torch.optim.lr_scheduler import (ExponentialLR, LambdaLR, LinearLR, OneCycleLR,
                                      ReduceLROnPlateau, SequentialLR, ConstantLR, CosineAnnealingLR)

BASE = 0.1


def opt(lr=BASE):
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)


def seq(make, n):
    o = opt()
    s = make(o)
    out = []
    for _ in range(n):
        out.append(o.param_groups[0]["lr"])
        o.step()
        s.step()
    return out


def warm(o, w):  # train.h's warmup: (t+1)/w for t < w
    return LinearLR(o, start_factor=1.0 / w, end_factor=1.0, total_iters=w - 1)


def then(o, w, sched):
    return SequentialLR(o, [warm(o, w), sched], milestones=[w])


CASES = []  # (name, train.h's spec string (tr_sched_parse), steps, values)


def case(name, c_init, n, make):
    CASES.append((name, c_init, n, seq(make, n)))


# linear decay to zero (Hugging Face's default), and to a floor, with warmup
case("linear", "linear(total=20)", 24,
     lambda o: LinearLR(o, start_factor=1.0, end_factor=0.0, total_iters=20))
case("linear_warmup_min", "linear(warmup=5, total=30, min_factor=0.1)", 34,
     lambda o: then(o, 5, LinearLR(o, start_factor=1.0, end_factor=0.1, total_iters=25)))
# exponential, and with warmup
case("exponential", "exponential(gamma=0.9)", 40, lambda o: ExponentialLR(o, gamma=0.9))
case("exponential_warmup", "exponential(gamma=0.95, warmup=4)", 30,
     lambda o: then(o, 4, ExponentialLR(o, gamma=0.95)))
# one-cycle: cos and linear, two and three phases, max_lr given or optim.lr
case("onecycle", "onecycle(total=50)", 50,
     lambda o: OneCycleLR(o, max_lr=BASE, total_steps=50, cycle_momentum=False))
case("onecycle_linear", "onecycle(total=40, max_lr=0.5, pct_start=0.25, anneal=linear, "
     "div_factor=10, final_div_factor=100)", 40,
     lambda o: OneCycleLR(o, max_lr=0.5, total_steps=40, pct_start=0.25, anneal_strategy="linear",
                          div_factor=10, final_div_factor=100, cycle_momentum=False))
case("onecycle_three", "onecycle(total=60, pct_start=0.2, three_phase=true)", 60,
     lambda o: OneCycleLR(o, max_lr=BASE, total_steps=60, pct_start=0.2, three_phase=True, cycle_momentum=False))


# warmup-stable-decay: warmup, constant, then the decay (cos, linear) down to min_factor
def wsd(o, w, stable, decay, last):
    return SequentialLR(o, [warm(o, w), ConstantLR(o, factor=1.0, total_iters=0), last], milestones=[w, w + stable])


case("wsd_cos", "wsd(warmup=5, total=40, decay=10, min_factor=0.1)", 40,
     lambda o: wsd(o, 5, 25, 10, CosineAnnealingLR(o, T_max=10, eta_min=BASE * 0.1)))
case("wsd_linear", "wsd(warmup=3, total=30, decay=12, anneal=linear)", 30,
     lambda o: wsd(o, 3, 15, 12, LinearLR(o, start_factor=1.0, end_factor=0.0, total_iters=12)))


def hf_wsd_sqrt(w, stable, decay, m):  # transformers' _get_wsd_scheduler_lambda, decay_type="1-sqrt", our warmup
    def f(step):
        if step < w:
            return (step + 1) / w
        if step < w + stable:
            return 1.0
        if step < w + stable + decay:
            p = (step - w - stable) / max(1, decay)
            return max(0.0, (1.0 - math.sqrt(p)) * (1.0 - m) + m)
        return m
    return f


case("wsd_sqrt", "wsd(warmup=2, total=24, decay=8, anneal=1-sqrt, min_factor=0.05)", 26,
     lambda o: LambdaLR(o, hf_wsd_sqrt(2, 14, 8, 0.05)))

# ReduceLROnPlateau: one check per epoch with these metric values (a NaN among them: never better)
METRIC = [1.0, 0.9, 0.85, 0.86, 0.849, 0.85, 0.8, 0.8, 0.8, 0.8, 0.79995, 0.7, 0.7, 0.7, 0.7, float("nan"),
          0.7, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6]
PLATEAU = [
    ("plateau", "plateau(per_epoch=true)", {}),
    ("plateau_rel", "plateau(factor=0.5, patience=2, cooldown=1, min_lr=0.004)",
     dict(factor=0.5, patience=2, cooldown=1, min_lr=0.004)),
    ("plateau_abs_max", "plateau(mode=max, threshold_mode=abs, threshold=0.05, "
     "patience=0, factor=0.3)", dict(mode="max", threshold_mode="abs", threshold=0.05, patience=0, factor=0.3)),
    ("plateau_eps", "plateau(factor=0.5, patience=1, min_lr=0.02, eps=0.02)",
     dict(factor=0.5, patience=1, min_lr=0.02, eps=0.02)),
]
for name, c_init, kw in PLATEAU:
    o = opt()
    s = ReduceLROnPlateau(o, **kw)
    vals = []
    for m in METRIC:
        s.step(m)
        vals.append(o.param_groups[0]["lr"])  # the lr after the check: the next epoch's
    CASES.append((name, c_init, len(METRIC), vals))


def c_double(x):
    return "%.17g" % x


w = sys.stdout.write
w("/* tests/sched_ref.h - generated by tests/gen_sched_ref.py with torch %s; do not edit.\n" % torch.__version__)
w("   lr per scheduler step from PyTorch's schedulers, base lr %g (plateau: after each check). */\n" % BASE)
w("#define SCHED_REF_BASE %s\n" % c_double(BASE))
w("static const double sched_ref_metric[%d] = {\n" % len(METRIC))
w("  " + ", ".join("NAN" if math.isnan(m) else c_double(m) for m in METRIC) + "\n};\n")
w("typedef struct sched_ref { const char *name, *spec; int n; double lr[64]; } sched_ref;\n")
w("static const sched_ref sched_refs[] = {\n")
for name, c_init, n, vals in CASES:
    assert n == len(vals) <= 64
    w('  { "%s", "%s", %d, {\n' % (name, c_init, n))
    for i in range(0, n, 4):
        w("    " + ", ".join(c_double(v) for v in vals[i:i + 4]) + ",\n")
    w("  } },\n")
w("};\n")
