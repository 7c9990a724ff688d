#!/usr/bin/env python3
"""PyTorch oracle for the two reference models: testdata/autograd/*.safetensors.

Run with the project's venv (PyTorch 2.15.0, CPU):

    .venv/bin/python tools/autograd_oracle.py

Builds, from seeded numpy values, the two models of `exactgrad_nn::reference`, runs one
forward and backward pass in PyTorch (float32, CPU, one thread, deterministic
algorithms, training mode) as a black box and writes:

- conv_net.safetensors: a conv net of 15 operators,
      conv1 (3->C1, 3x3, pad 1, with bias) -> bn1 -> relu -> max_pool2d(2)
      -> conv2 (C1->C2, 3x3, pad 1, with bias) -> bn2 -> relu -> avg_pool2d(2)
      -> adaptive_avg_pool2d(2, 2) -> flatten -> fc1 -> relu -> fc2
      -> cross_entropy (mean over the batch).
  The convolution biases feed batch norms, so their gradients are zero in theory.
- encoder.safetensors: a two-layer transformer encoder, batch_first,
      layers.0 = TransformerEncoderLayer(norm_first=False)  (post-norm)
      layers.1 = TransformerEncoderLayer(norm_first=True)   (pre-norm)
      -> norm (LayerNorm) -> head (Linear) -> cross_entropy over the tokens
  with GELU feed-forward, dropout 0 and a key padding mask (padded tokens are ignored
  by attention and by the loss, ignore_index = -100). The key part of every
  in_proj_bias (rows E..2E) has a gradient that is zero in theory.
- mha.safetensors: nn.MultiheadAttention(16, 2) alone, sequence first (batch_first
  False), cross-attention (query [5, 3, 16], key and value [6, 3, 16]) with a boolean
  key padding mask and a float per-head attn_mask [N * heads, L, S]; the loss is
  sum(out * input/upstream). Gradients of the parameters and of query, key and value.

Tensor names in each file:

    init/<state_dict name>      initial parameters and buffers (batch-norm running
                                statistics; num_batches_tracked is not stored)
    input/x                     the float input (requires grad)
    input/targets               class indices (int64)
    input/key_padding_mask      bool [N, S], True = padded (encoder only)
    output/logits               the model's output
    loss                        the loss, shape [1]
    grad/<state_dict name>      gradient of every parameter
    grad/input                  gradient of the input
    after/<state_dict name>     buffers after the step (running statistics updated)

and the `__metadata__` holds the model sizes (`model`, `c_in`, `c1`, `c2`, `hidden`, `classes`,
or `d_model`, `nhead`, `dim_feedforward`, `classes`, `lengths`), the generator and torch's
version. The Rust side is `exactgrad_nn::reference`; `tests/oracles/reference_models.rs` compares.
The header's keys are sorted, so running the script again gives identical bytes.
"""

import json
import os
import struct
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors import safe_open

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)
torch.set_default_dtype(torch.float32)

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "autograd")


def f32(a):
    return np.ascontiguousarray(a, dtype=np.float32)


# ----------------------------------------------------------------------------------
# The conv net


class ConvNet(nn.Module):
    def __init__(self, c_in, c1, c2, hidden, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c1, 3, padding=1, bias=True)
        self.bn1 = nn.BatchNorm2d(c1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1, bias=True)
        self.bn2 = nn.BatchNorm2d(c2)
        self.fc1 = nn.Linear(c2 * 4, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.avg_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = torch.flatten(F.adaptive_avg_pool2d(x, (2, 2)), 1)
        return self.fc2(F.relu(self.fc1(x)))


def conv_net():
    cfg = dict(c_in=3, c1=16, c2=32, hidden=64, classes=10)
    n, hw = 4, 16
    rng = np.random.default_rng(20240501)
    model = ConvNet(**cfg)
    values = {}
    for name, p in model.named_parameters():
        shape = tuple(p.shape)
        if name.startswith("bn"):
            v = rng.uniform(0.5, 1.5, shape) if name.endswith("weight") else rng.uniform(-0.5, 0.5, shape)
        else:
            fan_in = int(np.prod(model.get_parameter(name.rsplit(".", 1)[0] + ".weight").shape[1:]))
            bound = 1.0 / np.sqrt(fan_in)
            v = rng.uniform(-bound, bound, shape)
        values[name] = f32(v)
    buffers = {}
    for name, b in model.named_buffers():
        if name.endswith("running_mean"):
            buffers[name] = f32(rng.uniform(-0.2, 0.2, tuple(b.shape)))
        elif name.endswith("running_var"):
            buffers[name] = f32(rng.uniform(0.5, 1.5, tuple(b.shape)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(values[name]))
        for name, b in model.named_buffers():
            if name in buffers:
                b.copy_(torch.from_numpy(buffers[name]))
    x_np = f32(rng.normal(0.0, 1.0, (n, cfg["c_in"], hw, hw)))
    targets = rng.integers(0, cfg["classes"], n).astype(np.int64)

    model.train()
    x = torch.from_numpy(x_np.copy()).requires_grad_(True)
    logits = model(x)
    loss = F.cross_entropy(logits, torch.from_numpy(targets))
    loss.backward()

    tensors = {"input/x": torch.from_numpy(x_np), "input/targets": torch.from_numpy(targets)}
    for name, p in model.named_parameters():
        tensors[f"init/{name}"] = torch.from_numpy(values[name])
        tensors[f"grad/{name}"] = p.grad.detach().clone()
    for name, b in buffers.items():
        tensors[f"init/{name}"] = torch.from_numpy(b)
        tensors[f"after/{name}"] = model.get_buffer(name).detach().clone()
    tensors["grad/input"] = x.grad.detach().clone()
    tensors["output/logits"] = logits.detach().clone()
    tensors["loss"] = loss.detach().reshape(1).clone()
    meta = {"model": "conv_net", **{k: str(v) for k, v in cfg.items()}}
    return tensors, meta


# ----------------------------------------------------------------------------------
# The transformer encoder


class Encoder(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward, classes):
        super().__init__()
        self.layers = nn.ModuleList(
            [
                nn.TransformerEncoderLayer(
                    d_model, nhead, dim_feedforward, dropout=0.0, activation="gelu",
                    batch_first=True, norm_first=norm_first,
                )
                for norm_first in (False, True)
            ]
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, classes)

    def forward(self, x, key_padding_mask):
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=key_padding_mask)
        return self.head(self.norm(x))


def encoder():
    cfg = dict(d_model=32, nhead=4, dim_feedforward=64, classes=8)
    n, s = 4, 10
    lengths = [10, 7, 4, 9]
    rng = np.random.default_rng(20240502)
    model = Encoder(**cfg)
    e = cfg["d_model"]
    values = {}
    for name, p in model.named_parameters():
        shape = tuple(p.shape)
        if name.endswith("in_proj_weight"):
            bound = np.sqrt(6.0 / (4 * e))
            v = rng.uniform(-bound, bound, shape)
        elif name.endswith("in_proj_bias") or name.endswith("out_proj.bias"):
            v = rng.uniform(-0.1, 0.1, shape)
        elif "norm" in name:
            v = rng.uniform(0.8, 1.2, shape) if name.endswith("weight") else rng.uniform(-0.1, 0.1, shape)
        else:
            weight = model.get_parameter(name.rsplit(".", 1)[0] + ".weight")
            bound = 1.0 / np.sqrt(weight.shape[1])
            v = rng.uniform(-bound, bound, shape)
        values[name] = f32(v)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(values[name]))
    x_np = f32(rng.normal(0.0, 1.0, (n, s, e)))
    mask_np = np.array([[j >= length for j in range(s)] for length in lengths], dtype=bool)
    targets = rng.integers(0, cfg["classes"], (n, s)).astype(np.int64)
    targets[mask_np] = -100

    model.train()
    x = torch.from_numpy(x_np.copy()).requires_grad_(True)
    mask = torch.from_numpy(mask_np)
    logits = model(x, mask)
    loss = F.cross_entropy(logits.reshape(n * s, -1), torch.from_numpy(targets).reshape(-1), ignore_index=-100)
    loss.backward()

    tensors = {
        "input/x": torch.from_numpy(x_np),
        "input/targets": torch.from_numpy(targets),
        "input/key_padding_mask": mask,
    }
    for name, p in model.named_parameters():
        tensors[f"init/{name}"] = torch.from_numpy(values[name])
        tensors[f"grad/{name}"] = p.grad.detach().clone()
    tensors["grad/input"] = x.grad.detach().clone()
    tensors["output/logits"] = logits.detach().clone()
    tensors["loss"] = loss.detach().reshape(1).clone()
    meta = {"model": "encoder", "lengths": ",".join(map(str, lengths)), **{k: str(v) for k, v in cfg.items()}}
    return tensors, meta


# ----------------------------------------------------------------------------------
# nn.MultiheadAttention alone: sequence-first, cross-attention, both mask kinds


def mha():
    e, h, l, s, n = 16, 2, 5, 6, 3
    rng = np.random.default_rng(20240503)
    model = nn.MultiheadAttention(e, h, batch_first=False)
    values = {}
    for name, p in model.named_parameters():
        bound = np.sqrt(6.0 / (4 * e)) if name == "in_proj_weight" else (0.1 if "bias" in name else 1.0 / np.sqrt(e))
        values[name] = f32(rng.uniform(-bound, bound, tuple(p.shape)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(values[name]))
    q_np = f32(rng.normal(0.0, 1.0, (l, n, e)))
    k_np = f32(rng.normal(0.0, 1.0, (s, n, e)))
    v_np = f32(rng.normal(0.0, 1.0, (s, n, e)))
    kpm_np = np.zeros((n, s), dtype=bool)
    kpm_np[1, 4:] = True
    kpm_np[2, 0] = True
    attn_np = f32(rng.normal(0.0, 1.0, (n * h, l, s)))
    upstream = f32(rng.normal(0.0, 1.0, (l, n, e)))

    model.train()
    q, k, v = (torch.from_numpy(a.copy()).requires_grad_(True) for a in (q_np, k_np, v_np))
    with warnings.catch_warnings():
        # A boolean key padding mask with a float attn_mask is deprecated in PyTorch but
        # still supported (the padding becomes -inf and the masks are added); it is the
        # combination this case checks.
        warnings.simplefilter("ignore", UserWarning)
        out, _ = model(q, k, v, key_padding_mask=torch.from_numpy(kpm_np), attn_mask=torch.from_numpy(attn_np),
                       need_weights=False)
    loss = (out * torch.from_numpy(upstream)).sum()
    loss.backward()
    tensors = {
        "input/query": torch.from_numpy(q_np),
        "input/key": torch.from_numpy(k_np),
        "input/value": torch.from_numpy(v_np),
        "input/key_padding_mask": torch.from_numpy(kpm_np),
        "input/attn_mask": torch.from_numpy(attn_np),
        "input/upstream": torch.from_numpy(upstream),
        "output/out": out.detach().clone(),
        "loss": loss.detach().reshape(1).clone(),
        "grad/query": q.grad.detach().clone(),
        "grad/key": k.grad.detach().clone(),
        "grad/value": v.grad.detach().clone(),
    }
    for name, p in model.named_parameters():
        tensors[f"init/{name}"] = torch.from_numpy(values[name])
        tensors[f"grad/{name}"] = p.grad.detach().clone()
    meta = {"model": "mha", "embed_dim": str(e), "num_heads": str(h)}
    return tensors, meta


# ----------------------------------------------------------------------------------


def write_safetensors(path, tensors, meta):
    """A safetensors file with the header's keys sorted, so that the bytes are reproducible."""
    header = {"__metadata__": dict(sorted(meta.items()))}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        dtype = {torch.float32: "F32", torch.int64: "I64", torch.bool: "BOOL"}[t.dtype]
        a = t.numpy()
        raw = a.astype(a.dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for raw in blobs:
            f.write(raw)
    with safe_open(path, "pt") as f:
        assert f.metadata() == header["__metadata__"]
        for name in tensors:
            assert f.get_tensor(name).numpy().tobytes() == tensors[name].contiguous().numpy().tobytes(), name


def summary(tensors, zero_names):
    """The largest gradient magnitude and the zero-in-theory gradients relative to it."""
    grads = {k[5:]: v for k, v in tensors.items() if k.startswith("grad/")}
    largest = max(float(g.abs().max()) for g in grads.values())
    out = [f"loss {float(tensors['loss'][0]):.6f}, largest gradient {largest:.3e}"]
    for name, sl in zero_names:
        part = "" if sl is None else f"[{sl.start}:{sl.stop}]"
        rel = float(grads[name][sl or slice(None)].abs().max()) / largest
        out.append(f"  {name}{part}: {rel:.2e} of the largest")
    return "\n".join(out)


if __name__ == "__main__":
    os.makedirs(OUT_DIR, exist_ok=True)
    total = 0
    for fname, build, zeros in [
        ("conv_net.safetensors", conv_net, [("conv1.bias", None), ("conv2.bias", None)]),
        ("encoder.safetensors", encoder, [(f"layers.{i}.self_attn.in_proj_bias", slice(32, 64)) for i in range(2)]),
        ("mha.safetensors", mha, [("in_proj_bias", slice(16, 32))]),
    ]:
        tensors, meta = build()
        meta["generator"] = "tools/autograd_oracle.py"
        meta["torch"] = torch.__version__
        path = os.path.join(OUT_DIR, fname)
        write_safetensors(path, tensors, meta)
        size = os.path.getsize(path)
        total += size
        print(f"{fname}: {len(tensors)} tensors, {size} bytes")
        print(summary(tensors, zeros))
    print(f"total {total} bytes")
