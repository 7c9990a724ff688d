#!/usr/bin/env python3
"""PyTorch oracle for the two bigger reference models: testdata/autograd/{resnet,gpt}.safetensors.

Run with the project's venv (PyTorch 2.15.0, CPU):

    .venv/bin/python tools/models_oracle.py

Defines the PyTorch side of `exactgrad_nn::reference::{ResNet, Gpt}` (the classes that
`tools/bench_torch.py` times at full size) and writes one forward and backward pass of
each at a small size, from seeded numpy values, in PyTorch (float32, CPU, one thread,
deterministic algorithms, training mode):

- resnet.safetensors: the CIFAR layout of ResNet-18 with the widths 4, 8, 8, 16 and two
  basic blocks per stage, on 4 images of 3×16×16 with 10 classes:
      conv1 (3x3, no bias) -> bn1 -> relu -> layer1 .. layer4 -> adaptive_avg_pool2d(1)
      -> flatten -> fc -> cross_entropy
  each block relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), the shortcut a 1x1
  convolution and a batch norm (`downsample.0`, `downsample.1`) where the stride (2 at
  the first block of stages 2-4) or the width changes. The images take no gradient.
- gpt.safetensors: the GPT-style decoder with vocabulary 16, context 12, width 16, 2
  heads, 2 blocks and a feed-forward block of 32, on 3 sequences of 10 tokens (shorter
  than the context) and their next tokens:
      tok_emb(tokens) + pos_emb(0 .. L-1) -> layers (TransformerEncoderLayer with
      norm_first, GELU, dropout 0, batch first, the causal mask) -> norm -> head (no bias)
      -> cross_entropy over every position

Tensor names in each file: `init/<state_dict name>` (parameters, and the batch norms'
running statistics), `input/x` (images) or `input/tokens`, `input/targets` (int64),
`output/logits`, `loss` (shape [1]), `grad/<state_dict name>` for every parameter and
`after/<state_dict name>` (the running statistics after the step). The `__metadata__`
holds the model's sizes, the generator and torch's version. The Rust side is
`exactgrad_nn::reference::{resnet, gpt}`; `tests/oracles/reference_models.rs` compares.
"""

import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from autograd_oracle import OUT_DIR, f32, summary, write_safetensors  # noqa: E402


# ----------------------------------------------------------------------------------
# ResNet (CIFAR layout)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet(nn.Module):
    """ResNet-18 for 32x32 images by default: a 3x3 stem (no max pool), four stages of
    basic blocks, global average pooling, a linear layer."""

    def __init__(self, c_in=3, widths=(64, 128, 256, 512), blocks=(2, 2, 2, 2), classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, widths[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        cin = widths[0]
        for s, (cout, n) in enumerate(zip(widths, blocks)):
            layer = []
            for i in range(n):
                layer.append(BasicBlock(cin, cout, 2 if s > 0 and i == 0 else 1))
                cin = cout
            setattr(self, f"layer{s + 1}", nn.Sequential(*layer))
        self.fc = nn.Linear(widths[3], classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


# ----------------------------------------------------------------------------------
# GPT-style decoder


class Gpt(nn.Module):
    """Token and position embeddings, pre-norm blocks with causal self-attention and a
    GELU feed-forward block, a final layer norm and a linear head without bias."""

    def __init__(self, vocab=256, context=128, d_model=256, nhead=4, layers=6, dim_feedforward=1024):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, d_model)
        self.pos_emb = nn.Embedding(context, d_model)
        self.layers = nn.ModuleList(
            [
                nn.TransformerEncoderLayer(
                    d_model, nhead, dim_feedforward, dropout=0.0, activation="gelu",
                    batch_first=True, norm_first=True,
                )
                for _ in range(layers)
            ]
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab, bias=False)

    def forward(self, tokens):
        n = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pos_emb(torch.arange(n, device=tokens.device))
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=tokens.device)
        for layer in self.layers:
            x = layer(x, src_mask=mask, is_causal=True)
        return self.head(self.norm(x))


# ----------------------------------------------------------------------------------
# The oracle files


def seeded_values(model, rng):
    """Parameter values from `rng`, by kind: convolution and linear weights uniform in
    ±1/sqrt(fan_in), norm weights in [0.5, 1.5] and biases in ±0.5, embeddings N(0, 1),
    attention input projections in ±sqrt(6 / (4 E)) and their biases in ±0.1."""
    values = {}
    for name, p in model.named_parameters():
        shape = tuple(p.shape)
        module = model.get_submodule(name.rsplit(".", 1)[0]) if "." in name else model
        if isinstance(module, (nn.BatchNorm2d, nn.LayerNorm)):
            v = rng.uniform(0.5, 1.5, shape) if name.endswith("weight") else rng.uniform(-0.5, 0.5, shape)
        elif isinstance(module, nn.Embedding):
            v = rng.normal(0.0, 1.0, shape)
        elif name.endswith("in_proj_weight"):
            bound = np.sqrt(6.0 / (4 * shape[1]))
            v = rng.uniform(-bound, bound, shape)
        elif name.endswith("in_proj_bias") or name.endswith("out_proj.bias"):
            v = rng.uniform(-0.1, 0.1, shape)
        else:
            weight = model.get_parameter(name.rsplit(".", 1)[0] + ".weight")
            bound = 1.0 / np.sqrt(int(np.prod(weight.shape[1:])))
            v = rng.uniform(-bound, bound, shape)
        values[name] = f32(v)
    return values


def load(model, values, buffers):
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(values[name]))
        for name, b in model.named_buffers():
            if name in buffers:
                b.copy_(torch.from_numpy(buffers[name]))


def record(model, values, buffers, tensors, logits, loss):
    loss.backward()
    for name, p in model.named_parameters():
        tensors[f"init/{name}"] = torch.from_numpy(values[name])
        tensors[f"grad/{name}"] = p.grad.detach().clone()
    for name, b in buffers.items():
        tensors[f"init/{name}"] = torch.from_numpy(b)
        tensors[f"after/{name}"] = model.get_buffer(name).detach().clone()
    tensors["output/logits"] = logits.detach().clone()
    tensors["loss"] = loss.detach().reshape(1).clone()
    return tensors


def resnet():
    cfg = dict(c_in=3, widths=(4, 8, 8, 16), blocks=(2, 2, 2, 2), classes=10)
    n, hw = 4, 16
    rng = np.random.default_rng(20240518)
    model = ResNet(**cfg)
    values = seeded_values(model, rng)
    buffers = {}
    for name, b in model.named_buffers():
        if name.endswith("running_mean"):
            buffers[name] = f32(rng.uniform(-0.2, 0.2, tuple(b.shape)))
        elif name.endswith("running_var"):
            buffers[name] = f32(rng.uniform(0.5, 1.5, tuple(b.shape)))
    load(model, values, buffers)
    x_np = f32(rng.normal(0.0, 1.0, (n, cfg["c_in"], hw, hw)))
    targets = rng.integers(0, cfg["classes"], n).astype(np.int64)
    model.train()
    logits = model(torch.from_numpy(x_np.copy()))
    loss = F.cross_entropy(logits, torch.from_numpy(targets))
    tensors = {"input/x": torch.from_numpy(x_np), "input/targets": torch.from_numpy(targets)}
    record(model, values, buffers, tensors, logits, loss)
    meta = {
        "model": "resnet",
        "c_in": str(cfg["c_in"]),
        "widths": ",".join(map(str, cfg["widths"])),
        "blocks": ",".join(map(str, cfg["blocks"])),
        "classes": str(cfg["classes"]),
    }
    return tensors, meta


def gpt():
    cfg = dict(vocab=16, context=12, d_model=16, nhead=2, layers=2, dim_feedforward=32)
    n, length = 3, 10
    rng = np.random.default_rng(20240519)
    model = Gpt(**cfg)
    values = seeded_values(model, rng)
    load(model, values, {})
    seqs = rng.integers(0, cfg["vocab"], (n, length + 1)).astype(np.int64)
    tokens, targets = seqs[:, :-1].copy(), seqs[:, 1:].copy()
    model.train()
    logits = model(torch.from_numpy(tokens))
    loss = F.cross_entropy(logits.reshape(n * length, -1), torch.from_numpy(targets).reshape(-1))
    tensors = {"input/tokens": torch.from_numpy(tokens), "input/targets": torch.from_numpy(targets)}
    record(model, values, {}, tensors, logits, loss)
    meta = {"model": "gpt", **{k: str(v) for k, v in cfg.items()}}
    return tensors, meta


if __name__ == "__main__":
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    os.makedirs(OUT_DIR, exist_ok=True)
    for fname, build in [("resnet.safetensors", resnet), ("gpt.safetensors", gpt)]:
        tensors, meta = build()
        meta["generator"] = "tools/models_oracle.py"
        meta["torch"] = torch.__version__
        path = os.path.join(OUT_DIR, fname)
        write_safetensors(path, tensors, meta)
        print(f"{fname}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")
        print(summary(tensors, []))
