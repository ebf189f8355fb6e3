"""tests/tb_serve.py LOGDIR - what `tensorboard --logdir` shows: start the real TensorBoard server with its
Rust data server (--load_fast=true: it checks the length CRCs and marks a file with a bad one dead),
and read the run written by `test_log --tb` back over HTTP: scalars, the histogram, the hparams text."""
import json, math, socket, subprocess, sys, time, urllib.parse, urllib.request, os

logdir = sys.argv[1]
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
tb = os.path.join(os.path.dirname(sys.executable), "tensorboard")
log = open(os.path.join(logdir, "server.log"), "w")
server = subprocess.Popen([tb, "--logdir", logdir, "--host", "127.0.0.1", "--port", str(port), "--load_fast=true"],
                          stdout=log, stderr=subprocess.STDOUT)
def get(path, **q):
    url = "http://127.0.0.1:%d/data/plugin/%s?%s" % (port, path, urllib.parse.urlencode(q))
    return json.load(urllib.request.urlopen(url, timeout=5))
try:
    scalars, deadline = None, time.time() + 90
    while time.time() < deadline:
        try:
            scalars = get("scalars/scalars", run="run", tag="train/loss")
            if len(scalars) == 10:
                break
        except Exception:
            pass
        time.sleep(0.5)
    bad = []
    if not scalars or len(scalars) != 10:
        bad.append("train/loss: %r" % scalars)
    else:
        for wall, step, value in scalars:
            if not math.isclose(value, 1.0 / (step + 1), rel_tol=1e-6):
                bad.append("train/loss at %d: %r" % (step, value))
    lr = get("scalars/scalars", run="run", tag="lr")
    if [round(v, 6) for _, _, v in lr] != [0.5 * i for i in range(10)]:
        bad.append("lr: %r" % lr)
    hist = get("histograms/histograms", run="run", tag="weights")
    if len(hist) != 1 or hist[0][1] != 3 or abs(sum(b[2] for b in hist[0][2]) - 100) > 1e-6:
        bad.append("histogram: %r" % hist[:1])
    text = get("text/text", run="run", tag="hparams")
    if not text or "tensorboard(" not in text[0]["text"]:
        bad.append("hparams text: %r" % text)
    log.flush()
    if "WARN" in open(os.path.join(logdir, "server.log")).read():
        bad.append("the server warned: " + open(os.path.join(logdir, "server.log")).read())
finally:
    server.terminate()
    server.wait()
if bad:
    print("tb_serve: FAILED:\n  " + "\n  ".join(bad))
    sys.exit(1)
print("tb_serve: tensorboard --logdir (Rust data server) shows 20 scalars, the histogram and the hparams text")
