"""tests/pw_check.py - prediction_writer's files against the real safetensors package (numpy API) and Python's
   own parsers. pw_check.py DIR: DIR holds what tests/test_predwriter --write DIR wrote (4 batches of 3, 3, 3, 2
   rows, columns p, q, r): predictions.safetensors and predictions-batch_N.safetensors, predictions.csv,
   predictions.jsonl; every value must equal the float the C side computed, bit for bit."""
import csv, json, sys
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

d = sys.argv[1]
ROWS = [3, 3, 3, 2]


def value(b, r, c):  # tests/test_predwriter.c's value(), in float32 arithmetic
    if b == 1 and r == 0:
        return [np.float32(3.40282347e38), np.float32(1.17549435e-38), np.float32(-0.0)][c]
    if b == 2 and r == 2 and c == 2:
        return np.float32(1.4e-45)
    return np.float32(100 * b + 10 * r + c) / np.float32(7)


def want(bs):
    return np.array([[value(b, r, c) for c in range(3)] for b in bs for r in range(ROWS[b])], dtype=np.float32)


def same(got, exp, what):
    assert got.dtype == np.float32 and got.shape == exp.shape, (what, got.dtype, got.shape, exp.shape)
    assert got.tobytes() == exp.tobytes(), (what, got, exp)  # bits: -0.0 is not 0.0


got = load_file(d + '/predictions.safetensors')
assert list(got) == ['predictions'], list(got)
same(got['predictions'], want(range(4)), 'predictions.safetensors')
with safe_open(d + '/predictions.safetensors', framework='numpy') as f:
    assert f.metadata() == {'columns': 'p,q,r', 'rows_per_batch': '3,3,3,2'}, f.metadata()
for b in range(4):
    same(load_file('%s/predictions-batch_%d.safetensors' % (d, b))['predictions'], want([b]), 'batch %d' % b)
with open(d + '/predictions.csv', newline='') as f:
    rows = list(csv.reader(f))
assert rows[0] == ['batch', 'row', 'p', 'q', 'r'], rows[0]
assert [(int(x[0]), int(x[1])) for x in rows[1:]] == [(b, r) for b in range(4) for r in range(ROWS[b])]
same(np.array([[np.float32(float(v)) for v in x[2:]] for x in rows[1:]], dtype=np.float32), want(range(4)), 'csv')
with open(d + '/predictions.jsonl') as f:
    objs = [json.loads(line) for line in f]
assert [(o['batch'], o['row']) for o in objs] == [(b, r) for b in range(4) for r in range(ROWS[b])]
same(np.array([[np.float32(o[k]) for k in 'pqr'] for o in objs], dtype=np.float32), want(range(4)), 'jsonl')
print('pw_check: safetensors %s reads the 5 files equal (metadata columns, rows_per_batch); csv and jsonl equal'
      % __import__('safetensors').__version__)
