#!/usr/bin/env python3
"""PyTorch reference results for exactgrad-nn: optimizers, clipping, Linear, a small MLP.

Run with the project's venv (PyTorch 2.15.0, CPU):

    .venv/bin/python tools/nn_oracle.py

Writes, under testdata/nn/:

- optim.safetensors: for each optimizer case, the initial parameters, the gradient
  given before every step and the parameters after every step, from seeded numpy
  values run through torch.optim (single-tensor implementation, foreach=False, as on
  CPU by default). Tensor names: "<case>/p<i>/init", "<case>/g<i>/s<k>",
  "<case>/p<i>/s<k>" (k = 1, 2, ...). The metadata entry "<case>" holds the
  hyper-parameters as "key=value;..." and "cases" the case names, comma-separated.
- optim_groups.safetensors: the same for optimizers with two parameter groups (the
  group's own settings in the metadata under `group1.`).
- clip.safetensors: gradients before and after clip_grad_norm_ / clip_grad_value_ and
  the total norms: "<case>/g<i>/before", "<case>/g<i>/after", "<case>/norm" (shape [1]).
- linear.safetensors: per case x, weight, bias (if any), the upstream gradient gy, and
  torch's y, dx, dweight, dbias for y = nn.functional.linear(x, weight, bias).
- mlp.safetensors: a Linear(64,32)-ReLU-Linear(32,10) on 64 digits images (pixels / 16)
  with given initial weights, trained 3 full-batch steps with Adam(lr=1e-2) on the mean
  cross entropy: the inputs, labels, loss of every step and parameters after every step.

Every input is drawn from numpy's PCG64 with fixed seeds, so every tensor and metadata
entry is reproducible (the order of keys in a file's JSON header may vary between
runs). The tests read only the files and never need Python.
"""

import pathlib

import numpy as np
import torch
from safetensors.numpy import save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "nn"
STEPS = 5
SHAPES = [(4, 3), (5,)]


def f32(a):
    # Always a copy: a view of a parameter would change with later in-place steps.
    return np.array(a, dtype=np.float32, order="C", copy=True)


def run_optimizer(name, make, cfg, seed, tensors, meta):
    rng = np.random.default_rng(seed)
    inits = [f32(rng.uniform(-1.0, 1.0, size=s)) for s in SHAPES]
    params = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in inits]
    opt = make(params)
    for i, a in enumerate(inits):
        tensors[f"{name}/p{i}/init"] = a
    for k in range(1, STEPS + 1):
        # Gradients of varying scale, with an exact zero and a sign change in the mix.
        scale = [0.5, 2.0, 0.05, 1.0, 0.3][k - 1]
        for i, (p, s) in enumerate(zip(params, SHAPES)):
            g = f32(rng.normal(0.0, scale, size=s))
            g.reshape(-1)[0] = 0.0
            tensors[f"{name}/g{i}/s{k}"] = g
            p.grad = torch.from_numpy(g.copy())
        opt.step()
        for i, p in enumerate(params):
            tensors[f"{name}/p{i}/s{k}"] = f32(p.detach().numpy())
    meta[name] = ";".join(f"{k}={v}" for k, v in cfg.items())


def optim_cases():
    tensors, meta = {}, {}
    sgd = [
        ("sgd_plain", dict(lr=0.1)),
        ("sgd_momentum_dampening_wd", dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=0.01)),
        ("sgd_nesterov_wd", dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
        ("sgd_maximize", dict(lr=0.1, momentum=0.5, maximize=True)),
    ]
    adam = [
        ("adam_default", "adam", dict(lr=0.01)),
        ("adam_l2_amsgrad", "adam", dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1, amsgrad=True)),
        ("adam_maximize_eps", "adam", dict(lr=0.005, eps=1e-3, maximize=True)),
        ("adamw_default", "adamw", dict(lr=0.01)),
        ("adamw_amsgrad", "adamw", dict(lr=0.02, betas=(0.85, 0.995), weight_decay=0.05, amsgrad=True)),
    ]
    seed = 100
    for name, cfg in sgd:
        seed += 1
        run_optimizer(
            name,
            lambda ps, cfg=cfg: torch.optim.SGD(ps, foreach=False, **cfg),
            dict(kind="sgd", **cfg),
            seed,
            tensors,
            meta,
        )
    for name, kind, cfg in adam:
        seed += 1
        cls = torch.optim.Adam if kind == "adam" else torch.optim.AdamW
        flat = {k: v for k, v in cfg.items() if k != "betas"}
        if "betas" in cfg:
            flat["beta1"], flat["beta2"] = cfg["betas"]
        run_optimizer(
            name,
            lambda ps, cfg=cfg, cls=cls: cls(ps, foreach=False, **cfg),
            dict(kind=kind, **flat),
            seed,
            tensors,
            meta,
        )
    meta["cases"] = ",".join(n for n, _ in sgd) + "," + ",".join(n for n, _, _ in adam)
    meta["torch"] = torch.__version__
    save_file(tensors, str(OUT / "optim.safetensors"), metadata=meta)


def optim_group_cases():
    """Parameter groups: the even-indexed parameters in group 0 with the optimizer's
    settings, the odd-indexed ones in group 1 with their own (`group1` in the metadata).
    Written to optim_groups.safetensors with the names of optim.safetensors
    (nn/tests/nn/torch_oracle.rs, `optimizer_groups_match_torch`)."""
    tensors, meta = {}, {}
    cases = [
        ("sgd_groups", "sgd", dict(lr=0.1, momentum=0.9), dict(lr=0.01, weight_decay=0.5, momentum=0.0)),
        ("adam_groups", "adam", dict(lr=0.01), dict(lr=0.001, betas=(0.5, 0.9))),
        ("adamw_gpt_recipe", "adamw", dict(lr=0.01, weight_decay=0.1), dict(weight_decay=0.0)),
    ]
    cls = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}
    seed = 200
    for name, kind, cfg, group1 in cases:
        seed += 1

        def make(ps, kind=kind, cfg=cfg, group1=group1):
            groups = [{"params": ps[0::2]}, {"params": ps[1::2], **group1}]
            return cls[kind](groups, foreach=False, **cfg)

        flat = dict(kind=kind, **cfg)
        flat.update({f"group1.{k}": v for k, v in group1.items()})
        run_optimizer(name, make, flat, seed, tensors, meta)
    meta["cases"] = ",".join(c[0] for c in cases)
    meta["torch"] = torch.__version__
    save_file(tensors, str(OUT / "optim_groups.safetensors"), metadata=meta)


def clip_cases():
    tensors, meta = {}, {}
    rng = np.random.default_rng(7)
    cases = [("norm_clips", "norm", 1.0), ("norm_no_clip", "norm", 100.0), ("value", "value", 0.4)]
    for name, kind, limit in cases:
        grads = [f32(rng.normal(0.0, 1.0, size=s)) for s in SHAPES]
        params = [torch.nn.Parameter(torch.zeros(s)) for s in SHAPES]
        for p, g in zip(params, grads):
            p.grad = torch.from_numpy(g.copy())
        if kind == "norm":
            norm = torch.nn.utils.clip_grad_norm_(params, limit, foreach=False)
            tensors[f"{name}/norm"] = f32([norm.item()])
        else:
            torch.nn.utils.clip_grad_value_(params, limit, foreach=False)
        for i, (p, g) in enumerate(zip(params, grads)):
            tensors[f"{name}/g{i}/before"] = g
            tensors[f"{name}/g{i}/after"] = f32(p.grad.numpy())
        meta[name] = f"kind={kind};limit={limit}"
    meta["cases"] = ",".join(n for n, _, _ in cases)
    meta["torch"] = torch.__version__
    save_file(tensors, str(OUT / "clip.safetensors"), metadata=meta)


def linear_cases():
    tensors, meta = {}, {}
    rng = np.random.default_rng(11)
    cases = [("batch2d", (6, 5), 3, True), ("batch3d_nobias", (2, 4, 5), 7, False), ("vector", (5,), 2, True)]
    for name, xshape, out_f, has_bias in cases:
        in_f = xshape[-1]
        bound = 1.0 / np.sqrt(in_f)
        x = f32(rng.normal(0.0, 1.0, size=xshape))
        w = f32(rng.uniform(-bound, bound, size=(out_f, in_f)))
        b = f32(rng.uniform(-bound, bound, size=(out_f,))) if has_bias else None
        tx = torch.from_numpy(x.copy()).requires_grad_()
        tw = torch.from_numpy(w.copy()).requires_grad_()
        tb = torch.from_numpy(b.copy()).requires_grad_() if has_bias else None
        y = torch.nn.functional.linear(tx, tw, tb)
        gy = f32(rng.normal(0.0, 1.0, size=tuple(y.shape)))
        y.backward(torch.from_numpy(gy.copy()))
        tensors.update({f"{name}/x": x, f"{name}/weight": w, f"{name}/gy": gy})
        tensors.update({f"{name}/y": f32(y.detach().numpy()), f"{name}/dx": f32(tx.grad.numpy()), f"{name}/dweight": f32(tw.grad.numpy())})
        if has_bias:
            tensors[f"{name}/bias"] = b
            tensors[f"{name}/dbias"] = f32(tb.grad.numpy())
        meta[name] = f"bias={int(has_bias)}"
    meta["cases"] = ",".join(n for n, _, _, _ in cases)
    meta["torch"] = torch.__version__
    save_file(tensors, str(OUT / "linear.safetensors"), metadata=meta)


def mlp_case():
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = f32(digits.data[:64] / 16.0)
    labels = np.asarray(digits.target[:64], dtype=np.int64)
    rng = np.random.default_rng(2024)
    sizes = [(32, 64), (10, 32)]
    tensors = {"x": x, "labels": labels}
    layers = []
    for li, (o, i) in enumerate(sizes):
        bound = 1.0 / np.sqrt(i)
        w = f32(rng.uniform(-bound, bound, size=(o, i)))
        b = f32(rng.uniform(-bound, bound, size=(o,)))
        lin = torch.nn.Linear(i, o)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w))
            lin.bias.copy_(torch.from_numpy(b))
        layers.append(lin)
    model = torch.nn.Sequential(layers[0], torch.nn.ReLU(), layers[1])
    for name, p in model.named_parameters():
        tensors[f"{name}/init"] = f32(p.detach().numpy())
    opt = torch.optim.Adam(model.parameters(), lr=1e-2, foreach=False)
    tx, ty = torch.from_numpy(x), torch.from_numpy(labels)
    losses = []
    for k in range(1, 4):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(tx), ty)
        loss.backward()
        losses.append(loss.item())
        if k == 1:
            for name, p in model.named_parameters():
                tensors[f"{name}/grad1"] = f32(p.grad.numpy())
        opt.step()
        for name, p in model.named_parameters():
            tensors[f"{name}/s{k}"] = f32(p.detach().numpy())
    tensors["losses"] = f32(losses)
    save_file(tensors, str(OUT / "mlp.safetensors"), metadata={"torch": torch.__version__, "lr": "0.01", "steps": "3"})


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    optim_cases()
    optim_group_cases()
    clip_cases()
    linear_cases()
    mlp_case()
    for p in sorted(OUT.glob("*.safetensors")):
        print(f"wrote {p.relative_to(ROOT)} ({p.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
