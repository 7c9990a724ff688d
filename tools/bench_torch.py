#!/usr/bin/env python3
"""Times torch.matmul on the shapes of `benches/gemm.rs` and prints GFLOP/s.

Usage: .venv/bin/python tools/bench_torch.py [--threads 1,2] [--time 1.0] [--shapes NAMES]
                                             [--blas numpy] [--models SUBSTRING] [--no-peaks]

With `--blas numpy` the products are numpy.matmul (numpy's own BLAS, OpenBLAS in the
wheels) instead of torch.matmul, labelled `gemm/numpy/...`, and the model steps are
skipped; numpy's thread count cannot change inside a process, so set
OPENBLAS_NUM_THREADS to the one value given to --threads (tools/compare_speed.py does).
`--shapes models` times the training steps of `benches/models.rs` instead (see the
second half of this file); `--models step/` keeps only the benches whose name contains
the given text and `--no-peaks` skips the peak memory of the steps.

Each line has the same form as the summary that `cargo bench --bench gemm` prints:

    gemm/torch/t1/512x512x512            median   123.45 GFLOP/s   (min 120.00, max 125.10, 400 calls, cpu-time median 124.00)

Every call is timed on its own (as the Rust bench does), after a warm-up; the line gives
the median, the slowest and the fastest call as GFLOP/s = 2*m*n*k / seconds / 1e9. The
median of single calls is robust to the time slices that other processes take on a shared
machine. At one thread the line also gives the median over the calls' CPU time of the
calling thread (which does the work), unaffected by other processes' time slices. The
output tensor is preallocated (`out=`), as the Rust benches write into a preallocated
buffer.
"""

import argparse
import statistics
import time

import torch

# (name, m, k, n): the same list as benches/gemm.rs.
SHAPES = [
    ("sq256", 256, 256, 256),
    ("sq512", 512, 512, 512),
    ("sq1024", 1024, 1024, 1024),
    ("qkv", 512, 128, 384),
    ("ff_up", 512, 128, 512),
    ("ff_down", 512, 512, 128),
    ("proj", 512, 128, 128),
]


def bench(m, k, n, seconds, warmup, blas="torch"):
    g = torch.Generator().manual_seed(0)
    a = torch.rand(m, k, generator=g) - 0.5
    b = torch.rand(k, n, generator=g) - 0.5
    out = torch.empty(m, n)
    if blas == "numpy":
        import numpy

        a, b, out = a.numpy(), b.numpy(), out.numpy()

        def product():
            numpy.matmul(a, b, out=out)

    else:

        def product():
            torch.matmul(a, b, out=out)

    flops = 2.0 * m * n * k
    deadline = time.perf_counter() + warmup
    while time.perf_counter() < deadline:
        product()
    calls = []
    cpu = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(calls) < 10:
        t0 = time.perf_counter()
        c0 = time.thread_time()
        product()
        c1 = time.thread_time()
        calls.append(flops / (time.perf_counter() - t0) / 1e9)
        cpu.append(flops / max(c1 - c0, 1e-9) / 1e9)
    return statistics.median(calls), min(calls), max(calls), len(calls), statistics.median(cpu)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--time", type=float, default=0.6, help="seconds of timed calls per benchmark")
    p.add_argument("--warmup", type=float, default=0.2, help="seconds of warm-up per benchmark")
    p.add_argument("--shapes", default="", help="comma-separated shape names (default: all)")
    p.add_argument("--blas", default="torch", choices=["torch", "numpy"], help="whose matmul")
    p.add_argument("--models", default="", help="only the model benches whose name contains this")
    p.add_argument("--no-peaks", action="store_true", help="skip the peak memory of the training steps")
    args = p.parse_args()
    wanted = set(filter(None, args.shapes.split(",")))
    print(f"# torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}")
    for t in [int(x) for x in args.threads.split(",")]:
        torch.set_num_threads(t)
        for name, m, k, n in SHAPES:
            if wanted and name not in wanted:
                continue
            med, lo, hi, count, cpu = bench(m, k, n, args.time, args.warmup, args.blas)
            label = f"gemm/{args.blas}/t{t}/{m}x{k}x{n}"
            # With one thread the product runs on the calling thread, whose CPU time
            # excludes the time slices other processes take.
            cpu_note = f", cpu-time median {cpu:.2f}" if t == 1 else ""
            print(
                f"{label:<44} median {med:8.2f} GFLOP/s   "
                f"(min {lo:.2f}, max {hi:.2f}, {count} calls{cpu_note})",
                flush=True,
            )


if __name__ == "__main__":
    main()


# ----------------------------------------------------------------------------------
# Model steps: the same work as `benches/models.rs`, in PyTorch.
#
# This section runs after the GEMM timings when the script is run, with the same
# --threads, --time and --warmup; `--shapes models` selects it alone (no GEMM shape has
# that name), and a --shapes list without `models` skips it. Each line has the form of the
# summary that `cargo bench --bench models` prints:
#
#     models/step/encoder/torch/t1                 median    12.345 ms   (min ..., max ..., N calls)
#
# The models are the classes of tools/autograd_oracle.py, tools/rnn_oracle.py and
# tools/models_oracle.py (the reference models of exactgrad_nn::reference) with PyTorch's
# default initialisation, in training mode; a step is zero_grad, forward, the loss,
# backward and the optimizer's step:
#
#   conv net, encoder  cross entropy, Adam(lr=1e-3)
#   CRNN               log_softmax, the mean CTC loss, SGD(lr=0.01)
#   ResNet-18          cross entropy, SGD(lr=0.1, momentum=0.9, weight_decay=5e-4);
#                      32 images of 3x32x32 that take no gradient
#   GPT                cross entropy over every position, AdamW(lr=3e-4) (weight decay
#                      0.01); 8 sequences of 128 tokens
#
# After the timings, the peak memory of one training step, beside the lines of the same
# name that `cargo bench --bench models` prints (docs/memory.md §5): after two warm-up
# steps and with every gradient freed, the peak of the bytes PyTorch's CPU allocator
# holds during one step beyond what it held before (from the allocator's statistics that
# the profiler records with profile_memory=True: its running "Total Allocated"), and the
# bytes at rest (parameters, optimizer state and inputs).

MODEL_ENCODER = dict(d_model=128, nhead=4, dim_feedforward=512, classes=16)
MODEL_ENC_BATCH, MODEL_ENC_SEQ = 8, 64
MODEL_CONV = dict(c_in=3, c1=16, c2=32, hidden=64, classes=10)
MODEL_CONV_BATCH, MODEL_CONV_HW = 32, 32
MODEL_CRNN = dict(c1=16, c2=32, height=32, hidden=64, classes=11)
MODEL_CRNN_BATCH, MODEL_CRNN_WIDTH, MODEL_CRNN_TARGETS = 8, 128, (5, 10)
MODEL_RESNET_BATCH, MODEL_RESNET_HW = 32, 32
MODEL_GPT = dict(vocab=256, context=128, d_model=256, nhead=4, layers=6, dim_feedforward=1024)
MODEL_GPT_BATCH = 8
# examples/char_gpt.rs's default model and batch: 75 characters of Pride and Prejudice,
# windows of 64, 4 blocks of width 128 (4 heads, feed-forward 512), 16 windows, AdamW.
MODEL_CHAR_GPT = dict(vocab=75, context=64, d_model=128, nhead=4, layers=4, dim_feedforward=512)
MODEL_CHAR_GPT_BATCH, MODEL_CHAR_GPT_LR = 16, 3e-3


def time_calls_ms(fn, seconds, warmup):
    """Median, fastest and slowest of individually timed calls of fn, in ms, and the
    calling thread's mean CPU time per call (the whole work's at one thread)."""
    deadline = time.perf_counter() + warmup
    while time.perf_counter() < deadline:
        fn()
    calls = []
    cpu = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(calls) < 10:
        t0 = time.perf_counter()
        c0 = time.thread_time()
        fn()
        cpu.append((time.thread_time() - c0) * 1e3)
        calls.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(calls), min(calls), max(calls), len(calls), sum(cpu) / len(cpu)


def import_models():
    """The model classes of the oracle scripts. Importing them sets one thread and
    deterministic algorithms (the oracles' settings), so the benches import them once
    before choosing their thread count, and measure PyTorch's default algorithms."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from autograd_oracle import ConvNet, Encoder
    from models_oracle import Gpt, ResNet
    from rnn_oracle import Crnn

    torch.use_deterministic_algorithms(False)
    return dict(ConvNet=ConvNet, Encoder=Encoder, Crnn=Crnn, ResNet=ResNet, Gpt=Gpt)


def model_benches(classes):
    """(name, fn) pairs, each fn one call of the timed work."""
    import torch.nn.functional as F

    ConvNet, Encoder, Crnn = classes["ConvNet"], classes["Encoder"], classes["Crnn"]
    ResNet, Gpt = classes["ResNet"], classes["Gpt"]
    g = torch.Generator().manual_seed(0)

    def leaf(*shape):
        return torch.randn(*shape, generator=g).requires_grad_(True)

    def conv(xs, ws):
        x, w, b = leaf(*xs), leaf(*ws), leaf(ws[0])
        gy = torch.randn(xs[0], ws[0], xs[2], xs[3], generator=g)

        def fn():
            for t in (x, w, b):
                t.grad = None
            F.conv2d(x, w, b, padding=1).backward(gy)

        return fn

    hd = MODEL_ENCODER["d_model"] // MODEL_ENCODER["nhead"]
    shape = (MODEL_ENC_BATCH, MODEL_ENCODER["nhead"], MODEL_ENC_SEQ, hd)
    lengths = [MODEL_ENC_SEQ - i * MODEL_ENC_SEQ // (2 * MODEL_ENC_BATCH) for i in range(MODEL_ENC_BATCH)]
    padded = torch.tensor([[j >= n for j in range(MODEL_ENC_SEQ)] for n in lengths])

    def attention():
        q, k, v = leaf(*shape), leaf(*shape), leaf(*shape)
        keep = (~padded)[:, None, None, :]  # F.sdpa: True takes part
        go = torch.randn(*shape, generator=g)

        def fn():
            for t in (q, k, v):
                t.grad = None
            F.scaled_dot_product_attention(q, k, v, attn_mask=keep).backward(go)

        return fn

    def resettable(fn, opt, tensors):
        # What step_peak needs: every gradient freed, and the tensors held at rest.
        def reset():
            opt.zero_grad()
            for t in tensors:
                t.grad = None

        fn.reset = reset
        fn.at_rest = lambda: list(tensors) + [
            v for st in opt.state.values() for v in st.values() if torch.is_tensor(v)
        ] + [p for grp in opt.param_groups for p in grp["params"]]
        return fn

    def step(model, inputs, loss_fn, make_opt=lambda p: torch.optim.Adam(p, lr=1e-3)):
        model.train()
        opt = make_opt(model.parameters())

        def fn():
            opt.zero_grad()
            loss_fn(model(*inputs)).backward()
            opt.step()

        return resettable(fn, opt, [t for t in inputs if torch.is_tensor(t)])

    conv_net = ConvNet(**MODEL_CONV)
    images = leaf(MODEL_CONV_BATCH, 3, MODEL_CONV_HW, MODEL_CONV_HW)
    classes = torch.randint(0, MODEL_CONV["classes"], (MODEL_CONV_BATCH,), generator=g)
    encoder = Encoder(**MODEL_ENCODER)
    tokens = leaf(MODEL_ENC_BATCH, MODEL_ENC_SEQ, MODEL_ENCODER["d_model"])
    targets = torch.randint(0, MODEL_ENCODER["classes"], (MODEL_ENC_BATCH, MODEL_ENC_SEQ), generator=g)
    targets[padded] = -100
    c = MODEL_ENCODER["classes"]
    crnn = Crnn(**MODEL_CRNN)
    lines = leaf(MODEL_CRNN_BATCH, 1, MODEL_CRNN["height"], MODEL_CRNN_WIDTH)
    lo, hi = MODEL_CRNN_TARGETS
    target_lengths = torch.randint(lo, hi + 1, (MODEL_CRNN_BATCH,), generator=g)
    labels = torch.randint(1, MODEL_CRNN["classes"], (MODEL_CRNN_BATCH, hi), generator=g)
    input_lengths = torch.full((MODEL_CRNN_BATCH,), MODEL_CRNN_WIDTH // 4, dtype=torch.long)

    def crnn_step():
        crnn.train()
        opt = torch.optim.SGD(crnn.parameters(), lr=0.01)

        def fn():
            opt.zero_grad()
            lp = crnn(lines)
            F.ctc_loss(lp, labels, input_lengths, target_lengths, blank=0, reduction="mean").backward()
            opt.step()

        return resettable(fn, opt, [lines])

    resnet = ResNet()
    pictures = torch.randn(MODEL_RESNET_BATCH, 3, MODEL_RESNET_HW, MODEL_RESNET_HW, generator=g)
    picture_classes = torch.randint(0, 10, (MODEL_RESNET_BATCH,), generator=g)
    gpt = Gpt(**MODEL_GPT)
    seqs = torch.randint(0, MODEL_GPT["vocab"], (MODEL_GPT_BATCH, MODEL_GPT["context"] + 1), generator=g)
    gpt_in, gpt_next = seqs[:, :-1].contiguous(), seqs[:, 1:].contiguous()
    vocab = MODEL_GPT["vocab"]
    char_gpt = Gpt(**MODEL_CHAR_GPT)
    text = torch.randint(
        0, MODEL_CHAR_GPT["vocab"], (MODEL_CHAR_GPT_BATCH, MODEL_CHAR_GPT["context"] + 1), generator=g
    )
    char_in, char_next = text[:, :-1].contiguous(), text[:, 1:].contiguous()
    char_vocab = MODEL_CHAR_GPT["vocab"]

    return [
        ("conv1", conv((MODEL_CONV_BATCH, 3, 32, 32), (16, 3, 3, 3))),
        ("conv2", conv((MODEL_CONV_BATCH, 16, 16, 16), (32, 16, 3, 3))),
        ("attention", attention()),
        ("step/conv_net", step(conv_net, (images,), lambda y: F.cross_entropy(y, classes))),
        (
            "step/encoder",
            step(encoder, (tokens, padded), lambda y: F.cross_entropy(y.reshape(-1, c), targets.reshape(-1))),
        ),
        ("step/crnn", crnn_step()),
        (
            "step/resnet18",
            step(
                resnet, (pictures,), lambda y: F.cross_entropy(y, picture_classes),
                lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=5e-4),
            ),
        ),
        (
            "step/gpt",
            step(
                gpt, (gpt_in,), lambda y: F.cross_entropy(y.reshape(-1, vocab), gpt_next.reshape(-1)),
                lambda p: torch.optim.AdamW(p, lr=3e-4),
            ),
        ),
        (
            "step/char_gpt",
            step(
                char_gpt, (char_in,),
                lambda y: F.cross_entropy(y.reshape(-1, char_vocab), char_next.reshape(-1)),
                lambda p: torch.optim.AdamW(p, lr=MODEL_CHAR_GPT_LR),
            ),
        ),
    ]


def step_peak(fn):
    """(bytes at rest, peak bytes above rest) of one call of a training step `fn`."""
    import json
    import os
    import tempfile

    from torch.profiler import ProfilerActivity, profile

    fn()
    fn()
    fn.reset()
    rest = sum(t.numel() * t.element_size() for t in {id(t): t for t in fn.at_rest()}.values())
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    finally:
        os.remove(path)
    # "Total Allocated" counts the CPU allocations made since profiling started, less
    # those of them freed: its maximum is the step's peak above what was held before.
    totals = [
        e["args"]["Total Allocated"]
        for e in events
        if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0
    ]
    return rest, max(totals, default=0)


def models_main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", default="1,2")
    p.add_argument("--time", type=float, default=1.0)
    p.add_argument("--warmup", type=float, default=0.3)
    p.add_argument("--shapes", default="")
    p.add_argument("--blas", default="torch")
    p.add_argument("--models", default="", help="only the model benches whose name contains this")
    p.add_argument("--no-peaks", action="store_true", help="skip the peak memory of the steps")
    args, _ = p.parse_known_args()
    wanted = set(filter(None, args.shapes.split(",")))
    if (wanted and "models" not in wanted) or args.blas != "torch":
        return
    peaks = []
    classes = import_models()
    for t in [int(x) for x in args.threads.split(",")]:
        torch.set_num_threads(t)
        for name, fn in model_benches(classes):
            if args.models not in name:
                continue
            med, lo, hi, count, cpu = time_calls_ms(fn, args.time, args.warmup)
            label = f"models/{name}/torch/t{t}"
            print(
                f"{label:<44} median {med:9.3f} ms   (min {lo:.3f}, max {hi:.3f}, {count} calls)"
                f"   caller cpu mean {cpu:.3f} ms",
                flush=True,
            )
            if hasattr(fn, "reset") and not args.no_peaks:
                rest, peak = step_peak(fn)
                mib = 1 << 20
                peaks.append(f"{label:<44} peak {peak / mib:9.3f} MiB above rest   (at rest {rest / mib:.3f} MiB)")
    if peaks:
        print("\nPeak memory of one step (PyTorch's CPU allocator statistics, profiler memory events):")
        print("\n".join(peaks), flush=True)


if __name__ == "__main__":
    models_main()
