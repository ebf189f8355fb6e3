#!/bin/sh
# tests/mlflow.sh BIN VENV TMP - the mlflow logger against a real MLflow tracking server (make test-mlflow).
# Starts `mlflow server` (VENV's, a sqlite store under TMP, a free local port, one worker, no job runner) in
# a process group of its own (setsid), trains with BIN (tests/test_mlflow.c built with -DTRAIN_MLFLOW): tr_fit
# and a loop of its own, each to its end, failed by a hook, stopped by Ctrl-C, resumed from its checkpoint;
# and a loop whose server is stopped in the middle and started again while the run's end waits for it. Then
# tests/mlflow_check.py reads everything back through MLflow's own client. The server's group is stopped by
# its PID (never by a command line) when the script ends, whatever happens.
set -e
BIN=$1 VENV=$2 TMP=$3
rm -rf "$TMP" && mkdir -p "$TMP"
PY=$VENV/bin/python
PORT=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
URI=http://127.0.0.1:$PORT
PID= PROXY=

start() {
  MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false setsid "$VENV/bin/mlflow" server --backend-store-uri "sqlite:///$TMP/mlflow.db" \
    --default-artifact-root "$TMP/artifacts" --host 127.0.0.1 --port "$PORT" --workers 1 >> "$TMP/server.log" 2>&1 &
  PID=$!
  $PY - "$URI" <<'EOF' || { echo "mlflow: the server did not start in 90 s; its log:"; tail -20 "$TMP/server.log"; exit 1; }
import sys, time, urllib.request
for i in range(900):
    try:
        if urllib.request.urlopen(sys.argv[1] + "/health", timeout=1).status == 200: sys.exit(0)
    except Exception: time.sleep(0.1)
sys.exit(1)
EOF
}
stop() { # the server's process group, by the PID setsid gave it; waited for
  [ -n "$PID" ] || return 0
  kill -TERM "-$PID" 2>/dev/null || true
  i=0; while kill -0 "-$PID" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  kill -KILL "-$PID" 2>/dev/null || true
  wait "$PID" 2>/dev/null || true
  PID=
}
trap 'stop; [ -z "$PROXY" ] || kill "$PROXY" 2>/dev/null || true' EXIT
trap 'exit 1' INT TERM

expect() { # expect RC CMD...: runs CMD (its output into TMP/NAME.out), its exit status must be RC
  want=$1; name=$2; shift 2
  rc=0; "$@" > "$TMP/$name.out" 2>&1 || rc=$?
  [ "$rc" = "$want" ] || { echo "mlflow: $name exited $rc, not $want:"; cat "$TMP/$name.out"; exit 1; }
}

down_run() { # down_run NAME WHAT: a 60-step loop of its own, the server stopped when it says PAUSE (step 20), then let
  # go on (TMP/NAME/go); its exit status in rc
  mkdir -p "$TMP/$1"
  $BIN --own "$URI" "$TMP/$1" "$1" 60 "$2" > "$TMP/$1.out" 2>&1 &
  DOWN=$!
  i=0; until grep -q PAUSE "$TMP/$1.out" 2>/dev/null || [ $i -ge 300 ]; do sleep 0.05; i=$((i + 1)); done
  stop
  touch "$TMP/$1/go"
  rc=0; wait $DOWN || rc=$?
}

t0=$(date +%s)
start
echo "mlflow: server up at $URI in $(($(date +%s) - t0)) s"
# tr_fit: to the end, then resumed from its last.ckpt to 4 epochs; failed by a hook; Ctrl-C
expect 0 fit $BIN --fit "$URI" "$TMP/fit" fit
cp "$TMP/fit/run_id" "$TMP/fit/run_id.first"
expect 0 fit_resume $BIN --fit "$URI" "$TMP/fit" fit resume
expect 2 fit_fail $BIN --fit "$URI" "$TMP/fit_fail" fit_fail fail
expect 130 fit_ctrl_c $BIN --fit "$URI" "$TMP/fit_ctrl_c" fit_ctrl_c ctrl_c
# a loop of its own: 40 steps, resumed to 80; failed; Ctrl-C
expect 0 own $BIN --own "$URI" "$TMP/own" own 40
cp "$TMP/own/run_id" "$TMP/own/run_id.first"
expect 0 own_resume $BIN --own "$URI" "$TMP/own" own 80 resume
expect 2 own_fail $BIN --own "$URI" "$TMP/own_fail" own_fail 40 fail
expect 130 own_ctrl_c $BIN --own "$URI" "$TMP/own_ctrl_c" own_ctrl_c 40 ctrl_c
# the server stopped at step 20 of 60: the steps go on, the end waits; started again, everything arrives
mkdir -p "$TMP/down"
$BIN --own "$URI" "$TMP/down" down 60 pause > "$TMP/down.out" 2>&1 &
DOWN=$!
i=0; until grep -q PAUSE "$TMP/down.out" 2>/dev/null || [ $i -ge 300 ]; do sleep 0.05; i=$((i + 1)); done
grep -q PAUSE "$TMP/down.out" || { echo "mlflow: the down run never reached step 20:"; cat "$TMP/down.out"; exit 1; }
stop
touch "$TMP/down/go"
i=0; until grep -q "DOWN SEEN" "$TMP/down.out" 2>/dev/null || [ $i -ge 300 ]; do sleep 0.05; i=$((i + 1)); done
start
rc=0; wait $DOWN || rc=$?
[ $rc = 0 ] || { echo "mlflow: the down run exited $rc:"; cat "$TMP/down.out"; exit 1; }
grep -q "does not answer" "$TMP/down.out" && grep -q "answers again" "$TMP/down.out" ||
  { echo "mlflow: the down run did not say the server went away and came back:"; cat "$TMP/down.out"; exit 1; }
! grep -q "not in MLflow" "$TMP/down.out" || { echo "mlflow: values were lost:"; cat "$TMP/down.out"; exit 1; }
# issue 37, items 7 and 19: the server stopped at step 20 and still down when the run ends (flush_timeout=1):
# the unsent values and the end status are kept in the run directory; the server back, the resume sends them
down_run down_end pause_end
[ $rc = 0 ] || { echo "mlflow: the down_end run exited $rc:"; cat "$TMP/down_end.out"; exit 1; }
grep -q "kept in .*mlflow_unsent.txt" "$TMP/down_end.out" && [ -f "$TMP/down_end/v/mlflow_unsent.txt" ] ||
  { echo "mlflow: the down_end run kept nothing in its run directory:"; cat "$TMP/down_end.out"; exit 1; }
start
expect 0 down_end_resume $BIN --own "$URI" "$TMP/down_end" down_end 80 resume
grep -q "sending first what 1 earlier run could not" "$TMP/down_end_resume.out" && [ ! -e "$TMP/down_end/v/mlflow_unsent.txt" ] ||
  { echo "mlflow: the resume did not send the kept values:"; cat "$TMP/down_end_resume.out"; ls "$TMP/down_end/v"; exit 1; }
# item 19: a run that fails while the server is down keeps its end status (FAILED) with its values; a new run beside
# it (another version directory of the same save_dir), the server back, sends them first: MLflow has the run FAILED
down_run down_fail pause_end_fail
[ $rc = 2 ] && [ -f "$TMP/down_fail/v/mlflow_unsent.txt" ] ||
  { echo "mlflow: the down_fail run exited $rc (not 2) or kept nothing:"; cat "$TMP/down_fail.out"; exit 1; }
start
expect 0 down_fail_again $BIN --own "$URI" "$TMP/down_fail" down_fail_again 10 again
grep -q "sending first what 1 earlier run could not" "$TMP/down_fail_again.out" && [ ! -e "$TMP/down_fail/v/mlflow_unsent.txt" ] ||
  { echo "mlflow: the run beside did not send the failed run's kept values:"; cat "$TMP/down_fail_again.out"; ls "$TMP/down_fail/v"; exit 1; }
# item 5: names MLflow refuses (val//acc, loss/, a non-ASCII letter, a param bad//key) are mended, nothing lost
expect 0 names $BIN --own "$URI" "$TMP/names" names 40 names
grep -q "metric 'val//acc' is sent as 'val/acc'" "$TMP/names.out" || { echo "mlflow: the renames were not said:"; cat "$TMP/names.out"; exit 1; }
# item 6: a server that stores each request but answers after timeout_ms (a proxy in front of it that forwards at
# once and holds every answer 0.3 s; the run's timeout_ms is 0.1 s): the run is made once, every value and param
# stored once (mlflow_check.py), and the run ends with everything sent, not the same request forever
PPORT=$($PY -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
$PY - "$PPORT" "$URI" > "$TMP/proxy.log" 2>&1 <<'EOF' &
import sys, time, urllib.request, urllib.error
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
up = sys.argv[2]
class Slow(BaseHTTPRequestHandler):
    def relay(self, body):
        req = urllib.request.Request(up + self.path, data=body, method=self.command,
                                     headers={"Content-Type": self.headers.get("Content-Type", "application/json")})
        try:
            with urllib.request.urlopen(req, timeout=30) as r: code, data = r.status, r.read()
        except urllib.error.HTTPError as e: code, data = e.code, e.read()
        time.sleep(0.3)  # stored by now; the answer comes after the client's timeout_ms
        try:
            self.send_response(code); self.send_header("Content-Length", str(len(data))); self.end_headers(); self.wfile.write(data)
        except OSError: pass  # the client gave up waiting
    def do_GET(self): self.relay(None)
    def do_POST(self): self.relay(self.rfile.read(int(self.headers.get("Content-Length", 0))))
    def log_message(self, *a): pass
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Slow).serve_forever()
EOF
PROXY=$!
i=0; until $PY -c "import socket,sys; socket.create_connection(('127.0.0.1', $PPORT), 1)" 2>/dev/null || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
expect 0 slow $BIN --own "http://127.0.0.1:$PPORT" "$TMP/slow" slow 40 slow
kill "$PROXY"; wait "$PROXY" 2>/dev/null || true; PROXY=
grep -q "not in MLflow\|sends it nothing more" "$TMP/slow.out" && { echo "mlflow: the slow run did not send everything:"; cat "$TMP/slow.out"; exit 1; }
$PY tests/mlflow_check.py "$URI" "$TMP"
echo "mlflow: 12 runs checked against a real MLflow server in $(($(date +%s) - t0)) s"
