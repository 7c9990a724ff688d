#!/usr/bin/env python3
"""PyTorch reference learning-rate schedules for exactgrad-nn's schedulers.

Run with the project's venv (PyTorch 2.15.0, CPU):

    .venv/bin/python tools/sched_oracle.py

Writes testdata/nn/schedulers.safetensors:

- "<case>": float64 [steps + 1], the learning rate after the scheduler's construction
  (step 0) and after each of `steps` calls of `optimizer.step(); scheduler.step()`, on a
  one-parameter torch.optim.SGD whose rate starts at `lr`.
- metadata "<case>": the configuration as "key=value;..." with `kind` (the PyTorch
  class), `lr`, `steps` and the scheduler's arguments under PyTorch's names; lists
  (milestones) are "|"-separated. `raises_at=<k>` records that step k raised ValueError
  in PyTorch (OneCycleLR stepped past total_steps). A SequentialLR case has
  `schedulers=<n>` and the inner schedulers in "<case>/<i>" (same format, no lr or steps),
  constructed in that order on the optimizer before the SequentialLR.
- metadata "cases": the case names, comma-separated; "torch": the version.
- "cos/x", "cos/value": float64, arguments and their correctly rounded cosine (mpmath at
  300 bits, rounded to nearest): 4,096 seeded uniform arguments in [-8π, 8π] and every
  argument π·k/T (T ≤ 400, k ≤ 3T) or π·i/10^5 (i ≤ 10^5) where the platform's math.cos
  is not correctly rounded.

Floats are written with repr(), which Rust parses back to the same double. The header's
keys are sorted, so a second run gives identical bytes. The tests only read the file.
"""

import json
import math
import pathlib
import struct

import mpmath
import numpy as np
import torch
from torch.optim import SGD
from torch.optim.lr_scheduler import (
    CosineAnnealingLR,
    ExponentialLR,
    LinearLR,
    MultiStepLR,
    OneCycleLR,
    SequentialLR,
    StepLR,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "nn" / "schedulers.safetensors"

CLASSES = {
    "StepLR": StepLR,
    "MultiStepLR": MultiStepLR,
    "ExponentialLR": ExponentialLR,
    "CosineAnnealingLR": CosineAnnealingLR,
    "LinearLR": LinearLR,
    "OneCycleLR": OneCycleLR,
}

# (case, lr, steps, kind, arguments); a SequentialLR's arguments are
# (milestones, [(kind, arguments), ...]).
CASES = [
    ("step_30_0.1", 0.1, 300, "StepLR", dict(step_size=30, gamma=0.1)),
    ("step_7_0.5", 0.05, 300, "StepLR", dict(step_size=7, gamma=0.5)),
    ("step_1_0.97", 1.0, 250, "StepLR", dict(step_size=1, gamma=0.97)),
    ("multistep_30_80", 0.1, 200, "MultiStepLR", dict(milestones=[30, 80], gamma=0.1)),
    ("multistep_zero_repeated", 0.3, 200, "MultiStepLR", dict(milestones=[0, 10, 10, 50, 50, 50, 120], gamma=0.7)),
    ("exponential_0.99", 0.1, 400, "ExponentialLR", dict(gamma=0.99)),
    ("exponential_0.9", 2.0, 300, "ExponentialLR", dict(gamma=0.9)),
    ("exponential_1.01", 0.001, 200, "ExponentialLR", dict(gamma=1.01)),
    ("cosine_100", 0.1, 300, "CosineAnnealingLR", dict(T_max=100, eta_min=0.0)),
    ("cosine_37_eta", 0.05, 300, "CosineAnnealingLR", dict(T_max=37, eta_min=1e-4)),
    ("cosine_250_eta", 1.0, 300, "CosineAnnealingLR", dict(T_max=250, eta_min=0.001)),
    ("cosine_1", 0.2, 50, "CosineAnnealingLR", dict(T_max=1, eta_min=0.01)),
    ("cosine_eta_above", 0.01, 200, "CosineAnnealingLR", dict(T_max=60, eta_min=0.1)),
    ("linear_default", 0.1, 50, "LinearLR", dict(start_factor=1.0 / 3, end_factor=1.0, total_iters=5)),
    ("linear_decay_to_0", 0.5, 150, "LinearLR", dict(start_factor=1.0, end_factor=0.0, total_iters=100)),
    ("linear_0.01_0.5", 0.3, 300, "LinearLR", dict(start_factor=0.01, end_factor=0.5, total_iters=200)),
    ("onecycle_cos", 0.5, 300, "OneCycleLR", dict(max_lr=0.1, total_steps=300)),
    ("onecycle_linear", 0.5, 257, "OneCycleLR", dict(max_lr=0.5, total_steps=257, pct_start=0.25, anneal_strategy="linear", div_factor=10.0, final_div_factor=100.0)),
    ("onecycle_three_cos", 0.5, 200, "OneCycleLR", dict(max_lr=1.0, total_steps=200, three_phase=True)),
    ("onecycle_three_linear", 0.5, 333, "OneCycleLR", dict(max_lr=0.02, total_steps=333, pct_start=0.45, anneal_strategy="linear", div_factor=5.0, final_div_factor=1000.0, three_phase=True)),
    ("onecycle_epochs", 0.5, 200, "OneCycleLR", dict(max_lr=0.3, epochs=4, steps_per_epoch=50)),
    ("onecycle_short_warmup", 0.5, 10, "OneCycleLR", dict(max_lr=0.1, total_steps=10, pct_start=0.05)),
    ("onecycle_three_late_peak", 0.5, 100, "OneCycleLR", dict(max_lr=0.1, total_steps=100, pct_start=0.6, three_phase=True)),
    ("sequential_warmup_cosine", 0.1, 300, "SequentialLR", ([10], [
        ("LinearLR", dict(start_factor=0.1, end_factor=1.0, total_iters=10)),
        ("CosineAnnealingLR", dict(T_max=290, eta_min=1e-5)),
    ])),
    ("sequential_linear_step_cosine", 0.4, 300, "SequentialLR", ([20, 150], [
        ("LinearLR", dict(start_factor=0.25, end_factor=1.0, total_iters=20)),
        ("StepLR", dict(step_size=30, gamma=0.5)),
        ("CosineAnnealingLR", dict(T_max=100, eta_min=0.0)),
    ])),
    ("sequential_exponential_multistep", 0.2, 120, "SequentialLR", ([40], [
        ("ExponentialLR", dict(gamma=0.95)),
        ("MultiStepLR", dict(milestones=[5, 30], gamma=0.3)),
    ])),
    ("sequential_cosine_first", 0.1, 200, "SequentialLR", ([50], [
        ("CosineAnnealingLR", dict(T_max=50, eta_min=0.01)),
        ("LinearLR", dict(start_factor=0.5, end_factor=0.1, total_iters=100)),
    ])),
    ("sequential_onecycle_cosine", 0.3, 200, "SequentialLR", ([100], [
        ("OneCycleLR", dict(max_lr=0.2, total_steps=100)),
        ("CosineAnnealingLR", dict(T_max=50, eta_min=0.0)),
    ])),
    ("sequential_linear_onecycle", 0.1, 150, "SequentialLR", ([5], [
        ("LinearLR", dict(start_factor=0.5, end_factor=1.0, total_iters=4)),
        ("OneCycleLR", dict(max_lr=0.2, total_steps=150, anneal_strategy="linear")),
    ])),
]


def fmt(v):
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, (list, tuple)):
        return "|".join(fmt(x) for x in v)
    return str(v)


def describe(fields):
    return ";".join(f"{k}={fmt(v)}" for k, v in fields.items())


def build(opt, kind, args):
    if kind == "OneCycleLR":
        # These cases check the rates; the momentum (cycled by default) is checked by the
        # group cases below.
        return OneCycleLR(opt, cycle_momentum=False, **args)
    return CLASSES[kind](opt, **args)


def run_case(name, lr, steps, kind, args, tensors, meta):
    param = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    opt = SGD([param], lr=lr)
    if kind == "SequentialLR":
        milestones, inner = args
        scheds = [build(opt, k, a) for k, a in inner]
        sched = SequentialLR(opt, scheds, milestones=milestones)
        fields = dict(kind=kind, lr=lr, steps=steps, milestones=milestones, schedulers=len(inner))
        for i, (k, a) in enumerate(inner):
            meta[f"{name}/{i}"] = describe(dict(kind=k, **a))
    else:
        sched = build(opt, kind, args)
        fields = dict(kind=kind, lr=lr, steps=steps, **args)
    lrs = [opt.param_groups[0]["lr"]]
    assert sched.get_last_lr()[0] == lrs[0]
    for _ in range(steps):
        param.grad = torch.ones_like(param)
        opt.step()
        sched.step()
        lr_now = opt.param_groups[0]["lr"]
        assert sched.get_last_lr()[0] == lr_now, name
        lrs.append(lr_now)
    if kind == "OneCycleLR":
        total = args.get("total_steps") or args["epochs"] * args["steps_per_epoch"]
        assert steps == total, name
        opt.step()
        try:
            sched.step()
        except ValueError:
            fields["raises_at"] = steps + 1
        else:
            raise AssertionError(f"{name}: stepping past total_steps did not raise")
    tensors[name] = np.array(lrs, dtype=np.float64)
    meta[name] = describe(fields)


def correctly_rounded_cos(x):
    with mpmath.workprec(300):
        return float(mpmath.cos(mpmath.mpf(x)))


def cosine_cases(tensors):
    rng = np.random.default_rng(20240)
    xs = list(rng.uniform(-8 * math.pi, 8 * math.pi, size=4096))
    hard = []
    for t in range(1, 401):
        for k in range(3 * t + 1):
            hard.append(math.pi * k / t)
    hard += [math.pi * (i / 100000) for i in range(100001)]
    # Keep the arguments where the platform's cosine is not correctly rounded.
    extra = sorted({x for x in hard if math.cos(x) != correctly_rounded_cos(x)})
    print(f"cos: {len(extra)} of {len(hard)} schedule arguments where math.cos is off by an ulp")
    xs += extra
    tensors["cos/x"] = np.array(xs, dtype=np.float64)
    tensors["cos/value"] = np.array([correctly_rounded_cos(x) for x in xs], dtype=np.float64)


def write_safetensors(path, tensors, meta):
    """A safetensors file with sorted header keys, so the bytes are reproducible."""
    header = {"__metadata__": dict(sorted(meta.items()))}
    blobs, offset = [], 0
    for name in sorted(tensors):
        raw = np.ascontiguousarray(tensors[name], dtype="<f8").tobytes()
        header[name] = {"dtype": "F64", "shape": list(tensors[name].shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for raw in blobs:
            f.write(raw)


GROUPS_OUT = ROOT / "testdata" / "nn" / "scheduler_groups.safetensors"

# Parameter groups and OneCycleLR's momentum: (case, [lr per group], steps, kind,
# arguments, optimizer). Written to GROUPS_OUT:
# - "<case>/lr/<g>": float64 [steps + 1], group g's rate after construction and each step;
# - "<case>/momentum/<g>": the same for its momentum (SGD's momentum, Adam's beta1), for
#   OneCycleLR with PyTorch's default cycle_momentum=True;
# - metadata "<case>": the configuration as in OUT, with `groups` and `optimizer`.
GROUP_CASES = [
    ("groups_step", [0.1, 0.02], 10, "StepLR", dict(step_size=2, gamma=0.5), "SGD"),
    ("groups_linear", [0.1, 0.02], 6, "LinearLR", dict(start_factor=0.5, end_factor=1.0, total_iters=4), "SGD"),
    ("groups_cosine", [0.1, 0.02], 12, "CosineAnnealingLR", dict(T_max=5, eta_min=0.001), "SGD"),
    ("momentum_onecycle_sgd", [0.1, 0.02], 10, "OneCycleLR", dict(max_lr=1.0, total_steps=10), "SGD"),
    ("momentum_onecycle_adam", [0.1], 20, "OneCycleLR", dict(max_lr=0.01, total_steps=20, anneal_strategy="linear", three_phase=True), "Adam"),
]


def run_group_case(name, lrs, steps, kind, args, optimizer, tensors, meta):
    params = [torch.nn.Parameter(torch.zeros(1, dtype=torch.float64)) for _ in lrs]
    groups = [{"params": [p], "lr": lr} for p, lr in zip(params, lrs)]
    opt = torch.optim.SGD(groups, lr=lrs[0]) if optimizer == "SGD" else torch.optim.Adam(groups, lr=lrs[0])
    sched = CLASSES[kind](opt, **args)  # OneCycleLR: cycle_momentum=True, the default

    def momentum(g):
        return g["momentum"] if optimizer == "SGD" else g["betas"][0]

    rates = [[g["lr"]] for g in opt.param_groups]
    moms = [[momentum(g)] for g in opt.param_groups]
    for _ in range(steps):
        for p in params:
            p.grad = torch.ones_like(p)
        opt.step()
        sched.step()
        for i, g in enumerate(opt.param_groups):
            rates[i].append(g["lr"])
            moms[i].append(momentum(g))
    for i in range(len(lrs)):
        tensors[f"{name}/lr/{i}"] = np.array(rates[i], dtype=np.float64)
        if kind == "OneCycleLR":
            tensors[f"{name}/momentum/{i}"] = np.array(moms[i], dtype=np.float64)
    meta[name] = describe(dict(kind=kind, groups=lrs, steps=steps, optimizer=optimizer, **args))


def group_cases():
    tensors, meta = {}, {}
    for case in GROUP_CASES:
        run_group_case(*case, tensors, meta)
    meta["cases"] = ",".join(c[0] for c in GROUP_CASES)
    meta["torch"] = torch.__version__
    write_safetensors(GROUPS_OUT, tensors, meta)
    print(f"wrote {GROUPS_OUT.relative_to(ROOT)}: {len(GROUP_CASES)} cases")


def main():
    tensors, meta = {}, {}
    for name, lr, steps, kind, args in CASES:
        run_case(name, lr, steps, kind, args, tensors, meta)
    cosine_cases(tensors)
    meta["cases"] = ",".join(c[0] for c in CASES)
    meta["torch"] = torch.__version__
    OUT.parent.mkdir(parents=True, exist_ok=True)
    write_safetensors(OUT, tensors, meta)
    # Read back with the safetensors library.
    from safetensors.numpy import load_file

    back = load_file(str(OUT))
    assert set(back) == set(tensors)
    for k, v in tensors.items():
        assert back[k].tobytes() == v.tobytes(), k
    print(f"wrote {OUT.relative_to(ROOT)}: {len(CASES)} cases, torch {torch.__version__}")
    group_cases()


if __name__ == "__main__":
    main()
