"""tests/tb_continue.py ROOT - the runs tests/test_continue.c --tb ROOT leaves, read back by the real tensorboard
package: each run resumed into its own directory (own, fit, fit2, two: several event files, one per resume)
shows every scalar at each step once, with the values of the uninterrupted run beside it (<name>_ref), in both
of tensorboard's readers (the classic EventAccumulator and the plugins' one), and `tensorboard --logdir`'s Rust
data server over HTTP for the loop's run."""
import glob, os, sys
from tensorboard.backend.event_processing import event_accumulator as classic
from tensorboard.backend.event_processing import plugin_event_accumulator as plugin
from tensorboard.util import tensor_util

root = sys.argv[1]
bad = []
def check(ok, what):
    if not ok:
        bad.append(what)

def classic_scalars(run):
    acc = classic.EventAccumulator(run, size_guidance={"scalars": 0})
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}

def plugin_scalars(run):
    acc = plugin.EventAccumulator(run, size_guidance={"tensors": 0})
    acc.Reload()
    out = {}
    for t in acc.Tags()["tensors"]:
        if acc.SummaryMetadata(t).plugin_data.plugin_name == "scalars":
            out[t] = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(t)]
    return out

runs = 0
for name in ("own", "fit", "fit2", "two", "k9a", "k9b", "k9fit", "k9mid", "ctrlc"):  # the last five: interrupted mid-way (issue 37, items 3, 18)
    run = os.path.join(root, name, "lightning_logs", "version_0")
    ref = os.path.join(root, name + "_ref", "lightning_logs", "version_0")
    files = glob.glob(os.path.join(run, "events.out.tfevents.*"))
    check(len(files) >= 2, "%s: %d event files (a resume writes one more)" % (name, len(files)))
    for reader in (classic_scalars, plugin_scalars):
        got, want = reader(run), reader(ref)
        check(sorted(got) == sorted(want), "%s (%s): tags %r, uninterrupted %r" % (name, reader.__name__, sorted(got), sorted(want)))
        for tag, points in want.items():
            steps = [s for s, _ in got.get(tag, [])]
            check(len(steps) == len(set(steps)), "%s (%s): %s shows a step twice: %r" % (name, reader.__name__, tag, steps))
            check(got.get(tag) == points, "%s (%s): %s is %r, uninterrupted %r" % (name, reader.__name__, tag, got.get(tag), points))
    runs += 1
# `tensorboard --logdir` with its Rust data server (--load_fast=true), over HTTP: the resumed loop's run too
import json, socket, subprocess, time, urllib.parse, urllib.request
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
server = subprocess.Popen([os.path.join(os.path.dirname(sys.executable), "tensorboard"), "--logdir", os.path.join(root, "own"),
                           "--host", "127.0.0.1", "--port", str(port), "--load_fast=true"],
                          stdout=open(os.path.join(root, "server.log"), "w"), stderr=subprocess.STDOUT)
want = [s for s, _ in classic_scalars(os.path.join(root, "own_ref", "lightning_logs", "version_0"))["train/loss"]]
got, deadline = None, time.time() + 90
try:
    while time.time() < deadline and got != want:
        try:
            q = urllib.parse.urlencode({"run": "lightning_logs/version_0", "tag": "train/loss"})
            got = [p[1] for p in json.load(urllib.request.urlopen("http://127.0.0.1:%d/data/plugin/scalars/scalars?%s" % (port, q), timeout=5))]
        except Exception:
            pass
        time.sleep(0.5)
finally:
    server.kill()
check(got == want, "own (the data server): train/loss at steps %r, uninterrupted %r" % (got, want))
if bad:
    print("tb_continue: FAILED:\n  " + "\n  ".join(bad))
    sys.exit(1)
print("tb_continue: %d resumed runs read back by tensorboard %s (both readers, the data server): each step once, the uninterrupted run's values"
      % (runs, __import__("tensorboard").__version__))
