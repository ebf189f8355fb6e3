#!/usr/bin/env python3
"""tests/bar_check.py SHAPE COLS SHOT... - checks tmux captures (capture-pane -p -J) of `test_log --bar-loop
SHAPE US` in a COLS-wide terminal, in the order taken, the last one after the run ended. The values the run
shows are known here (the same formulas as tests/test_log.c's bar_loss, bar_val and bar_val_metrics):
  - every bar line parses whole (tqdm's "desc: pct%|cells| n/total [times, rate, fields]", the bracket, its
    rate or its fields possibly left out): nothing cut, no row wider than COLS - 1
  - its bar has at least 10 cells; its percentage is n/total's, rounded
  - every field shown is whole and equals the true value rounded to 4 digits (%.4g): the training loss of
    the step the line shows, the validation metrics of one validation at most two before it; the fields
    shown are the first ones of loss, val/loss, val/accuracy, val/perplexity (dropped from the end)
  - at most one training bar and one validation bar; a validation bar only right below the training bar
    (never left behind on its own, frozen)
  - the training bar never goes back; it shows at least 3 different places over the run, and no epoch
    but the first at 0% (a fast epoch's start, drawn when a redraw was due there, stayed on screen while
    the epoch ran: 15 of 16 captures showed one before issue 38)
  - at the end: one bar, the training bar at 100% (from 80 columns on, with the loss), no validation
    bar, and "done"
"""
import re
import sys

S, V, NB = 240, 40, 20  # tests/test_log.c: BAR_S, BAR_V, BAR_NB; the epochs: BAR_E, BAR_FAST_E
MIN_CELLS = 10
ORDER = ["loss", "val/loss", "val/accuracy", "val/perplexity"]


def bar_loss(k):
    return 0.987654321 / (k + 7)


def val_metrics(s):
    s = float(s)
    return {"val/loss": 1.0 / (s + 80.25), "val/accuracy": 0.5 + s / (s + 333.3), "val/perplexity": 12.5 + 1000 / (s + 77.7)}


LINE = re.compile(r"^(Training|Epoch (\d+)|Validation|Sanity Checking): *(\d+)%\|([^|]*)\| (\d+)/(\d+)(?: \[([^\]]*)\])?$")
TIMES = re.compile(r"^(\d\d:)?\d\d:\d\d<((\d\d:)?\d\d:\d\d|\?)$")
RATE = re.compile(r"^(\d+\.\d\d(it/s|s/it)|\?it/s)$")


def fail(msg, shot=None):
    if shot is not None:
        sys.stderr.write("".join(shot) + "\n")
    sys.exit("bar_check: " + msg)


def main():
    shape, cols, shots = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    label = shape
    E = 60 if shape == "fast-epochs" else 12
    if shape == "fast-epochs":
        shape = "epochs"
    val_steps = list(range(V, S + 1, V)) if shape == "steps" else list(range(0, S + 1, V)) if shape == "llmc" \
        else [NB * (e + 1) for e in range(E)]
    places, last_place = [], None
    for i, path in enumerate(shots):
        rows = open(path, encoding="utf-8").read().rstrip("\n").split("\n")
        final = i == len(shots) - 1
        train_at = None   # the row of the training bar
        k_main = None     # the step it shows
        n_train = n_eval = 0
        for r, row in enumerate(rows):
            row = row.rstrip()
            if len(row) >= cols:
                fail("%s: a row of %d characters in %d columns (wrapped): %s" % (path, len(row), cols, row), rows)
            if "%|" not in row:
                continue
            m = LINE.match(row)
            if not m:
                fail("%s: a bar line that does not parse whole (cut?): %r" % (path, row), rows)
            desc, epoch, pct, cells, n, total, bracket = m.groups()
            n, total = int(n), int(total)
            if len(cells) < MIN_CELLS:
                fail("%s: a bar of %d cells (want at least %d): %s" % (path, len(cells), MIN_CELLS, row), rows)
            if pct != "%.0f" % (100.0 * n / total):
                fail("%s: %s%% shown for %d/%d: %s" % (path, pct, n, total, row), rows)
            fields = []
            if bracket is not None:
                parts = bracket.split(", ")
                if not TIMES.match(parts[0]):
                    fail("%s: the times %r do not parse: %s" % (path, parts[0], row), rows)
                parts = parts[1:]
                if parts and RATE.match(parts[0]):
                    parts = parts[1:]
                for f in parts:
                    name, eq, value = f.partition("=")
                    if not eq or name not in ORDER:
                        fail("%s: a field %r that is no metric of the run (cut?): %s" % (path, f, row), rows)
                    fields.append((name, value))
            names = [f[0] for f in fields]
            if desc == "Validation" or desc == "Sanity Checking":
                n_eval += 1
                if train_at is None or train_at != r - 1:
                    fail("%s: a validation bar that is not right below the training bar (left behind?): %s" % (path, row), rows)
                k_lo, k_hi = k_main, k_main + (V if shape != "epochs" else NB)
            else:
                n_train += 1
                train_at = r
                k = n + (int(epoch) * NB if epoch is not None else 0)
                if (shape == "epochs") != (epoch is not None) or total != (NB if shape == "epochs" else S):
                    fail("%s: not this loop's training bar: %s" % (path, row), rows)
                k_main = k_lo = k_hi = k
                place = (int(epoch or 0), n)
                if last_place is not None and place < last_place:
                    fail("%s: the training bar went back from %s to %s: %s" % (path, last_place, place, row), rows)
                last_place = place
                places.append(place)
                if pct == "0" and epoch is not None and int(epoch) > 0:
                    fail("%s: epoch %s at 0%% (a fast epoch's start, left on screen while it runs): %s" % (path, epoch, row), rows)
            # the fields: the first ones of the order, dropped whole from the end
            want = [x for x in ORDER if x != "loss" or "loss" in names or k_hi > 0]
            if names != want[:len(names)]:
                fail("%s: the fields %s are not the first ones of %s: %s" % (path, names, want, row), rows)
            for name, value in fields:
                if name == "loss" and not any(value == "%.4g" % bar_loss(k) for k in range(max(k_lo, 1), k_hi + 1)):
                    fail("%s: loss=%s is not the loss of step %s (%.4g): %s" % (path, value, k_lo, bar_loss(max(k_lo, 1)), row), rows)
            vals = [f for f in fields if f[0] != "loss"]
            if vals:
                ok = [s for s in val_steps if s <= k_hi and s >= k_lo - 2 * (V if shape != "epochs" else NB)
                      and all(v == "%.4g" % val_metrics(s)[name] for name, v in vals)]
                if not ok:
                    fail("%s: %s is not one validation's metrics near step %s (rounded to 4 digits): %s"
                         % (path, vals, k_lo, row), rows)
            if final and (desc in ("Validation", "Sanity Checking") or n != total):
                fail("%s: at the end, not the training bar at 100%%: %s" % (path, row), rows)
            if final and ((epoch is not None and int(epoch) != E - 1) or (cols >= 80 and names[:1] != ["loss"])):
                fail("%s: the last bar is not the last step's: %s" % (path, row), rows)
        if n_train > 1 or n_eval > 1:
            fail("%s: %d training bars and %d validation bars on the screen" % (path, n_train, n_eval), rows)
        if final and (n_train != 1 or n_eval != 0 or "done" not in [x.rstrip() for x in rows]):
            fail("%s: at the end, not one training bar alone and done" % path, rows)
    if len(set(places)) < 3:
        fail("the training bar showed %d places over %d captures (want at least 3): %s" % (len(set(places)), len(shots), places))
    print("bar_check: %s, %d columns: %d captures, %d places of the training bar %s ... %s, every value whole and right"
          % (label, cols, len(shots), len(set(places)), places[0], places[-1]))


if __name__ == "__main__":
    main()
