#!/bin/sh
# tests/log_crash.sh BIN DIR - kill -9 a run that logs every step (csv with flush_every=3, jsonl);
# the files must hold whole rows only, each step once, in order, from step 0.
set -u
bin=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir"
"$bin" --crash "$dir" & pid=$!
sleep 1.5
kill -9 $pid
wait $pid 2>/dev/null
python3 - "$dir/lightning_logs/crash" <<'PY' || exit 1
import json, sys
d = sys.argv[1]
lines = open(d + "/metrics.csv", newline="").read().split("\n")
assert lines[-1] == "", "metrics.csv does not end with a whole line: %r" % lines[-1][-80:]
rows = lines[1:-1]
assert lines[0] == "epoch,step,train/loss", "header %r" % lines[0]
steps = []
for r in rows:
    cells = r.split(",")
    assert len(cells) == 3 and all(cells), "a torn row: %r" % r
    float(cells[2]); steps.append(int(cells[1]))
assert steps == list(range(len(steps))), "steps not 0..n-1 once each: %r" % steps[:20]
assert len(steps) >= 10, "only %d rows" % len(steps)
jl = open(d + "/metrics.jsonl").read()
assert jl.endswith("\n"), "metrics.jsonl ends in a torn line"
objs = [json.loads(x) for x in jl.splitlines()]
js = [o["step"] for o in objs[1:]]
assert "hparams" in objs[0] and js == list(range(len(js))), "jsonl steps %r" % js[:20]
print("log_crash: after kill -9: %d whole csv rows, %d jsonl records, every step once" % (len(steps), len(js)))
PY
