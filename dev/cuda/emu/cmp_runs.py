#!/usr/bin/env python3
"""cmp_runs.py NAME RUN_A RUN_B LOSS_TOL WEIGHT_TOL: compares two training runs' outputs
(for dev/cuda/emu/test_dist.sh): the per-step losses and gradient norms of
metrics.jsonl and validation losses (relative difference at most LOSS_TOL), the final checkpoint's
model.safetensors and state.bin (every tensor and both AdamW moments: largest absolute
difference, relative to the tensor's largest magnitude, at most WEIGHT_TOL; a LoRA checkpoint's
adapter_model.safetensors instead of the model) and the
state's counters and data cursor (exactly equal). One exception: the attention key
biases (the middle third of each attn.c_attn.bias) have a zero gradient in exact
arithmetic (softmax ignores a shift of a whole row of scores), so theirs is rounding
noise that AdamW scales up to steps of up to the learning rate: they are held to an
absolute 1e-3 instead (the tests' runs make 3-4 steps at lr 1e-2). Prints one `ok NAME: ...` or
`FAIL NAME: ...` line; exit status 1 on FAIL."""
import json, os, struct, sys
import numpy as np

name, run_a, run_b = sys.argv[1:4]
loss_tol, weight_tol = float(sys.argv[4]), float(sys.argv[5])


def metrics(run):
    out = {}
    for line in open(os.path.join(run, 'metrics.jsonl')):
        r = json.loads(line)
        if 'loss' in r:
            out[r['step']] = (r['loss'], r['grad_norm'], r['targets'])
        if 'val_loss' in r:  # the same check: the "norm" is the loss again
            out['val %d' % r['step']] = (r['val_loss'], r['val_loss'], r['val_targets'])
    return out


def safetensors(path):
    raw = open(path, 'rb').read()
    n = struct.unpack('<Q', raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for k, v in header.items():
        if k == '__metadata__':
            continue
        a, b = v['data_offsets']
        assert v['dtype'] == 'F32', v['dtype']
        out[k] = np.frombuffer(data[a:b], dtype='<f4')
    return out


def state(path):
    raw = open(path, 'rb').read()
    h = np.frombuffer(raw[:256], dtype='<i8')
    P = int(h[17])
    f = np.frombuffer(raw[256:], dtype='<f4')
    return h[:18], {'adam_m': f[:P], 'adam_v': f[P:2 * P]}


def final_dir(run):
    return os.path.join(run, open(os.path.join(run, 'latest')).read().strip())


def fail(why):
    print(f'FAIL {name}: {why}')
    sys.exit(1)


for run in (run_a, run_b):
    if not os.path.exists(os.path.join(run, 'metrics.jsonl')) or not os.path.exists(os.path.join(run, 'latest')):
        fail(f'{run}: no metrics.jsonl or no final checkpoint (the run failed?)')
ma, mb = metrics(run_a), metrics(run_b)
if sorted(ma, key=str) != sorted(mb, key=str) or not ma:
    fail(f'different logged steps: {sorted(ma, key=str)} vs {sorted(mb, key=str)}')
worst_loss = 0.0
for s in ma:
    (la, na, ta), (lb, nb, tb) = ma[s], mb[s]
    if ta != tb:
        fail(f'step {s}: {ta} vs {tb} targets')
    for x, y, what in ((la, lb, 'loss'), (na, nb, 'grad norm')):
        d = abs(x - y) / max(abs(x), 1e-30)
        worst_loss = max(worst_loss, d)
        if not d <= loss_tol:
            fail(f'step {s}: {what} {x!r} vs {y!r} (relative difference {d:.2e} > {loss_tol:g})')
da, db = final_dir(run_a), final_dir(run_b)
weights = 'adapter_model.safetensors' if os.path.exists(os.path.join(da, 'adapter_model.safetensors')) else 'model.safetensors'
ta, tb = safetensors(os.path.join(da, weights)), safetensors(os.path.join(db, weights))
ha, sa = state(os.path.join(da, 'state.bin'))
hb, sb = state(os.path.join(db, 'state.bin'))
if not np.array_equal(ha, hb):
    fail(f'state.bin counters differ: {ha.tolist()} vs {hb.tolist()}')
ta.update(sa)
tb.update(sb)
if sorted(ta) != sorted(tb):
    fail('different tensors')
worst, where = 0.0, ''
for k in ta:
    a, b = ta[k].astype(np.float64), tb[k].astype(np.float64)
    if k.endswith('attn.c_attn.bias'):
        C = a.size // 3
        kd = np.abs(a[C:2 * C] - b[C:2 * C]).max()
        if not kd <= 1e-3:
            fail(f'{k}: the key biases differ by {kd:.2e} > 1e-3')
        a, b = np.delete(a, np.s_[C:2 * C]), np.delete(b, np.s_[C:2 * C])
    scale = max(np.abs(a).max(), 1e-30)
    d = np.abs(a - b).max() / scale
    if not d <= worst:
        worst, where = d, k
if not worst <= weight_tol:
    fail(f'{where}: largest difference {worst:.2e} of its largest magnitude > {weight_tol:g}')
print(f'ok {name}: {len(ma)} step and validation records, losses and norms within {worst_loss:.1e} (tolerance {loss_tol:g}); '
      f'weights and moments within {worst:.1e} ({where}; tolerance {weight_tol:g}); counters equal')
