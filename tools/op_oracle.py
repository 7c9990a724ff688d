#!/usr/bin/env python3
"""Generate the PyTorch oracle for every differentiable operator: testdata/ops/*.safetensors.

Each case builds float32 leaves from seeded numpy values, applies an optional chain of
views to each leaf (transpose, slice with a step, expand, ...), calls one PyTorch operator
on CPU with deterministic algorithms, and runs `out.backward(upstream)` with a fixed
pseudo-random upstream gradient. The file stores, per case `<name>`:

    <name>/x0, <name>/x1, ...   the leaves (float32)
    <name>/target               class indices (int64), cross_entropy only
    <name>/y                    the forward output
    <name>/gy                   the upstream gradient given to backward
    <name>/g0, <name>/g1, ...   the gradient of each leaf that requires grad

and in the safetensors `__metadata__` one entry `case:<name>` whose value is a
`;`-separated list of `key=value` pairs the Rust test reads (tests/torch_ops/):

    op=<operator>          which operator to call (see OPS below)
    in=<k>                 number of float inputs x0..x{k-1}
    grads=<i,j,...>        which inputs require grad (their gradients are stored)
    tol=elem|scaled        tolerance scale: per element max(1,|torch|), or the
                           tensor's max(1, max |torch|) for reductions and products
    view<i>=<chain>        views applied to input i before the op, e.g.
                           `transpose(0,1)|slice(1,0,6,2)`
    <arg>=<value>          operator arguments: ints and int lists `1,-1`, floats in
                           Python repr, `none` for an absent optional value

Usage:  .venv/bin/python tools/op_oracle.py     (torch, numpy, safetensors)
The output is deterministic: running it twice writes identical files.
"""

import os
import zlib

import numpy as np
import torch
import torch.nn.functional as F
import json
import struct

from safetensors import safe_open

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)
torch.set_default_dtype(torch.float32)

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testdata", "ops")

NAN = float("nan")
INF = float("inf")

# ----------------------------------------------------------------------------------
# Views: the same small language is parsed by the Rust test.


def parse_chain(chain):
    """`name(a,b)|name2(c)` -> [(name, [ints])]."""
    out = []
    for part in chain.split("|"):
        name, rest = part.split("(", 1)
        rest = rest.rstrip(")")
        args = [int(v) for v in rest.split(",")] if rest else []
        out.append((name, args))
    return out


def apply_view(t, name, a):
    if name == "transpose":
        return t.transpose(a[0], a[1])
    if name == "permute":
        return t.permute(*a)
    if name == "reshape":
        return t.reshape(*a)
    if name == "view":
        return t.view(*a)
    if name == "narrow":
        return t.narrow(a[0], a[1], a[2])
    if name == "slice":
        idx = [slice(None)] * t.dim()
        idx[a[0]] = slice(a[1], a[2], a[3])
        return t[tuple(idx)]
    if name == "expand":
        return t.expand(*a)
    if name == "squeeze":
        return t.squeeze(a[0])
    if name == "unsqueeze":
        return t.unsqueeze(a[0])
    if name == "flatten":
        return t.flatten(a[0], a[1])
    if name == "contiguous":
        return t.contiguous()
    raise ValueError(name)


VIEW_OPS = ["transpose", "permute", "reshape", "view", "narrow", "slice", "expand",
            "squeeze", "unsqueeze", "flatten", "contiguous"]

# ----------------------------------------------------------------------------------
# Operators: how each `op` is called in PyTorch. `x` is the list of (viewed) inputs.


def red(s):
    return {"none": "none", "mean": "mean", "sum": "sum"}[s]


def run_op(op, x, args, target):
    if op in ("add", "sub", "mul", "div"):
        return getattr(torch, op)(x[0], x[1])
    if op == "add_scalar":
        return x[0] + args["c"]
    if op == "mul_scalar":
        return x[0] * args["c"]
    if op == "div_scalar":
        return x[0] / args["c"]
    if op == "neg":
        return torch.neg(x[0])
    if op == "relu":
        return torch.relu(x[0])
    if op == "leaky_relu":
        return F.leaky_relu(x[0], args["slope"])
    if op == "sigmoid":
        return torch.sigmoid(x[0])
    if op == "tanh":
        return torch.tanh(x[0])
    if op == "gelu":
        return F.gelu(x[0], approximate=args["approximate"])
    if op == "exp":
        return torch.exp(x[0])
    if op == "log":
        return torch.log(x[0])
    if op == "sqrt":
        return torch.sqrt(x[0])
    if op == "pow":
        return torch.pow(x[0], args["p"])
    if op == "abs":
        return torch.abs(x[0])
    if op == "clamp":
        return torch.clamp(x[0], min=args["min"], max=args["max"])
    if op == "where":
        return torch.where(x[0] != 0, x[1], x[2])
    if op == "sum":
        return x[0].sum()
    if op == "sum_dims":
        return x[0].sum(dim=tuple(args["dims"]), keepdim=bool(args["keepdim"]))
    if op == "mean":
        return x[0].mean()
    if op == "mean_dims":
        return x[0].mean(dim=tuple(args["dims"]), keepdim=bool(args["keepdim"]))
    if op == "matmul":
        return torch.matmul(x[0], x[1])
    if op == "linear":
        return F.linear(x[0], x[1], x[2] if len(x) > 2 else None)
    if op in VIEW_OPS:
        return apply_view(x[0], op, args.get("a", []))
    if op == "concat":
        return torch.cat(x, dim=args["dim"])
    if op == "stack":
        return torch.stack(x, dim=args["dim"])
    if op == "softmax":
        return torch.softmax(x[0], dim=args["dim"])
    if op == "log_softmax":
        return torch.log_softmax(x[0], dim=args["dim"])
    if op == "cross_entropy":
        return F.cross_entropy(x[0], target, reduction=red(args["reduction"]),
                               ignore_index=args["ignore_index"],
                               label_smoothing=args["label_smoothing"])
    if op == "mse_loss":
        return F.mse_loss(x[0], x[1], reduction=red(args["reduction"]))
    # convolution family (tests/torch_ops/call_conv.rs)
    if op in ("conv1d", "conv2d"):
        return getattr(F, op)(x[0], x[1], x[2] if len(x) > 2 else None, stride=args["stride"],
                              padding=args["padding"], dilation=args["dilation"], groups=args["groups"])
    if op == "max_pool2d":
        return F.max_pool2d(x[0], args["kernel"], stride=args["stride"] or None, padding=args["padding"],
                            dilation=args["dilation"], ceil_mode=bool(args["ceil_mode"]))
    if op == "avg_pool2d":
        return F.avg_pool2d(x[0], args["kernel"], stride=args["stride"] or None, padding=args["padding"],
                            ceil_mode=bool(args["ceil_mode"]), count_include_pad=bool(args["count_include_pad"]),
                            divisor_override=args["divisor_override"])
    if op == "adaptive_avg_pool2d":
        return F.adaptive_avg_pool2d(x[0], args["output_size"])
    if op == "pad":
        return F.pad(x[0], args["pads"], value=args["value"])
    # normalisation, embedding, index_select, split/chunk, attention
    # (tests/torch_ops/call_norm_attention.rs `norm_attention_call`)
    if op in NORM_ATTENTION_OPS:
        return norm_attention_op(op, x, args)
    raise ValueError(op)


# ----------------------------------------------------------------------------------
# Case construction.

FILES = {}  # file name -> (tensors dict, metadata dict)
NAMES = set()


def rng_for(name):
    return np.random.default_rng(zlib.crc32(name.encode()))


def fmt(v):
    if v is None:
        return "none"
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, (list, tuple)):
        return ",".join(str(int(e)) for e in v)
    if isinstance(v, float):
        return repr(v)
    return str(v)


def case(file, name, op, inputs, args=None, views=None, nograd=(), target=None, tol="elem"):
    """Record one case. `inputs` are numpy arrays (or callables taking the case's rng)."""
    assert name not in NAMES, name
    assert "/" not in name and ";" not in name and "=" not in name
    NAMES.add(name)
    args = dict(args or {})
    views = dict(views or {})
    rng = rng_for(name)
    xs = [np.asarray(v(rng) if callable(v) else v, dtype=np.float32) for v in inputs]
    leaves = [torch.tensor(v, requires_grad=(i not in nograd)) for i, v in enumerate(xs)]
    operands = []
    for i, leaf in enumerate(leaves):
        t = leaf
        if i in views:
            for vname, va in parse_chain(views[i]):
                t = apply_view(t, vname, va)
        operands.append(t)
    tgt = None if target is None else torch.tensor(np.asarray(target, dtype=np.int64))
    out = run_op(op, operands, args, tgt)
    upstream = torch.tensor(rng.standard_normal(out.shape).astype(np.float32))
    out.backward(upstream)

    tensors, meta = FILES.setdefault(file, ({}, {}))
    for i, v in enumerate(xs):
        tensors[f"{name}/x{i}"] = torch.tensor(v)
    if tgt is not None:
        tensors[f"{name}/target"] = tgt
    tensors[f"{name}/y"] = out.detach().clone().contiguous()
    tensors[f"{name}/gy"] = upstream
    grads = []
    for i, leaf in enumerate(leaves):
        if i in nograd:
            continue
        assert leaf.grad is not None, (name, i)
        tensors[f"{name}/g{i}"] = leaf.grad.detach().clone()
        grads.append(i)
    spec = {"op": op, "in": len(xs), "grads": grads, "tol": tol}
    for i, chain in sorted(views.items()):
        spec[f"view{i}"] = chain
    spec.update(args)
    meta[f"case:{name}"] = ";".join(f"{k}={fmt(v)}" for k, v in spec.items())


def U(*shape, lo=-2.0, hi=2.0):
    return lambda r: r.uniform(lo, hi, size=shape)


def POS(*shape, lo=0.25, hi=3.0):
    return lambda r: r.uniform(lo, hi, size=shape)


def AWAY(*shape, lo=0.5, hi=2.0):
    """Magnitudes in [lo, hi) with random signs (safe divisors)."""
    return lambda r: r.uniform(lo, hi, size=shape) * r.choice([-1.0, 1.0], size=shape)


def N(*shape):
    return lambda r: r.standard_normal(size=shape)


# ----------------------------------------------------------------------------------
# Element-wise operators.

EW = "elementwise.safetensors"

BROADCASTS = [
    ("same", (3, 4), (3, 4)),
    ("rank_extend_right", (2, 3, 4), (4,)),
    ("rank_extend_left", (4,), (2, 3, 4)),
    ("stretch_both", (3, 1), (1, 4)),
    ("stretch_left", (1, 4), (3, 4)),
    ("stretch_right", (2, 3, 4), (2, 1, 4)),
    ("stretch_and_extend", (2, 1, 4), (3, 1)),
    ("scalar_right", (3, 4), ()),
    ("scalar_left", (), (2, 3)),
    ("one_elem", (1,), (2, 3)),
]
for op in ("add", "sub", "mul", "div"):
    for tag, sa, sb in BROADCASTS:
        b = AWAY(*sb) if op == "div" else U(*sb)
        case(EW, f"{op}_{tag}", op, [U(*sa), b])
    # one side without grad
    case(EW, f"{op}_lhs_only_grad", op, [U(2, 3), AWAY(3)], nograd=(1,))
    case(EW, f"{op}_rhs_only_grad", op, [U(2, 3), AWAY(2, 3)], nograd=(0,))
    # the same leaf on both sides through two views
    case(EW, f"{op}_strided_lhs", op, [U(3, 6), AWAY(3, 3)], views={0: "slice(1,0,6,2)"})

case(EW, "div_by_zero", "div", [[[1.0, -1.0, 0.0, 2.0]], [[0.0, 0.0, 0.0, -0.0]]])

case(EW, "add_scalar", "add_scalar", [U(2, 3)], args={"c": 1.5})
case(EW, "mul_scalar", "mul_scalar", [U(2, 3)], args={"c": -2.5})
case(EW, "div_scalar", "div_scalar", [U(2, 3)], args={"c": 3.0})

case(EW, "neg_basic", "neg", [U(2, 3)])
case(EW, "neg_transposed", "neg", [U(3, 2)], views={0: "transpose(0,1)"})

KINKS = [-2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 2.0, -0.5]
case(EW, "relu_kinks", "relu", [KINKS])
case(EW, "relu_random", "relu", [U(3, 5)])
case(EW, "relu_nan_inf", "relu", [[NAN, INF, -INF, 1.0]])
case(EW, "relu_transposed", "relu", [U(4, 3)], views={0: "transpose(0,1)"})
for slope in (0.01, 0.2, -0.5, 1.5):
    case(EW, f"leaky_relu_kinks_{slope}", "leaky_relu", [KINKS], args={"slope": slope})
case(EW, "leaky_relu_random", "leaky_relu", [U(3, 5)], args={"slope": 0.01})
case(EW, "leaky_relu_nan_inf", "leaky_relu", [[NAN, INF, -INF]], args={"slope": 0.1})

case(EW, "abs_kinks", "abs", [KINKS])
case(EW, "abs_random", "abs", [U(3, 5)])
case(EW, "abs_inf", "abs", [[INF, -INF, 3.0]])
case(EW, "abs_nan", "abs", [[NAN, 1.0, -1.0]])

CLAMP_IN = [-2.0, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 1.5]
case(EW, "clamp_both_at_bounds", "clamp", [CLAMP_IN], args={"min": -0.5, "max": 0.5})
case(EW, "clamp_min_only", "clamp", [CLAMP_IN], args={"min": 0.0, "max": None})
case(EW, "clamp_max_only", "clamp", [CLAMP_IN], args={"min": None, "max": 1.0})
case(EW, "clamp_min_gt_max", "clamp", [CLAMP_IN], args={"min": 1.0, "max": -1.0})
case(EW, "clamp_equal_bounds", "clamp", [CLAMP_IN], args={"min": 0.25, "max": 0.25})
case(EW, "clamp_random", "clamp", [U(3, 4)], args={"min": -1.0, "max": 0.75})
case(EW, "clamp_nan_inf", "clamp", [[NAN, INF, -INF]], args={"min": -1.0, "max": 1.0})

case(EW, "sigmoid_random", "sigmoid", [U(8, 16, lo=-12, hi=12)])
case(EW, "sigmoid_special", "sigmoid", [[0.0, -0.0, 20.0, -20.0, 88.0, -88.0, 100.0, -100.0, INF, -INF]])
case(EW, "tanh_random", "tanh", [U(8, 16, lo=-6, hi=6)])
case(EW, "tanh_special", "tanh", [[0.0, -0.0, 1e-4, -1e-4, 9.0, -9.0, 20.0, -20.0, INF, -INF]])
for approx in ("none", "tanh"):
    case(EW, f"gelu_{approx}_random", "gelu", [U(8, 16, lo=-7, hi=7)], args={"approximate": approx})
    case(EW, f"gelu_{approx}_special", "gelu",
         [[0.0, -0.0, 1e-3, -1e-3, 1.0, -1.0, 6.0, -6.0, 12.0, -12.0, 50.0, -50.0]],
         args={"approximate": approx})
case(EW, "exp_random", "exp", [U(8, 16, lo=-20, hi=20)])
case(EW, "exp_special", "exp", [[0.0, -0.0, 30.0, -30.0, 87.0, -87.0, 100.0, -110.0, INF, -INF]])
case(EW, "log_positive", "log", [lambda r: np.exp(r.uniform(-12, 12, size=(8, 16)))])
case(EW, "log_special", "log", [[0.0, -0.0, -1.0, -2.5, 1.0, 1e-30, 1e30, INF]])
case(EW, "sqrt_positive", "sqrt", [lambda r: np.exp(r.uniform(-12, 12, size=(8, 16)))])
case(EW, "sqrt_special", "sqrt", [[0.0, -0.0, -1.0, -4.0, 1.0, 4.0, 1e-30, INF]])

for p in (0.0, 1.0, 2.0, 3.0, -1.0, 0.5, 2.5, -1.5):
    case(EW, f"pow_{p}_positive", "pow", [POS(2, 4)], args={"p": p})
for p in (0.0, 1.0, 2.0, 3.0, -1.0, -2.0, 4.0):
    case(EW, f"pow_{p}_negative", "pow", [lambda r: -r.uniform(0.25, 3.0, size=(2, 4))], args={"p": p})
for p in (0.5, 2.5, -1.5):
    case(EW, f"pow_{p}_negative_nan", "pow", [[-1.0, -2.0, 4.0]], args={"p": p})
for p in (2.0, 3.0, -1.0, 2.5, 0.5):
    case(EW, f"pow_{p}_at_zero", "pow", [[0.0, 1.0, 2.0]], args={"p": p})
case(EW, "pow_0.5_at_neg_zero", "pow", [[-0.0, 1.0]], args={"p": 0.5})

WHERE_COND = lambda *s: (lambda r: r.choice([0.0, 1.0, -2.0, 0.5], size=s))  # noqa: E731
case(EW, "where_same", "where", [WHERE_COND(3, 4), U(3, 4), U(3, 4)], nograd=(0,))
case(EW, "where_broadcast_cond", "where", [WHERE_COND(3, 1), U(3, 4), U(4)], nograd=(0,))
case(EW, "where_cond_rank_extend", "where", [WHERE_COND(4), U(2, 3, 4), U()], nograd=(0,))
case(EW, "where_all_broadcast", "where", [WHERE_COND(2, 1, 1), U(1, 3, 1), U(1, 1, 4)], nograd=(0,))
case(EW, "where_nan_unselected", "where", [[1.0, 0.0, 1.0, 0.0], [2.0, NAN, -1.0, INF], [NAN, 3.0, INF, -2.0]],
     nograd=(0,))
case(EW, "where_only_b_grad", "where", [WHERE_COND(2, 3), U(2, 3), U(2, 3)], nograd=(0, 1))

# ----------------------------------------------------------------------------------
# Reductions.

RD = "reduce.safetensors"
case(RD, "sum_all_2d", "sum", [U(3, 4)], tol="scaled")
case(RD, "sum_all_3d", "sum", [U(2, 3, 4)], tol="scaled")
case(RD, "sum_all_scalar", "sum", [U()], tol="scaled")
case(RD, "mean_all_3d", "mean", [U(2, 3, 4)], tol="scaled")
case(RD, "mean_all_1d", "mean", [U(7)], tol="scaled")
for dims in ([0], [1], [2], [-1], [-3], [0, 2], [-1, 0], [1, -1], [0, 1, 2]):
    for keep in (False, True):
        tag = "_".join(str(d).replace("-", "m") for d in dims) + ("_keep" if keep else "")
        for op in ("sum_dims", "mean_dims"):
            case(RD, f"{op}_{tag}", op, [U(2, 3, 4)], args={"dims": dims, "keepdim": keep}, tol="scaled")
case(RD, "sum_all_empty", "sum", [U(0)], tol="scaled")
case(RD, "mean_all_empty", "mean", [U(0)], tol="scaled")
case(RD, "sum_dims_empty_dim", "sum_dims", [U(2, 0)], args={"dims": [1], "keepdim": False}, tol="scaled")
case(RD, "mean_dims_empty_dim", "mean_dims", [U(2, 0)], args={"dims": [1], "keepdim": True}, tol="scaled")
case(RD, "sum_all_with_infs", "sum", [[INF, -INF, 1.0]], tol="scaled")
case(RD, "sum_dims_nan_inf", "sum_dims", [[[1.0, NAN, 2.0], [INF, 1.0, 2.0], [-INF, -INF, 0.5]]],
     args={"dims": [1], "keepdim": False}, tol="scaled")
case(RD, "mean_dims_nan_inf", "mean_dims", [[[1.0, NAN, 2.0], [INF, 1.0, 2.0], [-INF, -INF, 0.5]]],
     args={"dims": [-1], "keepdim": True}, tol="scaled")
case(RD, "sum_dims_size1_dim", "sum_dims", [U(3, 1, 2)], args={"dims": [1], "keepdim": False}, tol="scaled")
case(RD, "sum_dims_narrowed", "sum_dims", [U(4, 5)], args={"dims": [1], "keepdim": False},
     views={0: "narrow(0,1,2)"}, tol="scaled")
case(RD, "sum_all_narrowed", "sum", [U(4, 5)], views={0: "narrow(1,2,3)"}, tol="scaled")
case(RD, "mean_dims_transposed", "mean_dims", [U(3, 4, 2)], args={"dims": [0], "keepdim": True},
     views={0: "transpose(0,2)"}, tol="scaled")
case(RD, "sum_dims_expanded", "sum_dims", [U(3, 1)], args={"dims": [0, 1], "keepdim": False},
     views={0: "expand(2,3,4)"}, tol="scaled")

# ----------------------------------------------------------------------------------
# Matrix products.

LA = "linalg.safetensors"
MM = [
    ("1d_1d", (4,), (4,)),
    ("1d_2d", (4,), (4, 3)),
    ("2d_1d", (3, 4), (4,)),
    ("2d_2d", (3, 4), (4, 5)),
    ("1d_3d", (4,), (2, 4, 3)),
    ("3d_1d", (2, 3, 4), (4,)),
    ("3d_2d", (2, 3, 4), (4, 5)),
    ("2d_3d", (3, 4), (2, 4, 5)),
    ("3d_3d", (2, 3, 4), (2, 4, 5)),
    ("batch_broadcast", (2, 1, 3, 4), (5, 4, 2)),
    ("batch_broadcast_size1", (1, 3, 4), (2, 4, 2)),
    ("4d_4d_stretch", (2, 1, 3, 4), (1, 3, 4, 2)),
    ("k_is_1", (3, 1), (1, 4)),
]
for tag, sa, sb in MM:
    case(LA, f"matmul_{tag}", "matmul", [U(*sa), U(*sb)], tol="scaled")
case(LA, "matmul_transposed_lhs", "matmul", [U(4, 3), U(4, 2)], views={0: "transpose(0,1)"}, tol="scaled")
case(LA, "matmul_transposed_both", "matmul", [U(4, 3), U(5, 4)],
     views={0: "transpose(0,1)", 1: "transpose(0,1)"}, tol="scaled")
case(LA, "matmul_batched_transposed", "matmul", [U(2, 4, 3), U(2, 4, 5)], views={0: "transpose(-1,-2)"},
     tol="scaled")
case(LA, "matmul_permuted_batch", "matmul", [U(3, 2, 4), U(2, 4, 5)], views={0: "permute(1,0,2)"},
     tol="scaled")
case(LA, "matmul_expanded_batch", "matmul", [U(3, 4), U(2, 4, 5)], views={0: "expand(2,3,4)"}, tol="scaled")
case(LA, "matmul_sliced", "matmul", [U(3, 8), U(4, 2)], views={0: "slice(1,1,8,2)"}, tol="scaled")
case(LA, "matmul_rhs_only_grad", "matmul", [U(3, 4), U(4, 2)], nograd=(0,), tol="scaled")
case(LA, "linear_bias", "linear", [U(3, 4), U(5, 4), U(5)], tol="scaled")
case(LA, "linear_no_bias", "linear", [U(3, 4), U(5, 4)], tol="scaled")
case(LA, "linear_3d_input", "linear", [U(2, 3, 4), U(5, 4), U(5)], tol="scaled")
case(LA, "linear_3d_input_no_bias", "linear", [U(2, 3, 4), U(5, 4)], tol="scaled")
case(LA, "linear_1d_input", "linear", [U(4), U(5, 4), U(5)], tol="scaled")
case(LA, "linear_1d_weight", "linear", [U(3, 4), U(4)], tol="scaled")
case(LA, "matmul_k_is_0", "matmul", [U(2, 0), U(0, 3)], tol="scaled")
case(LA, "linear_transposed_weight", "linear", [U(3, 4), U(4, 5), U(5)], views={1: "transpose(0,1)"},
     tol="scaled")

# ----------------------------------------------------------------------------------
# Views, concat, stack.

SH = "shape.safetensors"
VIEWS = [
    ("reshape_infer", "reshape", (2, 3, 4), [6, -1], None),
    ("reshape_flat", "reshape", (2, 3, 4), [24], None),
    ("reshape_of_transposed", "reshape", (2, 3, 4), [4, 6], "transpose(0,2)"),
    ("view_split", "view", (2, 3, 4), [2, 3, 2, 2], None),
    ("view_infer", "view", (2, 3, 4), [-1, 4], None),
    ("permute_201", "permute", (2, 3, 4), [2, 0, 1], None),
    ("permute_negative", "permute", (2, 3, 4), [-1, 0, -2], None),
    ("transpose_01", "transpose", (2, 3, 4), [0, 1], None),
    ("transpose_negative", "transpose", (2, 3, 4), [-1, 0], None),
    ("narrow_dim1", "narrow", (2, 5, 3), [1, 1, 3], None),
    ("narrow_negative_dim", "narrow", (2, 5, 3), [-1, 2, 1], None),
    ("slice_step2", "slice", (3, 7), [1, 1, 7, 2], None),
    ("slice_step3_dim0", "slice", (8, 2), [0, 0, 8, 3], None),
    ("slice_negative_start", "slice", (3, 6), [1, -4, 6, 1], None),
    ("slice_end_past", "slice", (5, 2), [0, 2, 100, 2], None),
    ("slice_empty", "slice", (5, 2), [0, 3, 1, 1], None),
    ("narrow_empty", "narrow", (2, 5, 3), [1, 5, 0], None),
    ("expand_stretch", "expand", (3, 1), [3, 4], None),
    ("expand_new_dims", "expand", (3, 1), [2, 3, 4], None),
    ("expand_of_scalar", "expand", (), [2, 3], None),
    ("squeeze_middle", "squeeze", (3, 1, 2), [1], None),
    ("squeeze_negative", "squeeze", (3, 2, 1), [-1], None),
    ("squeeze_non_unit_dim_is_noop", "squeeze", (3, 2), [1], None),
    ("unsqueeze_front", "unsqueeze", (3, 2), [0], None),
    ("unsqueeze_negative", "unsqueeze", (3, 2), [-1], None),
    ("flatten_all", "flatten", (2, 3, 4), [0, -1], None),
    ("flatten_tail", "flatten", (2, 3, 4), [1, 2], None),
    ("flatten_of_transposed", "flatten", (2, 3, 4), [0, 1], "transpose(1,2)"),
    ("contiguous_of_transposed", "contiguous", (3, 4), [], "transpose(0,1)"),
    ("contiguous_of_slice", "contiguous", (4, 6), [], "slice(1,1,6,2)"),
]
for tag, op, shape, a, pre in VIEWS:
    case(SH, tag, op, [U(*shape)], args={"a": a}, views={0: pre} if pre else None)
case(SH, "expand_then_add", "add", [U(3, 1), U(2, 3, 4)], views={0: "expand(2,3,4)"})
case(SH, "slice_then_mul", "mul", [U(3, 6), U(3, 3)], views={0: "slice(1,0,6,2)", 1: "transpose(0,1)"})
case(SH, "chain_then_relu", "relu", [U(2, 3, 4)], views={0: "permute(2,0,1)|narrow(0,1,2)|flatten(1,2)"})

CONCATS = [
    ("dim0", [(2, 3), (1, 3), (3, 3)], 0),
    ("dim1", [(2, 3), (2, 1), (2, 2)], 1),
    ("dim_neg1", [(2, 2, 3), (2, 2, 1)], -1),
    ("dim_neg2_3d", [(2, 1, 3), (2, 3, 3)], -2),
    ("single", [(2, 3)], 0),
]
for tag, shapes, dim in CONCATS:
    case(SH, f"concat_{tag}", "concat", [U(*s) for s in shapes], args={"dim": dim})
case(SH, "concat_views", "concat", [U(3, 2), U(2, 6)], args={"dim": 0},
     views={0: "transpose(0,1)", 1: "slice(1,0,6,2)"})
case(SH, "concat_with_empty", "concat", [U(2, 3), U(2, 0), U(2, 1)], args={"dim": 1})
case(SH, "concat_partial_grad", "concat", [U(2, 3), U(2, 3)], args={"dim": 1}, nograd=(0,))
for dim in (0, 1, 2, -1, -3):
    case(SH, f"stack_dim{str(dim).replace('-', 'm')}", "stack", [U(2, 3), U(2, 3), U(2, 3)],
         args={"dim": dim})
case(SH, "stack_1d", "stack", [U(4), U(4)], args={"dim": 1})
case(SH, "stack_scalars", "stack", [U(), U(), U()], args={"dim": 0})

# ----------------------------------------------------------------------------------
# Softmax and losses.

SL = "softmax_loss.safetensors"
for op in ("softmax", "log_softmax"):
    case(SL, f"{op}_last", op, [U(3, 5, lo=-3, hi=3)], args={"dim": -1}, tol="scaled")
    case(SL, f"{op}_middle", op, [U(2, 4, 3, lo=-3, hi=3)], args={"dim": 1}, tol="scaled")
    case(SL, f"{op}_first", op, [U(4, 3, lo=-3, hi=3)], args={"dim": 0}, tol="scaled")
    case(SL, f"{op}_negative_middle", op, [U(2, 3, 4, lo=-3, hi=3)], args={"dim": -2}, tol="scaled")
    case(SL, f"{op}_1d", op, [U(6, lo=-3, hi=3)], args={"dim": 0}, tol="scaled")
    case(SL, f"{op}_large", op, [[[100.0, 101.0, 99.0, -100.0], [-1e3, -1e3 + 1, -1e3 + 2, -1e3 + 3]]],
         args={"dim": 1}, tol="scaled")
    case(SL, f"{op}_masked", op, [[[0.5, -INF, 1.5, -0.5], [-INF, -INF, 2.0, 0.0]]], args={"dim": -1},
         tol="scaled")
    case(SL, f"{op}_all_masked_row", op, [[[-INF, -INF, -INF], [0.0, 1.0, 2.0]]], args={"dim": -1},
         tol="scaled")
    case(SL, f"{op}_pos_inf", op, [[[0.5, INF, 1.5], [1.0, 2.0, 3.0]]], args={"dim": -1}, tol="scaled")
    case(SL, f"{op}_scalar", op, [U()], args={"dim": 0}, tol="scaled")
    case(SL, f"{op}_permuted", op, [U(3, 2, 4, lo=-3, hi=3)], args={"dim": 1}, views={0: "permute(1,2,0)"},
         tol="scaled")


def CE(name, shape, target, reduction="mean", ignore_index=-100, label_smoothing=0.0, views=None):
    case(SL, name, "cross_entropy", [U(*shape, lo=-3, hi=3)], target=target,
         args={"reduction": reduction, "ignore_index": ignore_index, "label_smoothing": label_smoothing},
         views=views, tol="scaled")


for r in ("none", "mean", "sum"):
    CE(f"cross_entropy_nc_{r}", (4, 5), [1, 0, 4, 2], reduction=r)
    CE(f"cross_entropy_ncd_{r}", (2, 3, 4), [[0, 1, 2, 1], [2, 2, 0, 1]], reduction=r)
    CE(f"cross_entropy_ignore_default_{r}", (4, 3), [1, -100, 2, -100], reduction=r)
    CE(f"cross_entropy_ignore_custom_{r}", (5, 4), [1, 2, 3, 2, 0], reduction=r, ignore_index=2)
    CE(f"cross_entropy_smoothing_{r}", (4, 5), [1, 0, 4, 2], reduction=r, label_smoothing=0.1)
    CE(f"cross_entropy_smoothing_ignore_{r}", (4, 5), [1, 3, 4, 3], reduction=r, label_smoothing=0.25,
       ignore_index=3)
    CE(f"cross_entropy_ncd_smoothing_ignore_{r}", (2, 3, 4), [[0, -100, 2, 1], [2, 2, -100, 1]],
       reduction=r, label_smoothing=0.2)
CE("cross_entropy_ncdd_mean", (2, 3, 2, 2), [[[0, 1], [2, 1]], [[2, 0, ], [1, 1]]])
CE("cross_entropy_1d_input", (5,), 3, reduction="mean")
CE("cross_entropy_1d_input_none", (5,), 3, reduction="none")
CE("cross_entropy_all_ignored_mean", (3, 4), [-100, -100, -100], reduction="mean")
CE("cross_entropy_all_ignored_sum", (3, 4), [-100, -100, -100], reduction="sum")
CE("cross_entropy_negative_smoothing", (3, 4), [0, 1, 2], label_smoothing=-0.1)
for r in ("none", "sum"):
    for ls in (0.0, 0.1):
        case(SL, f"cross_entropy_masked_logit_{r}_ls{ls}", "cross_entropy",
             [[[0.5, -INF, 1.5, -0.5], [-INF, 1.0, 2.0, 0.0], [0.0, 1.0, -INF, 2.0]]], target=[0, 1, 3],
             args={"reduction": r, "ignore_index": -100, "label_smoothing": ls}, tol="scaled")
CE("cross_entropy_full_smoothing", (3, 4), [0, 1, 2], label_smoothing=1.0)
CE("cross_entropy_transposed_logits", (5, 4), [1, 0, 4, 2], views={0: "transpose(0,1)"})

for r in ("none", "mean", "sum"):
    case(SL, f"mse_loss_{r}", "mse_loss", [U(3, 4), U(3, 4)], args={"reduction": r}, tol="scaled")
case(SL, "mse_loss_3d_mean", "mse_loss", [U(2, 3, 4), U(2, 3, 4)], args={"reduction": "mean"}, tol="scaled")
case(SL, "mse_loss_target_no_grad", "mse_loss", [U(5), U(5)], args={"reduction": "sum"}, nograd=(1,),
     tol="scaled")
case(SL, "mse_loss_transposed", "mse_loss", [U(4, 3), U(3, 4)], args={"reduction": "mean"},
     views={0: "transpose(0,1)"}, tol="scaled")

# ----------------------------------------------------------------------------------

# ----------------------------------------------------------------------------------
# Convolution, pooling and pad (tests/torch_ops/call_conv.rs: conv1d, conv2d, max_pool2d,
# avg_pool2d, adaptive_avg_pool2d, pad). Spatial arguments are [h, w] lists (one value
# for conv1d); a pool's `stride=none` means the kernel size.

CV = "conv.safetensors"


def CONV2D(name, x, w, b=True, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1, views=None,
           nograd=(), out_channels=None):
    inputs = [U(*x), U(*w)] + ([U(out_channels or w[0])] if b else [])
    case(CV, name, "conv2d", inputs, args={"stride": list(stride), "padding": list(padding),
                                           "dilation": list(dilation), "groups": groups},
         views=views, nograd=nograd, tol="scaled")


def CONV1D(name, x, w, b=True, stride=1, padding=0, dilation=1, groups=1, views=None, nograd=()):
    inputs = [U(*x), U(*w)] + ([U(w[0])] if b else [])
    case(CV, name, "conv1d", inputs, args={"stride": stride, "padding": padding, "dilation": dilation,
                                           "groups": groups},
         views=views, nograd=nograd, tol="scaled")


CONV2D("conv2d_basic", (2, 3, 7, 6), (4, 3, 3, 3))
CONV2D("conv2d_no_bias", (2, 3, 7, 6), (4, 3, 3, 3), b=False)
CONV2D("conv2d_stride2_pad1", (2, 3, 8, 7), (5, 3, 3, 3), stride=(2, 2), padding=(1, 1))
CONV2D("conv2d_asymmetric", (1, 2, 9, 8), (3, 2, 3, 2), stride=(2, 1), padding=(0, 2), dilation=(2, 1))
CONV2D("conv2d_dilation2", (2, 2, 9, 9), (3, 2, 3, 3), dilation=(2, 2), padding=(2, 1))
CONV2D("conv2d_stride_gt_kernel", (1, 2, 11, 10), (2, 2, 2, 2), stride=(3, 4), padding=(1, 0))
CONV2D("conv2d_groups2", (2, 4, 6, 6), (6, 2, 3, 3), groups=2, padding=(1, 1))
CONV2D("conv2d_groups3_stride", (2, 6, 7, 7), (3, 2, 3, 3), groups=3, stride=(2, 2), dilation=(1, 2))
CONV2D("conv2d_depthwise", (2, 3, 6, 5), (3, 1, 3, 3), groups=3, padding=(1, 1))
CONV2D("conv2d_depthwise_multiplier2", (2, 3, 6, 5), (6, 1, 3, 3), groups=3, stride=(1, 2))
CONV2D("conv2d_depthwise_no_bias", (1, 4, 5, 5), (4, 1, 2, 3), b=False, groups=4, dilation=(2, 1))
CONV2D("conv2d_unbatched", (3, 6, 6), (4, 3, 3, 3), padding=(1, 1))
CONV2D("conv2d_unbatched_groups", (4, 5, 6), (4, 2, 2, 2), groups=2, stride=(2, 1))
CONV2D("conv2d_1x1", (2, 5, 4, 3), (3, 5, 1, 1))
CONV2D("conv2d_kernel_fills_padded_input", (2, 2, 3, 4), (3, 2, 5, 4), padding=(1, 0))
CONV2D("conv2d_wide_k", (2, 8, 10, 10), (16, 8, 3, 3), padding=(1, 1))
CONV2D("conv2d_batch_sum", (6, 3, 5, 5), (2, 3, 3, 3), stride=(2, 2))
CONV2D("conv2d_transposed_input", (2, 3, 6, 7), (4, 3, 3, 2), views={0: "transpose(2,3)"}, padding=(1, 0))
CONV2D("conv2d_strided_input", (2, 3, 7, 12), (4, 3, 3, 3), views={0: "slice(3,1,12,2)"})
CONV2D("conv2d_permuted_input", (3, 2, 6, 5), (4, 3, 2, 2), views={0: "permute(1,0,2,3)"}, stride=(2, 1))
CONV2D("conv2d_transposed_weight", (2, 3, 6, 6), (3, 4, 3, 3), views={1: "transpose(0,1)"}, out_channels=4)
CONV2D("conv2d_weight_only_grad", (2, 3, 5, 5), (4, 3, 3, 3), nograd=(0,), padding=(1, 1))
CONV2D("conv2d_input_only_grad", (2, 3, 5, 5), (4, 3, 3, 3), nograd=(1, 2), stride=(2, 2))
CONV2D("conv2d_bias_only_grad", (2, 3, 5, 5), (4, 3, 3, 3), nograd=(0, 1))
CONV2D("conv2d_empty_batch", (0, 3, 5, 5), (4, 3, 3, 3))

CONV1D("conv1d_basic", (2, 3, 10), (4, 3, 3))
CONV1D("conv1d_no_bias", (2, 3, 10), (4, 3, 3), b=False)
CONV1D("conv1d_stride_pad_dil", (2, 2, 13), (3, 2, 3), stride=2, padding=2, dilation=2)
CONV1D("conv1d_groups2", (2, 4, 9), (6, 2, 2), groups=2, padding=1)
CONV1D("conv1d_depthwise", (3, 5, 8), (5, 1, 3), groups=5, padding=1)
CONV1D("conv1d_depthwise_multiplier3", (2, 2, 8), (6, 1, 4), groups=2, stride=3)
CONV1D("conv1d_unbatched", (3, 9), (2, 3, 4), padding=1)
CONV1D("conv1d_transposed_input", (2, 11, 3), (4, 3, 3), views={0: "transpose(1,2)"})
CONV1D("conv1d_kernel_fills_padded_input", (2, 3, 4), (2, 3, 6), padding=1)


def MAXPOOL(name, x, kernel, stride=None, padding=(0, 0), dilation=(1, 1), ceil_mode=False, views=None):
    case(CV, name, "max_pool2d", [x if not isinstance(x, tuple) else U(*x)],
         args={"kernel": list(kernel), "stride": None if stride is None else list(stride),
               "padding": list(padding), "dilation": list(dilation), "ceil_mode": ceil_mode},
         views=views)


MAXPOOL("max_pool2d_2x2", (2, 3, 6, 8), (2, 2))
MAXPOOL("max_pool2d_3x3_s2_p1", (2, 2, 7, 7), (3, 3), stride=(2, 2), padding=(1, 1))
MAXPOOL("max_pool2d_ceil", (1, 2, 7, 6), (2, 2), ceil_mode=True)
MAXPOOL("max_pool2d_ceil_pad", (1, 2, 8, 7), (3, 3), stride=(2, 2), padding=(1, 1), ceil_mode=True)
MAXPOOL("max_pool2d_ceil_last_window_dropped", (1, 1, 5, 5), (2, 2), stride=(4, 4), ceil_mode=True)
MAXPOOL("max_pool2d_dilation", (2, 2, 9, 8), (3, 2), stride=(1, 2), dilation=(2, 3))
MAXPOOL("max_pool2d_dilation_pad_ceil", (1, 3, 8, 9), (3, 3), stride=(2, 2), padding=(1, 1), dilation=(2, 2),
        ceil_mode=True)
MAXPOOL("max_pool2d_overlapping", (2, 2, 6, 6), (3, 3), stride=(1, 1))
MAXPOOL("max_pool2d_nonsquare", (2, 2, 5, 9), (1, 3), stride=(1, 2), padding=(0, 1))
MAXPOOL("max_pool2d_unbatched", (3, 6, 6), (2, 2))
MAXPOOL("max_pool2d_transposed_input", (2, 2, 6, 8), (2, 2), views={0: "transpose(2,3)"})
MAXPOOL("max_pool2d_ties", lambda r: r.integers(0, 3, size=(2, 2, 6, 6)).astype(np.float32), (3, 3),
        stride=(1, 1), padding=(1, 1))
MAXPOOL("max_pool2d_nan_inf", [[[[1.0, NAN, 2.0, NAN], [-INF, -INF, 3.0, 3.0], [INF, 0.0, -1.0, -INF],
                                 [-INF, -INF, -INF, -INF]]]], (2, 2), stride=(1, 1))


def AVGPOOL(name, x, kernel, stride=None, padding=(0, 0), ceil_mode=False, count_include_pad=True,
            divisor_override=None, views=None):
    case(CV, name, "avg_pool2d", [U(*x)],
         args={"kernel": list(kernel), "stride": None if stride is None else list(stride),
               "padding": list(padding), "ceil_mode": ceil_mode, "count_include_pad": count_include_pad,
               "divisor_override": divisor_override},
         views=views, tol="scaled")


AVGPOOL("avg_pool2d_2x2", (2, 3, 6, 8), (2, 2))
for inc in (True, False):
    t = "incl" if inc else "excl"
    AVGPOOL(f"avg_pool2d_pad_{t}", (2, 2, 7, 7), (3, 3), stride=(2, 2), padding=(1, 1), count_include_pad=inc)
    AVGPOOL(f"avg_pool2d_ceil_{t}", (1, 2, 7, 6), (2, 2), ceil_mode=True, count_include_pad=inc)
    AVGPOOL(f"avg_pool2d_ceil_pad_{t}", (1, 2, 5, 5), (3, 3), stride=(2, 2), padding=(1, 1), ceil_mode=True,
            count_include_pad=inc)
    AVGPOOL(f"avg_pool2d_ceil_pad_stride3_{t}", (1, 2, 8, 7), (4, 3), stride=(3, 2), padding=(2, 1),
            ceil_mode=True, count_include_pad=inc)
    AVGPOOL(f"avg_pool2d_divisor_override_{t}", (2, 2, 6, 7), (3, 2), stride=(2, 2), padding=(1, 1),
            ceil_mode=True, count_include_pad=inc, divisor_override=5)
AVGPOOL("avg_pool2d_overlapping", (2, 2, 6, 6), (3, 3), stride=(1, 1))
AVGPOOL("avg_pool2d_nonsquare", (2, 2, 5, 9), (1, 3), stride=(1, 2), padding=(0, 1))
AVGPOOL("avg_pool2d_unbatched", (3, 6, 6), (2, 2))
AVGPOOL("avg_pool2d_strided_input", (2, 2, 6, 12), (2, 2), views={0: "slice(3,0,12,2)"})


def ADAPTIVE(name, x, out, views=None):
    case(CV, name, "adaptive_avg_pool2d", [U(*x)], args={"output_size": list(out)}, views=views, tol="scaled")


ADAPTIVE("adaptive_avg_pool2d_divisible", (2, 3, 8, 6), (4, 3))
ADAPTIVE("adaptive_avg_pool2d_non_divisible", (2, 3, 7, 5), (3, 2))
ADAPTIVE("adaptive_avg_pool2d_non_divisible_2", (1, 2, 10, 11), (4, 3))
ADAPTIVE("adaptive_avg_pool2d_global", (2, 4, 5, 7), (1, 1))
ADAPTIVE("adaptive_avg_pool2d_upsample", (1, 2, 3, 3), (5, 4))
ADAPTIVE("adaptive_avg_pool2d_identity", (1, 2, 4, 3), (4, 3))
ADAPTIVE("adaptive_avg_pool2d_unbatched", (3, 7, 6), (2, 4))
ADAPTIVE("adaptive_avg_pool2d_transposed_input", (2, 2, 5, 7), (3, 2), views={0: "transpose(2,3)"})


def PAD(name, x, pads, value=0.0, views=None):
    case(CV, name, "pad", [U(*x)], args={"pads": list(pads), "value": value}, views=views)


PAD("pad_last_dim", (2, 3, 4), (1, 2))
PAD("pad_two_dims", (2, 3, 4), (1, 0, 2, 3))
PAD("pad_all_dims", (2, 3, 4), (0, 1, 2, 0, 1, 1), value=-1.5)
PAD("pad_1d", (5,), (3, 2), value=2.0)
PAD("pad_zeros", (2, 3), (0, 0, 0, 0))
PAD("pad_empty_list", (2, 3), ())
PAD("pad_4d_nchw", (2, 2, 3, 3), (1, 1, 1, 1))
PAD("pad_transposed_input", (4, 3), (2, 1, 0, 2), views={0: "transpose(0,1)"}, value=0.25)
PAD("pad_nan_value", (2, 2), (1, 1), value=NAN)

# ----------------------------------------------------------------------------------
# Normalisation, embedding, index_select, split/chunk and scaled dot-product attention
# (tests/torch_ops/call_norm_attention.rs: batch_norm, layer_norm, group_norm, embedding,
# index_select, split, split_sizes, chunk, scaled_dot_product_attention). Optional inputs
# follow the required ones in the order the flags list them; integer indices travel as
# arguments.

NA = "norm_attention.safetensors"
NORM_ATTENTION_OPS = ("batch_norm", "layer_norm", "group_norm", "embedding", "index_select", "split",
                      "split_sizes", "chunk", "scaled_dot_product_attention")


def norm_attention_op(op, x, args):
    if op == "batch_norm":
        rest = list(x[1:])
        rm = rest.pop(0) if args["stats"] else None
        rv = rest.pop(0) if args["stats"] else None
        w = rest.pop(0) if args["weight"] else None
        b = rest.pop(0) if args["bias"] else None
        y = F.batch_norm(x[0], rm, rv, w, b, training=bool(args["training"]), momentum=args["momentum"],
                         eps=args["eps"])
        if args["with_stats"]:
            # The updated running statistics are checked as part of the output.
            return torch.cat([y.reshape(-1), rm.detach().clone(), rv.detach().clone()])
        return y
    if op == "layer_norm":
        rest = list(x[1:])
        w = rest.pop(0) if args["weight"] else None
        b = rest.pop(0) if args["bias"] else None
        return F.layer_norm(x[0], args["normalized_shape"], w, b, eps=args["eps"])
    if op == "group_norm":
        rest = list(x[1:])
        w = rest.pop(0) if args["weight"] else None
        b = rest.pop(0) if args["bias"] else None
        return F.group_norm(x[0], args["num_groups"], w, b, eps=args["eps"])
    if op == "embedding":
        idx = torch.tensor(args["indices"], dtype=torch.int64).reshape(args["ishape"])
        return F.embedding(idx, x[0], padding_idx=args["padding_idx"])
    if op == "index_select":
        return torch.index_select(x[0], args["dim"], torch.tensor(args["indices"], dtype=torch.int64))
    if op in ("split", "split_sizes", "chunk"):
        if op == "split":
            pieces = torch.split(x[0], args["split_size"], dim=args["dim"])
        elif op == "split_sizes":
            pieces = torch.split(x[0], list(args["sizes"]), dim=args["dim"])
        else:
            pieces = torch.chunk(x[0], args["chunks"], dim=args["dim"])
        assert len(pieces) == args["npieces"], (op, len(pieces), args["npieces"])
        # Each used piece, flattened and scaled by (its position + 1), so that the
        # gradient tells the pieces apart.
        return torch.cat([pieces[k].reshape(-1) * float(k + 1) for k in args["use"]])
    if op == "scaled_dot_product_attention":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        mask = None
        if args["mask"] == "bool":
            mask = x[3] != 0
        elif args["mask"] == "additive":
            mask = x[3]
        with sdpa_kernel(SDPBackend.MATH):
            return F.scaled_dot_product_attention(x[0], x[1], x[2], attn_mask=mask,
                                                  is_causal=bool(args["causal"]), scale=args["scale"])
    raise ValueError(op)


def BN(name, shape, stats=True, weight=True, bias=True, training=True, momentum=0.1, eps=1e-5, views=None,
       nograd=(), x=None):
    c = shape[1]
    inputs = [x if x is not None else U(*shape)]
    ng = set(nograd)
    if stats:
        inputs += [U(c, lo=-0.5, hi=0.5), POS(c, lo=0.5, hi=2.0)]
        ng |= {1, 2}
    if weight:
        inputs.append(U(c, lo=0.5, hi=1.5))
    if bias:
        inputs.append(U(c))
    case(NA, name, "batch_norm", inputs,
         args={"stats": stats, "weight": weight, "bias": bias, "training": training, "momentum": momentum,
               "eps": eps, "with_stats": stats and training},
         views=views, nograd=tuple(sorted(ng)), tol="scaled")


BN("batch_norm_train_2d", (6, 4))
BN("batch_norm_train_3d", (3, 4, 5))
BN("batch_norm_train_4d", (2, 3, 4, 5))
BN("batch_norm_train_5d", (2, 2, 3, 2, 2), momentum=0.3)
BN("batch_norm_train_no_affine", (3, 4, 5), weight=False, bias=False)
BN("batch_norm_train_weight_only", (3, 4, 5), bias=False)
BN("batch_norm_train_bias_only", (3, 4, 5), weight=False)
BN("batch_norm_train_no_running_stats", (4, 3, 6), stats=False)
BN("batch_norm_train_momentum_1", (4, 3, 2), momentum=1.0)
BN("batch_norm_train_momentum_0", (4, 3, 2), momentum=0.0)
BN("batch_norm_train_eps_large", (4, 3, 2), eps=0.5)
BN("batch_norm_train_two_values", (2, 3))
BN("batch_norm_train_one_sample_spatial", (1, 3, 4, 4))
BN("batch_norm_train_offset_data", (8, 3, 3), x=lambda r: r.uniform(99.0, 101.0, size=(8, 3, 3)))
BN("batch_norm_train_transposed_input", (3, 4, 5), views={0: "transpose(0,2)"}, x=U(5, 4, 3))
BN("batch_norm_train_permuted_nhwc", (2, 3, 4, 5), views={0: "permute(0,3,1,2)"}, x=U(2, 4, 5, 3))
BN("batch_norm_train_input_only_grad", (3, 4, 5), nograd=(3, 4))
BN("batch_norm_train_params_only_grad", (3, 4, 5), nograd=(0,))
BN("batch_norm_eval_4d", (2, 3, 4, 5), training=False)
BN("batch_norm_eval_2d", (5, 4), training=False)
BN("batch_norm_eval_no_affine", (3, 4, 5), training=False, weight=False, bias=False)
BN("batch_norm_eval_one_value", (1, 3), training=False)
BN("batch_norm_eval_transposed_input", (3, 4, 5), training=False, views={0: "transpose(0,2)"}, x=U(5, 4, 3))


def LN(name, shape, normalized, weight=True, bias=True, eps=1e-5, views=None, nograd=(), x=None, w=None):
    inputs = [x if x is not None else U(*shape)]
    if weight:
        inputs.append(w if w is not None else U(*normalized, lo=0.5, hi=1.5))
    if bias:
        inputs.append(U(*normalized))
    case(NA, name, "layer_norm", inputs,
         args={"normalized_shape": list(normalized), "weight": weight, "bias": bias, "eps": eps},
         views=views, nograd=nograd, tol="scaled")


LN("layer_norm_last", (4, 6), (6,))
LN("layer_norm_3d_last", (2, 3, 8), (8,))
LN("layer_norm_two_dims", (2, 3, 4), (3, 4))
LN("layer_norm_three_dims", (2, 3, 2, 4), (3, 2, 4))
LN("layer_norm_all_dims", (3, 5), (3, 5))
LN("layer_norm_no_affine", (3, 7), (7,), weight=False, bias=False)
LN("layer_norm_weight_only", (3, 7), (7,), bias=False)
LN("layer_norm_bias_only", (3, 7), (7,), weight=False)
# One value per group: the exact results are y = b and dx = 0, which exactgrad gives; with
# eps = 1e-5 PyTorch's own rounding, amplified by 1/sqrt(eps), exceeds the tolerance, so
# these cases use a larger eps (tests/gradcheck/gradcheck_norm.rs checks the exact values).
LN("layer_norm_one_element", (4, 1), (1,), eps=1e-3)
LN("layer_norm_eps_large", (3, 5), (5,), eps=0.25)
# A large offset against the spread (at offset 1000 PyTorch's own error exceeds the
# tolerance; tests/gradcheck/gradcheck_norm.rs compares that case with an f64 reference).
LN("layer_norm_offset_data", (3, 16), (16,), x=lambda r: r.uniform(99.0, 101.0, size=(3, 16)))
LN("layer_norm_1d_input", (6,), (6,))
LN("layer_norm_transposed_input", (4, 6), (4,), views={0: "transpose(0,1)"}, x=U(4, 6))
LN("layer_norm_strided_input", (3, 5), (5,), views={0: "slice(1,0,10,2)"}, x=U(3, 10))
LN("layer_norm_transposed_weight", (2, 3, 4), (3, 4), views={1: "transpose(0,1)"}, w=U(4, 3))
LN("layer_norm_params_only_grad", (3, 6), (6,), nograd=(0,))
LN("layer_norm_input_only_grad", (3, 6), (6,), nograd=(1, 2))


def GN(name, shape, groups, weight=True, bias=True, eps=1e-5, views=None, nograd=(), x=None):
    c = shape[1]
    inputs = [x if x is not None else U(*shape)]
    if weight:
        inputs.append(U(c, lo=0.5, hi=1.5))
    if bias:
        inputs.append(U(c))
    case(NA, name, "group_norm", inputs,
         args={"num_groups": groups, "weight": weight, "bias": bias, "eps": eps},
         views=views, nograd=nograd, tol="scaled")


GN("group_norm_4d", (2, 6, 3, 4), 3)
GN("group_norm_3d", (3, 4, 5), 2)
GN("group_norm_2d_input", (4, 6), 2)
GN("group_norm_one_group", (2, 4, 3, 3), 1)
GN("group_norm_instance_like", (2, 4, 3, 3), 4)
GN("group_norm_no_affine", (2, 6, 5), 3, weight=False, bias=False)
GN("group_norm_weight_only", (2, 6, 5), 2, bias=False)
GN("group_norm_one_value_per_group", (2, 4), 4, eps=1e-3)  # see layer_norm_one_element
GN("group_norm_5d", (2, 4, 2, 3, 2), 2)
GN("group_norm_transposed_input", (2, 4, 5), 2, views={0: "transpose(1,2)"}, x=U(2, 5, 4))
GN("group_norm_params_only_grad", (2, 6, 4), 3, nograd=(0,))


def EMB(name, num, dim, indices, ishape, padding_idx=None, views=None, w=None):
    case(NA, name, "embedding", [w if w is not None else U(num, dim)],
         args={"indices": list(indices), "ishape": list(ishape), "padding_idx": padding_idx}, views=views)


EMB("embedding_1d", 6, 4, [1, 0, 5, 2], [4])
EMB("embedding_2d_repeated", 5, 3, [1, 3, 1, 1, 0, 3], [2, 3])
EMB("embedding_many_repeats", 3, 4, [2] * 7 + [0] * 5, [3, 4])
EMB("embedding_padding_idx", 6, 3, [0, 2, 0, 5, 2, 1], [3, 2], padding_idx=0)
EMB("embedding_padding_idx_negative", 6, 3, [5, 2, 0, 5, 2, 1], [6], padding_idx=-1)
EMB("embedding_padding_unused", 4, 2, [1, 2, 3], [3], padding_idx=0)
EMB("embedding_scalar_index", 4, 3, [2], [])
EMB("embedding_3d_indices", 5, 2, [4, 0, 1, 1, 3, 2, 0, 0], [2, 2, 2])
EMB("embedding_empty_indices", 4, 3, [], [0])
EMB("embedding_transposed_weight", 5, 3, [4, 1, 1], [3], views={0: "transpose(0,1)"}, w=U(3, 5))


def ISEL(name, shape, dim, indices, views=None, x=None):
    case(NA, name, "index_select", [x if x is not None else U(*shape)],
         args={"dim": dim, "indices": list(indices)}, views=views)


ISEL("index_select_dim0", (5, 3), 0, [4, 0, 2])
ISEL("index_select_dim1_repeated", (3, 5), 1, [1, 1, 4, 0, 1])
ISEL("index_select_last_3d", (2, 3, 4), -1, [3, 3, 0])
ISEL("index_select_middle_3d", (2, 4, 3), 1, [2, 0, 2, 3, 2])
ISEL("index_select_empty", (3, 4), 1, [])
ISEL("index_select_1d", (6,), 0, [5, 5, 5, 1])
ISEL("index_select_transposed", (4, 3), 0, [2, 1, 2], views={0: "transpose(0,1)"}, x=U(4, 3))


def SPLIT(name, op, shape, dim, npieces, use, views=None, x=None, **kw):
    args = {"dim": dim, "npieces": npieces, "use": list(use)}
    args.update(kw)
    case(NA, name, op, [x if x is not None else U(*shape)], args=args, views=views)


SPLIT("split_even", "split", (6, 3), 0, 3, [0, 1, 2], split_size=2)
SPLIT("split_uneven", "split", (3, 7), 1, 3, [0, 1, 2], split_size=3)
SPLIT("split_partial_use", "split", (2, 7, 2), 1, 4, [1, 3], split_size=2)
SPLIT("split_larger_than_dim", "split", (3, 4), -1, 1, [0], split_size=10)
SPLIT("split_transposed", "split", (4, 5), 0, 2, [0, 1], split_size=3, views={0: "transpose(0,1)"},
      x=U(4, 5))
SPLIT("split_sizes_basic", "split_sizes", (7, 2), 0, 3, [0, 1, 2], sizes=[2, 4, 1])
SPLIT("split_sizes_with_zero", "split_sizes", (2, 5), 1, 3, [0, 1, 2], sizes=[3, 0, 2])
SPLIT("split_sizes_negative_dim_partial", "split_sizes", (2, 3, 6), -1, 3, [2, 0], sizes=[1, 2, 3])
SPLIT("chunk_even", "chunk", (2, 6), 1, 3, [0, 1, 2], chunks=3)
SPLIT("chunk_uneven", "chunk", (5, 3), 0, 3, [0, 1, 2], chunks=3)
SPLIT("chunk_fewer_pieces", "chunk", (5, 2), 0, 3, [0, 2], chunks=4)
SPLIT("chunk_more_than_size", "chunk", (2, 3), 1, 3, [2, 1], chunks=5)
SPLIT("chunk_qkv_projection", "chunk", (2, 4, 12), -1, 3, [0, 1, 2], chunks=3)


def SDPA(name, q, k, v, mask=None, mask_kind="none", causal=False, scale=None, views=None, nograd=()):
    inputs = [U(*q), U(*k), U(*v)]
    ng = set(nograd)
    if mask is not None:
        inputs.append(mask)
        if mask_kind == "bool":
            ng.add(3)
    case(NA, name, "scaled_dot_product_attention", inputs,
         args={"mask": mask_kind, "causal": causal, "scale": scale}, views=views, nograd=tuple(sorted(ng)),
         tol="scaled")


def BOOLMASK(*shape, p_keep=0.7):
    return lambda r: (r.uniform(0, 1, size=shape) < p_keep).astype(np.float32)


SDPA("sdpa_basic_4d", (2, 3, 4, 8), (2, 3, 5, 8), (2, 3, 5, 6))
SDPA("sdpa_3d", (2, 5, 4), (2, 5, 4), (2, 5, 3))
SDPA("sdpa_2d", (4, 6), (7, 6), (7, 5))
SDPA("sdpa_scale", (2, 3, 4), (2, 6, 4), (2, 6, 4), scale=0.37)
SDPA("sdpa_scale_large", (1, 4, 3), (1, 4, 3), (1, 4, 2), scale=2.5)
SDPA("sdpa_causal_square", (2, 2, 5, 4), (2, 2, 5, 4), (2, 2, 5, 3), causal=True)
SDPA("sdpa_causal_more_queries", (2, 6, 4), (2, 4, 4), (2, 4, 3), causal=True)
SDPA("sdpa_causal_more_keys", (2, 3, 4), (2, 6, 4), (2, 6, 3), causal=True, scale=0.5)
SDPA("sdpa_bool_full", (2, 2, 4, 4), (2, 2, 6, 4), (2, 2, 6, 3), mask=BOOLMASK(2, 2, 4, 6), mask_kind="bool")
SDPA("sdpa_bool_broadcast_ls", (2, 2, 4, 4), (2, 2, 6, 4), (2, 2, 6, 3), mask=BOOLMASK(4, 6), mask_kind="bool")
SDPA("sdpa_bool_key_padding", (2, 2, 4, 4), (2, 2, 5, 4), (2, 2, 5, 3),
     mask=[[[[1, 1, 1, 0, 0]]], [[[1, 1, 1, 1, 0]]]], mask_kind="bool")
SDPA("sdpa_bool_fully_masked_rows", (1, 2, 4, 3), (1, 2, 5, 3), (1, 2, 5, 2),
     mask=[[1, 0, 1, 1, 0], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]], mask_kind="bool")
SDPA("sdpa_additive_full", (2, 3, 4), (2, 5, 4), (2, 5, 3), mask=U(2, 3, 5), mask_kind="additive")
SDPA("sdpa_additive_broadcast", (2, 2, 3, 4), (2, 2, 5, 4), (2, 2, 5, 3), mask=U(2, 1, 1, 5),
     mask_kind="additive")
SDPA("sdpa_additive_no_grad", (2, 3, 4), (2, 5, 4), (2, 5, 3), mask=U(3, 5), mask_kind="additive",
     nograd=(3,))
SDPA("sdpa_additive_neg_inf", (1, 3, 4), (1, 4, 4), (1, 4, 2),
     mask=[[0.0, -INF, 0.5, -1.0], [-INF, -INF, -INF, -INF], [-INF, 0.0, -INF, 0.0]], mask_kind="additive")
SDPA("sdpa_batch_broadcast", (2, 3, 4, 4), (1, 3, 5, 4), (2, 1, 5, 3))
SDPA("sdpa_rank_broadcast", (3, 4, 4), (2, 3, 5, 4), (5, 2))
SDPA("sdpa_heads_transposed", (2, 4, 3, 6), (2, 5, 3, 6), (2, 5, 3, 4),
     views={0: "transpose(1,2)", 1: "transpose(1,2)", 2: "transpose(1,2)"})
SDPA("sdpa_key_transposed_storage", (2, 3, 4), (2, 4, 5), (2, 5, 3), views={1: "transpose(1,2)"})
SDPA("sdpa_strided_query", (2, 6, 4), (2, 5, 4), (2, 5, 3), views={0: "slice(1,0,6,2)"})
SDPA("sdpa_value_only_grad", (2, 3, 4), (2, 5, 4), (2, 5, 3), nograd=(0, 1))
SDPA("sdpa_query_only_grad", (2, 3, 4), (2, 5, 4), (2, 5, 3), nograd=(1, 2), causal=True)
SDPA("sdpa_single_key", (2, 3, 4), (2, 1, 4), (2, 1, 3))
SDPA("sdpa_large_scores", (1, 4, 8), (1, 6, 8), (1, 6, 3), scale=4.0)


def write_safetensors(path, tensors, meta):
    """A safetensors file with the header's keys sorted, so that the bytes are reproducible
    (the library's writer orders `__metadata__` by hash)."""
    header = {"__metadata__": dict(sorted(meta.items()))}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        dtype = {torch.float32: "F32", torch.int64: "I64"}[t.dtype]
        raw = t.numpy().astype("<" + t.numpy().dtype.str[1:]).tobytes()
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
    # Read back with the reference reader.
    with safe_open(path, "pt") as f:
        assert f.metadata() == header["__metadata__"]
        for name in tensors:
            assert f.get_tensor(name).numpy().tobytes() == tensors[name].contiguous().numpy().tobytes(), name


if __name__ == "__main__":
    os.makedirs(OUT_DIR, exist_ok=True)
    total = 0
    for fname, (tensors, meta) in sorted(FILES.items()):
        meta = dict(sorted(meta.items()))
        meta["generator"] = "tools/op_oracle.py"
        meta["torch"] = torch.__version__
        path = os.path.join(OUT_DIR, fname)
        write_safetensors(path, tensors, meta)
        size = os.path.getsize(path)
        total += size
        print(f"{fname}: {sum(1 for k in meta if k.startswith('case:'))} cases, {size} bytes")
    print(f"total: {len(NAMES)} cases, {total} bytes")
