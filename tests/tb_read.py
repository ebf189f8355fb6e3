"""tests/tb_read.py - read a TensorBoard run written by train.h with the real tensorboard package and
check every value (tests/test_log.c --tb writes it): scalars train/loss = 1/(step+1) and lr = 0.5*step
for steps 0..9, the histogram "weights" of 0.0, 0.1, ..., 9.9 at step 3, the 4-bin histogram "grads"
at step 5 (tr_log_histogram_bins), the hparams text."""
import math, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

run = sys.argv[1]
acc = EventAccumulator(run, size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
acc.Reload()
tags = acc.Tags()
bad = []
def check(ok, what):
    if not ok:
        bad.append(what)

check(set(tags["scalars"]) == {"train/loss", "lr"}, "scalar tags %r" % tags["scalars"])
for tag, f in (("train/loss", lambda s: 1.0 / (s + 1)), ("lr", lambda s: 0.5 * s)):
    events = acc.Scalars(tag)
    check([e.step for e in events] == list(range(10)), "%s steps %r" % (tag, [e.step for e in events]))
    for e in events:
        check(math.isclose(e.value, f(e.step), rel_tol=1e-6, abs_tol=1e-7), "%s at %d: %r" % (tag, e.step, e.value))
check(sorted(tags["histograms"]) == ["grads", "weights"], "histogram tags %r" % tags["histograms"])
g = acc.Histograms("grads")
check(len(g) == 1 and g[0].step == 5, "grads steps %r" % [x.step for x in g])
gv = g[0].histogram_value
check((gv.min, gv.max, gv.num, gv.sum, gv.sum_squares) == (-1, 3, 10, 10, 30), "grads fields %r" % gv)
check(list(gv.bucket_limit) == [0, 1, 2, 3] and list(gv.bucket) == [1, 2, 3, 4], "grads buckets %r %r" % (list(gv.bucket_limit), list(gv.bucket)))
h = acc.Histograms("weights")
check(len(h) == 1 and h[0].step == 3, "histogram steps %r" % [x.step for x in h])
hv = h[0].histogram_value
check(hv.num == 100 and math.isclose(hv.min, 0) and math.isclose(hv.max, 9.9, rel_tol=1e-6), "histogram min/max/num %r" % ((hv.min, hv.max, hv.num),))
check(math.isclose(hv.sum, sum(i / 10 for i in range(100)), rel_tol=1e-5), "histogram sum %r" % hv.sum)
check(sum(hv.bucket) == 100 and len(hv.bucket) == 30 and hv.bucket_limit[0] >= hv.min, "buckets %r" % list(hv.bucket))
check(tags["tensors"] == ["hparams", "_hparams_/session_start_info"], "tensor tags %r" % tags["tensors"]) # no fit: no end
text = acc.Tensors("hparams")[0].tensor_proto.string_val[0].decode()
check("| spec | `tensorboard(" in text, "hparams text %r" % text)
if bad:
    print("tb_read: FAILED:\n  " + "\n  ".join(bad))
    sys.exit(1)
print("tb_read: %s: 20 scalars, 2 histograms and the hparams text read back by tensorboard %s" % (run, __import__("tensorboard").__version__))
