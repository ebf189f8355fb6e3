#!/usr/bin/env python3
"""Reference parameters for tests/test_groups.c: torch.optim.AdamW and torch.optim.SGD with parameter groups,
over the test's tiny model, written as float32 bit patterns. Run once:

    python3 tests/gen_groups_ref.py > tests/groups_ref.h

torch is not needed: the optimizers are written here with numpy, operation for operation as torch's documented
single-tensor algorithm (torch/optim/adamw.py and sgd.py, foreach=False, the CPU default) does them, in float32
with the per-step scalars in Python floats (doubles) rounded once, as torch passes them to its kernels:
    AdamW  p.mul_(1 - lr*wd); m.lerp_(g, 1 - b1); v.mul_(b2).addcmul_(g, g, value=1 - b2)
           denom = (v.sqrt() / sqrt(1 - b2**t)).add_(eps); p.addcdiv_(m, denom, value=-lr / (1 - b1**t))
    SGD    d = g + wd*p; buf = d (first) or buf*momentum + (1 - dampening)*d; p.add_(buf, alpha=-lr)
A parameter group is a list of tensors with its lr and weight_decay; a tensor with requires_grad = False (frozen)
is in no group's update and has no state; each tensor's state (its step t, m, v, momentum buffer) is made at its
first update. The fine-tuning case adds the backbone as new groups when it is unfrozen (Lightning's
BackboneFinetuning: unfreeze_and_add_param_group) and sets their lr at each later epoch's start.
"""
import numpy as np

F = np.float32
TENSORS = [("emb", 6), ("bb.w", 8), ("bb.b", 4), ("bb.norm", 3), ("fc.w", 12), ("fc.b", 4), ("head.w", 6)]
LR, WD = 1e-2, 0.1
EPOCHS, BATCHES = 5, 3


def init():
    n = sum(c for _, c in TENSORS)
    flat = np.array([F(((j * 5) % 11 - 5) * 0.1) for j in range(n)], dtype=F)
    out, off = {}, 0
    for name, c in TENSORS:
        out[name] = (flat[off:off + c].copy(), off)
        off += c
    return out


def grad(p, off, s):  # the test model's backward at its s-th call: an exact k/8 plus p/2, rounded once
    k = np.array([((off + j) * 7 + s * 13) % 17 - 8 for j in range(len(p))], dtype=F) * F(0.125)
    return k + F(0.5) * p


def lerp(a, b, w):  # torch's lerp on the CPU: two forms, by the weight
    w = F(w)
    return a + w * (b - a) if w < 0.5 else b - (b - a) * (F(1) - w)


def adamw_step(p, g, st, lr, wd, b1=0.9, b2=0.999, eps=1e-8):
    st["t"] += 1
    t = st["t"]
    if wd != 0:
        p *= F(1 - lr * wd)
    st["m"] = lerp(st["m"], g, 1 - b1)
    st["v"] = st["v"] * F(b2) + (F(1 - b2) * g) * g
    denom = np.sqrt(st["v"]) / F(np.sqrt(1 - b2 ** t)) + F(eps)
    p += (F(-lr / (1 - b1 ** t)) * st["m"]) / denom


def sgd_step(p, g, st, lr, wd, momentum=0.9):
    d = g + F(wd) * p if wd != 0 else g
    st["buf"] = d.copy() if "buf" not in st else st["buf"] * F(momentum) + F(1.0) * d
    p += F(-lr) * st["buf"]


def run(kind, groups, finetune=None):
    """groups: [(names, lr, wd)]; finetune: (backbone names, no-decay names, unfreeze epoch, ratio, factor)."""
    P = init()
    state = {}
    groups = [list(g) for g in groups]
    ratio = None
    s = 0
    for e in range(EPOCHS):
        if finetune and e == finetune[2]:  # on_train_epoch_start: unfreeze_and_add_param_group
            ratio = finetune[3]
            groups.append([[n for n in finetune[0] if n not in finetune[1]], LR * ratio, WD])
            groups.append([[n for n in finetune[0] if n in finetune[1]], LR * ratio, 0.0])
        elif finetune and e > finetune[2]:  # the lr at the next epoch's start, aligned with the run's
            ratio = min(ratio * finetune[4], 1.0)
            groups[-1][1] = groups[-2][1] = LR * ratio
        for _ in range(BATCHES):
            G = {n: grad(P[n][0], P[n][1], s) for n in P}
            s += 1
            for names, lr, wd in groups:
                for n in names:
                    st = state.setdefault(n, {"t": 0, "m": np.zeros_like(P[n][0]), "v": np.zeros_like(P[n][0])})
                    (adamw_step if kind == "adamw" else sgd_step)(P[n][0], G[n], st, lr, wd)
    return np.concatenate([P[n][0] for n, _ in TENSORS])


ALL = [n for n, _ in TENSORS]
NODECAY = ["bb.b", "bb.norm", "fc.b"]
CASES = {
    # no groups: one update over everything
    "plain": ("adamw", [(ALL, LR, WD)], None),
    # param_group(match=*.b|*norm|emb, weight_decay=0); param_group(match=head.*, lr_mult=10);
    # param_group(match=emb, frozen=true)
    "groups": ("adamw", [([n for n in ALL if n not in NODECAY + ["emb", "head.w"]], LR, WD), (NODECAY, LR, 0.0),
                         (["head.w"], LR * 10, WD)], None),
    "groups_sgd": ("sgd", [([n for n in ALL if n not in NODECAY + ["emb", "head.w"]], LR, WD), (NODECAY, LR, 0.0),
                           (["head.w"], LR * 10, WD)], None),
    # those, and finetuning(match=bb.*, norms=*norm, unfreeze_at_epoch=2, initial_ratio=0.3, lr_factor=2):
    # bb.norm trains from the start (train_norms), bb.w and bb.b from epoch 2 at 0.3, 0.6, then 1 (aligned) x lr
    "finetune": ("adamw", [(["fc.w"], LR, WD), (["fc.b", "bb.norm"], LR, 0.0), (["head.w"], LR * 10, WD)],
                 (["bb.w", "bb.b"], NODECAY, 2, 0.3, 2.0)),
}

print("/* tests/groups_ref.h - GENERATED by tests/gen_groups_ref.py (numpy, torch's single-tensor AdamW and SGD")
print("   with parameter groups): the test model's parameters after %d epochs of %d steps, as float32 bits. */" % (EPOCHS, BATCHES))
for name, (kind, groups, ft) in CASES.items():
    out = run(kind, groups, ft)
    bits = out.view(np.uint32)
    print("static const uint32_t groups_ref_%s[%d] = {" % (name, len(bits)))
    for i in range(0, len(bits), 6):
        print("  " + ", ".join("0x%08xu" % b for b in bits[i:i + 6]) + ",")
    print("};")
