"""tests/mlflow_check.py URI TMP - what tests/mlflow.sh's runs left in MLflow, read through MLflow's own client:
each run's status, params and tags, and every metric's (step, value) history equal to its metrics.csv (NaN as NaN;
MLflow's sqlite store keeps an infinity as the largest double); a resumed run is the same MLflow run."""
import csv, math, os, sys
from mlflow.tracking import MlflowClient

uri, tmp = sys.argv[1], sys.argv[2]
client = MlflowClient(uri)
exp = client.get_experiment_by_name("train.h tests")
found = client.search_runs([exp.experiment_id], max_results=100)
runs = {r.info.run_name: r for r in found}
failures = []
for name in runs:  # a request answered late (the run "slow", issue 37 item 6) never makes a second run
    if sum(r.info.run_name == name for r in found) != 1:
        failures.append("%s: %d MLflow runs of that name" % (name, sum(r.info.run_name == name for r in found)))


def same(a, b):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    big = sys.float_info.max
    return a == b or (math.isinf(b) and a == math.copysign(big, b)) or (math.isinf(a) and b == math.copysign(big, a))


def check(name, status, loop, resumed=False):
    d = os.path.join(tmp, name)
    r = runs.get(name)
    if r is None:
        failures.append("%s: no MLflow run of that name (runs: %s)" % (name, sorted(runs)))
        return
    rid = open(os.path.join(d, "run_id")).read().strip()
    if r.info.run_id != rid:
        failures.append("%s: the program's run id %s is not MLflow's %s" % (name, rid, r.info.run_id))
    if resumed and open(os.path.join(d, "run_id.first")).read().strip() != rid:
        failures.append("%s: the resumed run is not the same MLflow run" % name)
    if r.info.status != status:
        failures.append("%s: status %s, not %s" % (name, r.info.status, status))
    want = {}
    with open(os.path.join(d, "v", "metrics.csv")) as f:
        for row in csv.DictReader(f):
            for k, v in row.items():
                if k != "step" and v != "":
                    want.setdefault(k, []).append((int(row["step"]), float(v)))
    if set(r.data.metrics) != set(want):
        failures.append("%s: MLflow's metrics %s, metrics.csv's %s" % (name, sorted(r.data.metrics), sorted(want)))
    n = 0
    for key, rows in want.items():
        got = sorted((m.step, m.value) for m in client.get_metric_history(r.info.run_id, key))
        rows = sorted(rows)
        if key == "epoch":  # the record's own, in a train and a val row of one step: MLflow keeps one of equal values
            got, rows = sorted(set(got)), sorted(set(rows))
        n += len(rows)
        if len(got) != len(rows) or any(gs != ws or not same(gv, wv) for (gs, gv), (ws, wv) in zip(got, rows)):
            failures.append("%s: %s: MLflow has %s, metrics.csv %s" % (name, key, got[:8], rows[:8]))
    if n < 10:
        failures.append("%s: only %d values in metrics.csv" % (name, n))
    p, t = r.data.params, r.data.tags
    want_p = {"lr": "0.1", "seed": "7", "width": "8", "data": "two clouds"} if loop == "own" else {"model": "toy", "optimizer": "sgd"}
    for k, v in want_p.items():
        if p.get(k) != v:
            failures.append("%s: param %s = %r, not %r" % (name, k, p.get(k), v))
    if "mlflow(" not in p.get("specs", ""):
        failures.append("%s: param specs = %r" % (name, p.get("specs")))
    if t.get("suite") != "mlflow" or t.get("loop") != loop:
        failures.append("%s: tags %s" % (name, t))
    if status == "FINISHED" and not t.get("checkpoint", "").endswith("last.ckpt"):
        failures.append("%s: tag checkpoint = %r" % (name, t.get("checkpoint")))
    print("mlflow_check: %-10s %-8s %4d values equal to metrics.csv's, %d params, %d tags" % (name, r.info.status, n, len(p), len(t)))


check("fit", "FINISHED", "fit", resumed=True)
check("fit_fail", "FAILED", "fit")
check("fit_ctrl_c", "KILLED", "fit")
check("own", "FINISHED", "own", resumed=True)
check("own_fail", "FAILED", "own")
check("own_ctrl_c", "KILLED", "own")
check("down", "FINISHED", "own")
check("down_end", "FINISHED", "own")  # its values and end status sent by its resume, from the run directory
check("down_fail", "FAILED", "own")  # failed while the server was down: its values and FAILED sent by a run beside it
check("slow", "FINISHED", "own")  # every answer after timeout_ms: each value and param once
# names MLflow refuses, mended: every value there, under its mended name; the param too
r = runs.get("names")
if r is None:
    failures.append("names: no MLflow run")
else:
    with open(os.path.join(tmp, "names", "v", "metrics.csv")) as f:
        rows = [row for row in csv.DictReader(f) if row.get("val//acc")]
    for orig, sent in (("val//acc", "val/acc"), ("loss/", "loss"), ("\u00fc-acc", "_-acc")):
        got = sorted((m.step, m.value) for m in client.get_metric_history(r.info.run_id, sent))
        want = sorted((int(row["step"]), float(row[orig])) for row in rows)
        if got != want or not want:
            failures.append("names: %s as %s: MLflow has %s, metrics.csv %s" % (orig, sent, got[:4], want[:4]))
    if r.data.params.get("bad/key") != "kept" or r.data.params.get("seed") != "7":
        failures.append("names: params %s" % r.data.params)
    print("mlflow_check: names      %s %d values under mended names, params %s" % (r.info.status, 3 * len(rows), sorted(r.data.params)))
for f in failures:
    print("mlflow_check: FAILED:", f)
sys.exit(1 if failures else 0)
