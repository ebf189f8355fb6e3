"""tests/tb_hparams.py LOGDIR - what TensorBoard's HParams tab shows for the runs `test_log --tb-hparams` writes
(three fits, each with tr_run_hparam* values; the third fails): the hparams plugin's own request handlers
(/experiment and /session_groups, what the tab asks the server), on the runs loaded by tensorboard's event
multiplexer. Every run is listed with its hyperparameters (typed: numbers, strings, booleans; the user's seed
over the trainer's), its status (success, failure) and its final metrics (the last value of each scalar)."""
import json, math, sys
from werkzeug.test import Client
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from tensorboard.plugins.hparams import hparams_plugin, metadata
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

logdir = sys.argv[1]
mux = plugin_event_multiplexer.EventMultiplexer()
mux.AddRunsFromDirectory(logdir)
mux.Reload()
ctx = base_plugin.TBContext(logdir=logdir, multiplexer=mux, data_provider=data_provider.MultiplexerDataProvider(mux, logdir))
plugin = hparams_plugin.HParamsPlugin(ctx)
app = plugin.get_plugin_apps()
bad = []
def check(ok, what):
    if not ok:
        bad.append(what)
def post(route, body):
    from werkzeug.wrappers import Response
    res = Client(app[route], Response).post(route, data=json.dumps(body), content_type="application/json")
    check(res.status_code == 200, "%s: HTTP %d %s" % (route, res.status_code, res.get_data(as_text=True)[:300]))
    return json.loads(res.get_data(as_text=True)) if res.status_code == 200 else {}

exp = post("/experiment", {"experimentName": "", "includeMetrics": True})
infos = {h["name"]: h for h in exp.get("hparamInfos", [])}
for name, typ in (("width", "DATA_TYPE_FLOAT64"), ("dataset", "DATA_TYPE_STRING"), ("fast", "DATA_TYPE_BOOL"),
                  ("seed", "DATA_TYPE_FLOAT64"), ("optimizer", "DATA_TYPE_STRING"), ("lr", "DATA_TYPE_FLOAT64")):
    check(name in infos and infos[name].get("type") == typ, "hparam %s: %r" % (name, infos.get(name)))
check(infos.get("width", {}).get("domainInterval") == {"minValue": 64.0, "maxValue": 256.0}, "width's domain %r" % infos.get("width"))
metrics = sorted(m["name"]["tag"] for m in exp.get("metricInfos", []))
check({"train/loss", "val/loss"} <= set(metrics), "metrics %r" % metrics)

groups = post("/session_groups", {"experimentName": "", "startIndex": 0, "sliceSize": 100,
                                  "allowedStatuses": ["STATUS_UNKNOWN", "STATUS_SUCCESS", "STATUS_FAILURE", "STATUS_RUNNING"],
                                  "colParams": [], "includeMetrics": True}).get("sessionGroups", [])
by_name = {g["name"]: g for g in groups}
want = {"version_0": (64, "spirals", False, 100, "STATUS_SUCCESS"), "version_1": (256, "moons", True, 101, "STATUS_SUCCESS"),
        "version_2": (128, "spirals", False, 102, "STATUS_FAILURE")}
check(sorted(by_name) == sorted(want), "session groups %r" % sorted(by_name))
for run, (width, data, fast, seed, status) in want.items():
    g = by_name.get(run)
    if not g:
        continue
    hp = g["hparams"]
    check((hp.get("width"), hp.get("dataset"), hp.get("fast"), hp.get("seed")) == (width, data, fast, seed), "%s hparams %r" % (run, hp))
    check(g["sessions"][0]["status"] == status, "%s status %r" % (run, g["sessions"][0].get("status")))
    acc = EventAccumulator("%s/%s" % (logdir, run)); acc.Reload()
    vals = {m["name"]["tag"]: m["value"] for m in g.get("metricValues", [])}
    for tag in ("train/loss", "val/loss"):
        last = acc.Scalars(tag)[-1].value
        check(tag in vals and math.isclose(vals[tag], last, rel_tol=1e-6), "%s %s: tab %r, last scalar %r" % (run, tag, vals.get(tag), last))
if bad:
    print("tb_hparams: FAILED:\n  " + "\n  ".join(bad[:20]))
    sys.exit(1)
print("tb_hparams: the HParams tab lists %d runs with %d hyperparameters, their status and %d metrics (tensorboard %s)"
      % (len(groups), len(infos), len(metrics), __import__("tensorboard").__version__))
for g in sorted(groups, key=lambda g: g["name"]):
    vals = {m["name"]["tag"]: m["value"] for m in g.get("metricValues", [])}
    print("  %s  width=%s dataset=%s fast=%s seed=%s  %s  val/loss=%.6g" % (g["name"], g["hparams"].get("width"), g["hparams"].get("dataset"),
          g["hparams"].get("fast"), g["hparams"].get("seed"), g["sessions"][0]["status"], vals.get("val/loss", float("nan"))))
