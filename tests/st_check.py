"""tests/st_check.py - train.h's safetensors against the real safetensors package (numpy API).
   st_check.py DIR: reads DIR/c.safetensors (tests/test_safetensors --write DIR) and checks names, shapes,
   values and metadata; writes DIR/py.safetensors (the same tensors + 1, metadata step 9, epoch 3) for
   tests/test_safetensors --read."""
import sys
import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file, save_file

d = sys.argv[1]
name = 'emb.\u00fc "q"'
want = {
    'w': (np.arange(6, dtype=np.float32) * np.float32(0.25) - np.float32(1)).reshape(2, 3),
    'b': np.arange(2, dtype=np.float32) * np.float32(-1.5),
    name: np.float32(1) / (np.arange(4, dtype=np.float32) + np.float32(3)),
    's': np.array(3.5, dtype=np.float32),
    'e': np.zeros((0,), dtype=np.float32),
}
got = load_file(d + '/c.safetensors')
assert sorted(got) == sorted(want), (sorted(got), sorted(want))
for k, v in want.items():
    assert got[k].dtype == np.float32 and got[k].shape == v.shape, (k, got[k].dtype, got[k].shape, v.shape)
    assert np.array_equal(got[k], v), (k, got[k], v)
with safe_open(d + '/c.safetensors', framework='numpy') as f:
    assert f.metadata() == {'step': '7', 'epoch': '2'}, f.metadata()
print('st_check: what C wrote reads equal in safetensors %s (5 tensors, metadata)' % __import__('safetensors').__version__)
save_file({k: np.asarray(v + np.float32(1), dtype=np.float32) for k, v in want.items()}, d + '/py.safetensors', metadata={'step': '9', 'epoch': '3'})
