#!/usr/bin/env python3
"""PyTorch side of the checkpoint round trip (docs/checkpoints.md, "Interchange with PyTorch").

Run with the project's venv (PyTorch 2.15.0, CPU), after writing the Rust checkpoint:

    EXACTGRAD_WRITE_TESTDATA=1 cargo test --release --test suite checkpoint_torch::our_checkpoint
    .venv/bin/python tools/checkpoint_oracle.py

The model is nn.Sequential(Conv2d(1, 4, 3, padding=1), BatchNorm2d(4), ReLU(), Flatten(),
Linear(256, 10), LayerNorm(10)), which exactgrad builds with the same state_dict names.
Writes, under testdata/checkpoint/:

- torch_f32.safetensors, torch_f16.safetensors, torch_bf16.safetensors,
  torch_f64.safetensors: safetensors.torch.save_file(model.state_dict()) of one model
  whose batch-norm layer has seen three training batches (num_batches_tracked = 3,
  int64), with its floating-point entries in that type. The f64 file holds values with
  more precision than f32 (the f32 values times 1 + 1e-9 * noise).
- torch_io.safetensors: the input batch `input/x` [5, 1, 8, 8]; `<variant>/y`, the
  evaluation-mode output of a float32 model holding each file's values as PyTorch
  converts them (`.float()`: exact from f16 and bf16, round to nearest even from f64);
  `<variant>/value/<name>`, those converted values; `rust/y`, the output of a PyTorch
  model that loaded testdata/checkpoint/rust_model.safetensors (written by exactgrad)
  with load_state_dict(strict=True).
- torch_resave_of_rust.safetensors: the state dict loaded from rust_model.safetensors,
  saved again by safetensors.torch.save_file (the Rust test checks that exactgrad wrote
  the same bytes).
- dtypes.safetensors: every f16 bit pattern (`f16/in`), 4096 bf16 patterns and special
  values (`bf16/in`), 2048 f64 values around f32 rounding boundaries, ties, overflow
  and subnormals (`f64/in`), and PyTorch's `.float()` of each (`*/out`).

Inputs come from torch.manual_seed and numpy's PCG64 with fixed seeds; the tests read
only the files and never need Python.
"""

import pathlib

import numpy as np
import torch
from torch import nn
from safetensors.torch import load_file, save_file

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "testdata" / "checkpoint"


def model():
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(256, 10),
        nn.LayerNorm(10),
    )


def evaluate(state, x):
    m = model()
    m.load_state_dict(state, strict=True)
    m.eval()
    with torch.no_grad():
        return m(x).contiguous()


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.Generator(np.random.PCG64(7))
    OUT.mkdir(parents=True, exist_ok=True)

    m = model()
    m.train()
    with torch.no_grad():
        for _ in range(3):
            m(torch.randn(6, 1, 8, 8) * 2 + 0.5)
        m[5].weight.copy_(torch.from_numpy(rng.normal(1.0, 0.2, 10).astype(np.float32)))
        m[5].bias.copy_(torch.from_numpy(rng.normal(0.0, 0.2, 10).astype(np.float32)))
        m[1].weight.copy_(torch.from_numpy(rng.normal(1.0, 0.2, 4).astype(np.float32)))
        m[1].bias.copy_(torch.from_numpy(rng.normal(0.0, 0.2, 4).astype(np.float32)))
    state = {k: v.detach().clone().contiguous() for k, v in m.state_dict().items()}
    assert state["1.num_batches_tracked"].item() == 3

    x = torch.from_numpy(rng.normal(0.0, 1.0, (5, 1, 8, 8)).astype(np.float32))
    io = {"input/x": x}
    variants = {
        "f32": lambda v: v,
        "f16": lambda v: v.half(),
        "bf16": lambda v: v.bfloat16(),
        "f64": lambda v: v.double()
        * (1.0 + 1e-9 * torch.from_numpy(rng.normal(0.0, 1.0, tuple(v.shape)))),
    }
    for name, convert in variants.items():
        file_state = {
            k: (convert(v).contiguous() if v.is_floating_point() else v)
            for k, v in state.items()
        }
        save_file(file_state, str(OUT / f"torch_{name}.safetensors"))
        as_f32 = {
            k: (v.float() if v.is_floating_point() else v) for k, v in file_state.items()
        }
        io[f"{name}/y"] = evaluate(as_f32, x)
        for k, v in as_f32.items():
            if v.is_floating_point():
                io[f"{name}/value/{k}"] = v.contiguous()
        print(f"{name}: y[0, :3] = {io[f'{name}/y'][0, :3].tolist()}")

    rust_path = OUT / "rust_model.safetensors"
    if rust_path.exists():
        rust_state = load_file(str(rust_path))
        io["rust/y"] = evaluate(rust_state, x)
        save_file(rust_state, str(OUT / "torch_resave_of_rust.safetensors"))
        same = (OUT / "torch_resave_of_rust.safetensors").read_bytes() == rust_path.read_bytes()
        print(f"rust checkpoint: loaded strictly, y[0, :3] = {io['rust/y'][0, :3].tolist()}; "
              f"save_file gives the same bytes: {same}")
    else:
        print(f"{rust_path} missing: run the cargo command in this script's docstring first")
    save_file(io, str(OUT / "torch_io.safetensors"))

    # Element-type conversions.
    f16 = torch.arange(0, 1 << 16, dtype=torch.int32).to(torch.int16).view(torch.float16)
    bf16_bits = rng.integers(0, 1 << 16, 4096).astype(np.uint16).view(np.int16)
    specials = np.array([0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x8001, 0x007F,
                         0x0080, 0x7F7F, 0x3F80, 0xBF80], dtype=np.uint16).view(np.int16)
    bf16 = torch.from_numpy(np.concatenate([bf16_bits, specials])).view(torch.bfloat16)
    f32max = float(np.finfo(np.float32).max)
    tiny = float(np.finfo(np.float32).tiny)
    base = rng.normal(0.0, 1.0, 1024) * np.exp2(rng.integers(-140, 128, 1024))
    f32_vals = base.astype(np.float32).astype(np.float64)
    # Exact midpoints between neighbouring f32 values (ties), and values just off them.
    nxt = np.nextafter(f32_vals.astype(np.float32), np.float32(np.inf)).astype(np.float64)
    mid = (f32_vals + nxt) / 2
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, f32max, f32max * (1 + 2**-25),
                      f32max * (1 + 2**-24), 1e39, -1e39, tiny, tiny / 2, tiny * 2**-23,
                      tiny * 2**-24, tiny * 2**-25, 1e-46, 2**-150, 2**-149 * 1.5,
                      1.0 + 2**-24, 1.0 + 3 * 2**-24, 1.0 + 2**-24 + 2**-52])
    f64 = torch.from_numpy(np.concatenate([base[:512], mid[:512], np.nextafter(mid[512:1000], np.inf), edges]))
    dtypes = {
        "f16/in": f16.contiguous(),
        "f16/out": f16.float(),
        "bf16/in": bf16.contiguous(),
        "bf16/out": bf16.float(),
        "f64/in": f64.contiguous(),
        "f64/out": f64.float(),
    }
    save_file(dtypes, str(OUT / "dtypes.safetensors"))
    print(f"dtypes: {len(f16)} f16, {len(bf16)} bf16, {len(f64)} f64 values")


if __name__ == "__main__":
    main()
