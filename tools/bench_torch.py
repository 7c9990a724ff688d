#!/usr/bin/env python3
"""Times torch.matmul on the shapes of `benches/gemm.rs` and prints GFLOP/s.

Usage: .venv/bin/python tools/bench_torch.py [--threads 1,2] [--time 1.0] [--shapes NAMES]

Each line has the same form as the summary that `cargo bench --bench gemm` prints:

    gemm/torch/t1/512x512x512            median   123.45 GFLOP/s   (min 120.00, max 125.10, 400 calls)

Every call is timed on its own (as the Rust bench does), after a warm-up; the line gives
the median, the slowest and the fastest call as GFLOP/s = 2*m*n*k / seconds / 1e9. The
median of single calls is robust to the time slices that other processes take on a shared
machine. The output tensor is preallocated (`out=`), as the Rust benches write into a
preallocated buffer.
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


def bench(m, k, n, seconds, warmup):
    g = torch.Generator().manual_seed(0)
    a = torch.rand(m, k, generator=g) - 0.5
    b = torch.rand(k, n, generator=g) - 0.5
    out = torch.empty(m, n)
    flops = 2.0 * m * n * k
    deadline = time.perf_counter() + warmup
    while time.perf_counter() < deadline:
        torch.matmul(a, b, out=out)
    calls = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(calls) < 10:
        t0 = time.perf_counter()
        torch.matmul(a, b, out=out)
        calls.append(flops / (time.perf_counter() - t0) / 1e9)
    return statistics.median(calls), min(calls), max(calls), len(calls)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    p.add_argument("--time", type=float, default=0.6, help="seconds of timed calls per benchmark")
    p.add_argument("--warmup", type=float, default=0.2, help="seconds of warm-up per benchmark")
    p.add_argument("--shapes", default="", help="comma-separated shape names (default: all)")
    args = p.parse_args()
    wanted = set(filter(None, args.shapes.split(",")))
    print(f"# torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()}")
    for t in [int(x) for x in args.threads.split(",")]:
        torch.set_num_threads(t)
        for name, m, k, n in SHAPES:
            if wanted and name not in wanted:
                continue
            med, lo, hi, count = bench(m, k, n, args.time, args.warmup)
            label = f"gemm/torch/t{t}/{m}x{k}x{n}"
            print(
                f"{label:<44} median {med:8.2f} GFLOP/s   "
                f"(min {lo:.2f}, max {hi:.2f}, {count} calls)",
                flush=True,
            )


if __name__ == "__main__":
    main()
