"""tests/own_loop_tb.py RUN - read examples/own_loop.c's TensorBoard run (tests/own_loop.sh's "full" run) with
the real tensorboard package and check it against metrics.csv beside it: every scalar at its step with the
csv's value, the gradient histogram (gradient_monitor's histogram_bins=20) with every training record, and
the hparams text, and the hparams plugin's session start (typed values) and end (success) for the HParams tab."""
import csv, math, os, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

run = sys.argv[1]
acc = EventAccumulator(run, size_guidance={"scalars": 0, "histograms": 0, "tensors": 0})
acc.Reload()
tags = acc.Tags()
rows = list(csv.DictReader(open(os.path.join(run, "metrics.csv"), newline="")))
bad = []
def check(ok, what):
    if not ok:
        bad.append(what)

want = {}
for r in rows:
    for k, v in r.items():
        if k not in ("epoch", "step") and v:
            want.setdefault(k, []).append((int(r["step"]), float(v)))
check(sorted(tags["scalars"]) == sorted(want), "scalar tags %r, csv columns %r" % (tags["scalars"], sorted(want)))
for tag, points in want.items():
    got = [(e.step, e.value) for e in acc.Scalars(tag)] if tag in tags["scalars"] else []
    check([s for s, _ in got] == [s for s, _ in points], "%s: steps %r" % (tag, [s for s, _ in got][:5]))
    for (s, a), (_, b) in zip(got, points):
        check(math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12), "%s at %d: %r, csv %r" % (tag, s, a, b))
train_steps = [int(r["step"]) for r in rows if r["train/loss"]]
check(tags["histograms"] == ["gradients"], "histogram tags %r" % tags["histograms"])
h = acc.Histograms("gradients") if "gradients" in tags["histograms"] else []
check([x.step for x in h] == train_steps, "histogram steps %r, training records %r" % ([x.step for x in h][:5], train_steps[:5]))
for x in h:
    v = x.histogram_value
    check(v.num == 9 and len(v.bucket) == 20 and sum(v.bucket) == 9 and v.min <= v.max, "histogram at %d: %r" % (x.step, v))
check(tags["tensors"] == ["hparams", "_hparams_/session_start_info", "_hparams_/session_end_info"], "tensor tags %r" % tags["tensors"])
# the HParams tab: the plugin's own parsing of the session's start (typed values) and end (status)
from tensorboard.plugins.hparams import metadata, api_pb2
content = {t: acc.SummaryMetadata(t).plugin_data.content for t in tags["tensors"] if t.startswith("_hparams_/")}
if len(content) == 2:
    start = metadata.parse_session_start_info_plugin_data(content[metadata.SESSION_START_INFO_TAG])
    hp = {k: v.WhichOneof("kind") + "=" + str(getattr(v, v.WhichOneof("kind"))) for k, v in start.hparams.items()}
    check(hp.get("features") == "number_value=8.0" and hp.get("data") == "string_value=two clouds" and
          hp.get("lr") == "number_value=0.02" and hp.get("batch") == "number_value=32.0", "session_start_info hparams %r" % hp)
    end = metadata.parse_session_end_info_plugin_data(content[metadata.SESSION_END_INFO_TAG])
    check(end.status == api_pb2.STATUS_SUCCESS and end.end_time_secs >= start.start_time_secs > 0, "session_end_info %r" % end)
if "hparams" in tags["tensors"]:
    text = acc.Tensors("hparams")[0].tensor_proto.string_val[0].decode()
    check("| batch | 32 |" in text and "| lr | 0.02 |" in text and "| spec | `nan_guard;" in text, "hparams text %r" % text)
if bad:
    print("own_loop_tb: FAILED:\n  " + "\n  ".join(bad[:20]))
    sys.exit(1)
print("own_loop_tb: %s: %d scalars, %d gradient histograms and the hparams read back by tensorboard %s"
      % (run, sum(len(p) for p in want.values()), len(h), __import__("tensorboard").__version__))
