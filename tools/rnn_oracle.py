#!/usr/bin/env python3
"""PyTorch oracle for the recurrent layers, the CTC loss, interpolate and the decoder
(transposed convolutions): testdata/autograd/{crnn,gru,resize,decoder}.safetensors.

Run with the project's venv (PyTorch 2.15.0, CPU):

    .venv/bin/python tools/rnn_oracle.py

Builds every model from seeded numpy values, runs one forward and backward pass in
PyTorch (float32, CPU, one thread, deterministic algorithms, training mode) as a black
box and writes:

- crnn.safetensors: a CRNN for line recognition,
      conv1 (1->C1, 3x3, pad 1) -> relu -> max_pool2d(2)
      -> conv2 (C1->C2, 3x3, pad 1) -> relu -> max_pool2d(2)
      -> collapse the height: [N, C2, H', W'] -> [W', N, C2*H'] (feature c*H' + h)
      -> lstm (2 layers, bidirectional, sequence first) -> fc (Linear 2*hidden -> classes)
      -> log_softmax over the classes -> ctc_loss (blank 0, mean)
  with unequal input lengths (the W' steps and fewer) and unequal target lengths, the
  first target repeating a label. Besides the model, `ctc/...` holds stand-alone CTC
  cases on random logits (log_softmax, then ctc_loss): target set `a` (padded, blank 0,
  repeated labels, an empty target, unequal lengths) and set `b` (concatenated, blank 3,
  one impossible alignment), each with the three reductions and zero_infinity off and
  on: the loss and the gradient of the logits (upstream of log_softmax), computed by
  PyTorch in float32 (`.../loss_f32`, `.../grad_logits_f32`) and in float64 from the
  same float32 logits (`.../loss`, `.../grad_logits`, rounded to float32).
- gru.safetensors: nn.GRU(I, H, num_layers=2, bidirectional=True, batch_first=True)
  with an initial state h0; loss = sum(output * up_out) + sum(h_n * up_h). Gradients
  of every parameter, the input and h0. Under `lstm/`: nn.LSTM(I, H, bidirectional=True,
  bias=False) sequence first with h0 and c0; loss = sum(output * up_out) +
  sum(h_n * up_h) + sum(c_n * up_c).
- resize.safetensors: F.interpolate of one input [2, 3, 5, 7] in several modes, by size
  and by scale factor, downsampling and upsampling; loss = sum(y * up).
- decoder.safetensors: a convolutional decoder on x [2, 3, 6, 5],
      conv (Conv2d 3->8, 3x3, pad 1) -> relu
      -> deconv1 (ConvTranspose2d 8->6, 3x3, stride 2, padding 1, output_padding 1,
         groups 2) -> tanh -> interpolate nearest to (15, 13)
      -> deconv2 (ConvTranspose2d 6->4, (3, 2), stride (1, 2), padding (1, 0),
         dilation (2, 1), no bias) -> leaky_relu(0.1)
      -> interpolate bilinear (half-pixel) to (12, 20)
      -> interpolate bilinear align_corners to (9, 16) -> sigmoid
      -> mse_loss against input/target (mean)
  the gradients of every parameter and the input, and under `after/` the parameters
  after `steps` SGD steps (lr, momentum from the metadata) on the same batch.

Tensor names:

    init/<state_dict name>    initial parameters
    input/...                 inputs (float; int64 for targets and lengths)
    output/...                outputs
    loss                      the loss, shape [1]
    grad/<name>               gradient of every parameter and input

and the `__metadata__` holds the sizes, the generator and torch's version. The Rust side
is `exactgrad_nn::reference::crnn` and `tests/oracles/rnn_oracle.rs`. The header's keys are
sorted, so running the script again gives identical bytes.
"""

import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from autograd_oracle import f32, write_safetensors  # noqa: E402

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)
torch.set_default_dtype(torch.float32)

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "autograd")


def seeded_parameters(model, rng, bound_of):
    """Sets every parameter from U(-b, b) with b = bound_of(name, parameter); returns them."""
    values = {}
    for name, p in model.named_parameters():
        b = bound_of(name, p)
        values[name] = f32(rng.uniform(-b, b, tuple(p.shape)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(values[name]))
    return values


# ----------------------------------------------------------------------------------
# The CRNN


class Crnn(nn.Module):
    def __init__(self, c1, c2, height, hidden, classes):
        super().__init__()
        self.conv1 = nn.Conv2d(1, c1, 3, padding=1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.lstm = nn.LSTM(c2 * (height // 4), hidden, num_layers=2, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        n, c, h, w = x.shape
        seq = x.permute(3, 0, 1, 2).reshape(w, n, c * h)
        out, _ = self.lstm(seq)
        return F.log_softmax(self.fc(out), dim=2)


def ctc_cases(rng):
    """Stand-alone CTC cases: losses and logits gradients per target set, reduction and
    zero_infinity."""
    t, n, c = 12, 5, 7
    logits_np = f32(rng.normal(0.0, 1.5, (t, n, c)))
    sets = {
        # padded [5, 6], blank 0: repeated labels (1 1, 2 2 2), an empty target, unequal
        # input lengths.
        "a": dict(
            blank=0,
            targets=np.array(
                [[1, 1, 2, 3, 0, 0], [2, 2, 2, 4, 5, 6], [6, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0], [3, 4, 3, 4, 0, 0]],
                dtype=np.int64,
            ),
            input_lengths=np.array([12, 11, 5, 7, 9], dtype=np.int64),
            target_lengths=np.array([4, 6, 1, 0, 4], dtype=np.int64),
        ),
        # concatenated, blank 3: entry 2 is impossible (4 labels with two repeats need 6
        # steps, it has 5).
        "b": dict(
            blank=3,
            targets=np.array([0, 1, 2, 5, 5, 6, 6, 4, 4, 6, 6, 0, 6, 1], dtype=np.int64),
            input_lengths=np.array([12, 10, 5, 8, 3], dtype=np.int64),
            target_lengths=np.array([3, 4, 4, 1, 2], dtype=np.int64),
        ),
    }
    tensors = {"ctc/logits": torch.from_numpy(logits_np)}
    for name, s in sets.items():
        tensors[f"ctc/{name}/targets"] = torch.from_numpy(s["targets"])
        tensors[f"ctc/{name}/input_lengths"] = torch.from_numpy(s["input_lengths"])
        tensors[f"ctc/{name}/target_lengths"] = torch.from_numpy(s["target_lengths"])
        for reduction in ("none", "mean", "sum"):
            for zi in (False, True):
                key = f"ctc/{name}/{reduction}/{'zero_infinity' if zi else 'keep_infinity'}"
                weights = None
                # float32 (PyTorch's own precision), then float64: PyTorch's float32
                # recursions carry errors of a few 1e-7 relative in the log domain (the
                # losses reach 20), which show in the gradient; the float64 run is the
                # reference for the gradient (rounded to float32 when stored).
                for dtype, suffix in ((torch.float32, "_f32"), (torch.float64, "")):
                    logits = torch.from_numpy(logits_np.copy()).to(dtype).requires_grad_(True)
                    lp = F.log_softmax(logits, dim=2)
                    loss = F.ctc_loss(
                        lp,
                        torch.from_numpy(s["targets"]),
                        torch.from_numpy(s["input_lengths"]),
                        torch.from_numpy(s["target_lengths"]),
                        blank=s["blank"],
                        reduction=reduction,
                        zero_infinity=zi,
                    )
                    if weights is None:
                        weights = f32(rng.uniform(0.5, 1.5, tuple(loss.shape)))
                        tensors[f"{key}/upstream"] = torch.from_numpy(weights).reshape(-1).clone()
                    (loss * torch.from_numpy(weights).to(dtype)).sum().backward()
                    tensors[f"{key}/loss{suffix}"] = loss.detach().float().reshape(-1).clone()
                    tensors[f"{key}/grad_logits{suffix}"] = logits.grad.detach().float().clone()
    return tensors


def crnn():
    cfg = dict(c1=4, c2=8, height=8, hidden=12, classes=6)
    n, width = 3, 32
    rng = np.random.default_rng(20240601)
    model = Crnn(**cfg)

    def bound(name, p):
        if name.startswith("lstm"):
            return 1.0 / np.sqrt(cfg["hidden"])
        weight = model.get_parameter(name.rsplit(".", 1)[0] + ".weight")
        return 1.0 / np.sqrt(int(np.prod(weight.shape[1:])))

    values = seeded_parameters(model, rng, bound)
    x_np = f32(rng.normal(0.0, 1.0, (n, 1, cfg["height"], width)))
    steps = width // 4
    # Targets: the first repeats a label (2, 2); lengths differ.
    targets = np.array([[2, 2, 3, 1], [5, 4, 1, 0], [3, 1, 0, 0]], dtype=np.int64)
    input_lengths = np.array([steps, steps - 1, steps - 3], dtype=np.int64)
    target_lengths = np.array([4, 3, 2], dtype=np.int64)

    model.train()
    x = torch.from_numpy(x_np.copy()).requires_grad_(True)
    lp = model(x)
    loss = F.ctc_loss(lp, torch.from_numpy(targets), torch.from_numpy(input_lengths),
                      torch.from_numpy(target_lengths), blank=0, reduction="mean")
    loss.backward()

    tensors = {
        "input/x": torch.from_numpy(x_np),
        "input/targets": torch.from_numpy(targets),
        "input/input_lengths": torch.from_numpy(input_lengths),
        "input/target_lengths": torch.from_numpy(target_lengths),
        "output/log_probs": lp.detach().clone(),
        "loss": loss.detach().reshape(1).clone(),
        "grad/input": x.grad.detach().clone(),
    }
    for name, p in model.named_parameters():
        tensors[f"init/{name}"] = torch.from_numpy(values[name])
        tensors[f"grad/{name}"] = p.grad.detach().clone()
    tensors.update(ctc_cases(rng))
    meta = {"model": "crnn", "batch": str(n), "width": str(width), **{k: str(v) for k, v in cfg.items()}}
    return tensors, meta


# ----------------------------------------------------------------------------------
# The GRU (and an LSTM with initial states)


def gru():
    i, h, layers, n, t = 5, 7, 2, 3, 6
    rng = np.random.default_rng(20240602)
    model = nn.GRU(i, h, num_layers=layers, bidirectional=True, batch_first=True)
    values = seeded_parameters(model, rng, lambda name, p: 1.0 / np.sqrt(h))
    x_np = f32(rng.normal(0.0, 1.0, (n, t, i)))
    h0_np = f32(rng.normal(0.0, 0.5, (2 * layers, n, h)))
    up_out = f32(rng.normal(0.0, 1.0, (n, t, 2 * h)))
    up_h = f32(rng.normal(0.0, 1.0, (2 * layers, n, h)))
    model.train()
    x = torch.from_numpy(x_np.copy()).requires_grad_(True)
    h0 = torch.from_numpy(h0_np.copy()).requires_grad_(True)
    out, h_n = model(x, h0)
    loss = (out * torch.from_numpy(up_out)).sum() + (h_n * torch.from_numpy(up_h)).sum()
    loss.backward()
    tensors = {
        "input/x": torch.from_numpy(x_np),
        "input/h0": torch.from_numpy(h0_np),
        "input/up_out": torch.from_numpy(up_out),
        "input/up_h": torch.from_numpy(up_h),
        "output/output": out.detach().clone(),
        "output/h_n": h_n.detach().clone(),
        "loss": loss.detach().reshape(1).clone(),
        "grad/input": x.grad.detach().clone(),
        "grad/h0": h0.grad.detach().clone(),
    }
    for name, p in model.named_parameters():
        tensors[f"init/{name}"] = torch.from_numpy(values[name])
        tensors[f"grad/{name}"] = p.grad.detach().clone()

    # An LSTM without biases, sequence first, with both initial states.
    li, lh, lt, ln = 4, 5, 7, 2
    lstm = nn.LSTM(li, lh, bidirectional=True, bias=False)
    lvalues = seeded_parameters(lstm, rng, lambda name, p: 1.0 / np.sqrt(lh))
    lx_np = f32(rng.normal(0.0, 1.0, (lt, ln, li)))
    lh0_np = f32(rng.normal(0.0, 0.5, (2, ln, lh)))
    lc0_np = f32(rng.normal(0.0, 0.5, (2, ln, lh)))
    lup = [f32(rng.normal(0.0, 1.0, s)) for s in ((lt, ln, 2 * lh), (2, ln, lh), (2, ln, lh))]
    lx = torch.from_numpy(lx_np.copy()).requires_grad_(True)
    lh0 = torch.from_numpy(lh0_np.copy()).requires_grad_(True)
    lc0 = torch.from_numpy(lc0_np.copy()).requires_grad_(True)
    lout, (lhn, lcn) = lstm(lx, (lh0, lc0))
    lloss = sum((a * torch.from_numpy(u)).sum() for a, u in zip((lout, lhn, lcn), lup))
    lloss.backward()
    tensors.update({
        "lstm/input/x": torch.from_numpy(lx_np),
        "lstm/input/h0": torch.from_numpy(lh0_np),
        "lstm/input/c0": torch.from_numpy(lc0_np),
        "lstm/input/up_out": torch.from_numpy(lup[0]),
        "lstm/input/up_h": torch.from_numpy(lup[1]),
        "lstm/input/up_c": torch.from_numpy(lup[2]),
        "lstm/output/output": lout.detach().clone(),
        "lstm/output/h_n": lhn.detach().clone(),
        "lstm/output/c_n": lcn.detach().clone(),
        "lstm/loss": lloss.detach().reshape(1).clone(),
        "lstm/grad/input": lx.grad.detach().clone(),
        "lstm/grad/h0": lh0.grad.detach().clone(),
        "lstm/grad/c0": lc0.grad.detach().clone(),
    })
    for name, p in lstm.named_parameters():
        tensors[f"lstm/init/{name}"] = torch.from_numpy(lvalues[name])
        tensors[f"lstm/grad/{name}"] = p.grad.detach().clone()
    meta = {
        "model": "gru", "input_size": str(i), "hidden_size": str(h), "num_layers": str(layers),
        "lstm_input_size": str(li), "lstm_hidden_size": str(lh),
    }
    return tensors, meta


# ----------------------------------------------------------------------------------
# interpolate

# (name, mode, size or None, scale factor or None, align_corners)
RESIZE_CASES = [
    ("nearest_size_up", "nearest", (8, 11), None, None),
    ("nearest_size_down", "nearest", (3, 4), None, None),
    ("nearest_scale_2", "nearest", None, (2.0, 2.0), None),
    ("nearest_scale_1.5", "nearest", None, (1.5, 1.7), None),
    ("bilinear_size_up", "bilinear", (8, 11), None, False),
    ("bilinear_size_down", "bilinear", (3, 4), None, False),
    ("bilinear_scale", "bilinear", None, (1.7, 2.5), False),
    ("bilinear_align_up", "bilinear", (8, 11), None, True),
    ("bilinear_align_down", "bilinear", (3, 1), None, True),
]


def resize():
    rng = np.random.default_rng(20240603)
    x_np = f32(rng.normal(0.0, 1.0, (2, 3, 5, 7)))
    tensors = {"input/x": torch.from_numpy(x_np)}
    for name, mode, size, scale, align in RESIZE_CASES:
        x = torch.from_numpy(x_np.copy()).requires_grad_(True)
        y = F.interpolate(x, size=size, scale_factor=scale, mode=mode, align_corners=align)
        up = f32(rng.normal(0.0, 1.0, tuple(y.shape)))
        (y * torch.from_numpy(up)).sum().backward()
        tensors[f"{name}/upstream"] = torch.from_numpy(up)
        tensors[f"{name}/output"] = y.detach().clone()
        tensors[f"{name}/grad"] = x.grad.detach().clone()
    meta = {"model": "resize", "cases": ",".join(c[0] for c in RESIZE_CASES)}
    return tensors, meta


# ----------------------------------------------------------------------------------
# The decoder


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.deconv1 = nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.deconv2 = nn.ConvTranspose2d(
            6, 4, (3, 2), stride=(1, 2), padding=(1, 0), dilation=(2, 1), bias=False
        )

    def forward(self, x):
        x = F.relu(self.conv(x))
        x = torch.tanh(self.deconv1(x))
        x = F.interpolate(x, size=(15, 13), mode="nearest")
        x = F.leaky_relu(self.deconv2(x), 0.1)
        x = F.interpolate(x, size=(12, 20), mode="bilinear", align_corners=False)
        x = F.interpolate(x, size=(9, 16), mode="bilinear", align_corners=True)
        return torch.sigmoid(x)


def decoder():
    rng = np.random.default_rng(20240604)
    model = Decoder()

    # PyTorch's default bound for both layouts: 1/sqrt(weight.size(1) * KH * KW).
    def bound(name, p):
        weight = model.get_parameter(name.rsplit(".", 1)[0] + ".weight")
        return 1.0 / np.sqrt(int(np.prod(weight.shape[1:])))

    values = seeded_parameters(model, rng, bound)
    x_np = f32(rng.normal(0.0, 1.0, (2, 3, 6, 5)))
    target_np = f32(rng.uniform(0.0, 1.0, (2, 4, 9, 16)))
    model.train()
    x = torch.from_numpy(x_np.copy()).requires_grad_(True)
    y = model(x)
    loss = F.mse_loss(y, torch.from_numpy(target_np))
    loss.backward()
    tensors = {
        "input/x": torch.from_numpy(x_np),
        "input/target": torch.from_numpy(target_np),
        "output/y": y.detach().clone(),
        "loss": loss.detach().reshape(1).clone(),
        "grad/input": x.grad.detach().clone(),
    }
    for name, p in model.named_parameters():
        tensors[f"init/{name}"] = torch.from_numpy(values[name])
        tensors[f"grad/{name}"] = p.grad.detach().clone()
    # A few SGD steps with momentum on the same batch.
    steps, lr, momentum = 3, 0.5, 0.9
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    for _ in range(steps):
        opt.zero_grad()
        F.mse_loss(model(torch.from_numpy(x_np.copy())), torch.from_numpy(target_np)).backward()
        opt.step()
    for name, p in model.named_parameters():
        tensors[f"after/{name}"] = p.detach().clone()
    meta = {"model": "decoder", "steps": str(steps), "lr": str(lr), "momentum": str(momentum)}
    return tensors, meta


if __name__ == "__main__":
    os.makedirs(OUT_DIR, exist_ok=True)
    for fname, build in [("crnn.safetensors", crnn), ("gru.safetensors", gru), ("resize.safetensors", resize),
                        ("decoder.safetensors", decoder)]:
        tensors, meta = build()
        meta["generator"] = "tools/rnn_oracle.py"
        meta["torch"] = torch.__version__
        path = os.path.join(OUT_DIR, fname)
        write_safetensors(path, tensors, meta)
        print(f"{fname}: {len(tensors)} tensors, {os.path.getsize(path)} bytes, loss {float(tensors['loss'][0]) if 'loss' in tensors else '-'}")
