#!/usr/bin/env python3
"""Times exactgrad beside PyTorch (and numpy's BLAS) on the same work, alternating, in rounds.

Usage: .venv/bin/python tools/compare_speed.py [--rounds 3] [--threads 1,2]
                                               [--what models,gemm] [--time 1.0]
                                               [--steps conv_net,encoder,crnn,resnet18,gpt]

Each round times PyTorch (`tools/bench_torch.py`: the training steps and torch.matmul,
then numpy.matmul at each thread count) and exactgrad (`cargo bench --bench models` for
the steps, `cargo bench --bench gemm` for the products), one after the other; the order
alternates between rounds (PyTorch first in rounds 1, 3, …, exactgrad first in rounds 2,
4, …), so that a drift of the machine's load during the run weighs on both sides alike.
Every run reports, per piece of work, the median of individually timed calls; the
tables give for each row the best and the median of the rounds' medians, and the ratio
of each:

- training steps (ms per step): the ratio is PyTorch's time over ours (above 1: ours is
  faster), best against best and median against median;
- GEMM (GFLOP/s): the ratio is ours over the faster of torch.matmul (MKL) and
  numpy.matmul (OpenBLAS), best against best and median against median; at one thread
  the exact rows also give the median CPU-time rate as a fraction of the path's
  register-only multiply-then-add ceiling (`cargo bench --bench peak`, run once).

A third table gives each step's arithmetic: the multiply-adds its products and
convolutions perform, as the backend counts them (`ComputeContext::multiply_adds`), and the
rate each side reaches on it as a fraction of the path's ceiling (exact: multiply-then-add;
fast and PyTorch: the FMA peak).

Beside each step's times the table prints the gradient hash of the step's first pass
(`docs/arithmetic.md` §2), which the bench prints: in exact mode the same at every thread
count (for ResNet-18 and the GPT the pinned values of the `reproduce` example), in fast
mode the value of FastBackend on every path (`docs/arithmetic.md` §6). A hash that
differs between rounds or thread counts is flagged. At one thread a third table gives
the median over the rounds of the calling thread's CPU time per step, which other
processes' time slices do not inflate (prefer it on a busy machine). The header gives the
CPU model and the load (`uptime`) before and after.

The benches must be able to build (`cargo bench --no-run` is run first); Python needs
torch 2.15.0 and numpy (README, "PyTorch oracle").
"""

import argparse
import os
import platform
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name  median  unit  (... optional "cpu-time median X" or "caller cpu mean X ms")
LINE = re.compile(
    r"^(?P<label>(?:models|gemm)/\S+)\s+median\s+(?P<median>[\d.]+)\s+(?P<unit>ms|GFLOP/s)"
    r"(?:.*?(?:cpu-time median (?P<cpu_gf>[\d.]+)|caller cpu mean (?P<cpu_ms>[\d.]+) ms))?"
)
HASH = re.compile(r"^(?P<label>models/\S+)\s+hash\s+(?P<hash>0x[0-9a-f]+)")
# models/step/resnet18/exact/avx512/t1   arithmetic 27890000000 multiply-adds per step (…)
ARITH = re.compile(r"^(?P<label>models/\S+)\s+arithmetic\s+(?P<madds>\d+) multiply-adds")

GEMM_SHAPES = [("512x512x512", "512³"), ("1024x1024x1024", "1024³")]
STEPS = ["conv_net", "encoder", "crnn", "resnet18", "gpt"]
STEP_NAMES = {"conv_net": "conv net", "encoder": "encoder", "crnn": "CRNN", "resnet18": "ResNet-18", "gpt": "GPT"}


def parse(text):
    """(label -> (median, cpu or None), label -> hash, label -> multiply-adds per step)."""
    values, hashes, madds = {}, {}, {}
    for line in text.splitlines():
        line = line.strip()
        m = LINE.match(line)
        if m:
            cpu = m.group("cpu_gf") or m.group("cpu_ms")
            values[m.group("label")] = (float(m.group("median")), float(cpu) if cpu else None)
            continue
        m = HASH.match(line)
        if m:
            hashes[m.group("label")] = m.group("hash")
            continue
        m = ARITH.match(line)
        if m:
            madds[m.group("label")] = int(m.group("madds"))
    return values, hashes, madds


def run(cmd, env=None):
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}")
    return r.stdout


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.lower().startswith(("model name", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def uptime():
    try:
        return subprocess.run(["uptime"], stdout=subprocess.PIPE, text=True).stdout.strip()
    except OSError:
        return "load average " + " ".join(open("/proc/loadavg").read().split()[:3])


def widest_isa():
    """The path `Isa::best` picks on this CPU (for the GEMM filter), from the CPU flags."""
    if platform.machine() in ("aarch64", "arm64"):
        return "neon"
    try:
        flags = next(l for l in open("/proc/cpuinfo") if l.startswith("flags")).split()
    except (OSError, StopIteration):
        return None
    if "avx512f" in flags:
        return "avx512"
    if "avx2" in flags and "fma" in flags:
        return "avx2"
    return None


# peak/avx512   tile 6×4  ( 16 f32 per mul-add)   exact   117.3 GFLOP/s   fast   117.3 GFLOP/s
PEAK = re.compile(r"^peak/(?P<isa>\S+)\s.*?exact\s+(?P<exact>[\d.]+) GFLOP/s\s+fast\s+(?P<fast>[\d.]+|—)")


def parse_peak(text):
    """peak/{mode}/{isa} -> ceiling GFLOP/s: the register-only ceiling of each GEMM path
    (benches/peak.rs)."""
    out = {}
    for line in text.splitlines():
        m = PEAK.match(line.strip())
        if not m:
            continue
        for mode in ["exact", "fast"]:
            if m.group(mode) != "—":
                out[f"peak/{mode}/{m.group('isa')}"] = float(m.group(mode))
    return out


def python_refs(args, threads):
    """PyTorch's steps and GEMM, and numpy's GEMM, at every thread count."""
    res = {}
    shapes = []
    if "gemm" in args.what:
        shapes += ["sq512", "sq1024"]
    if "models" in args.what:
        shapes += ["models"]
    bench = os.path.join(HERE, "bench_torch.py")
    out = run([sys.executable, bench, "--threads", ",".join(map(str, threads)), "--time", str(args.time),
               "--shapes", ",".join(shapes), "--models", "step/", "--no-peaks"])
    res.update(parse(out)[0])
    if "gemm" in args.what:
        for t in threads:
            env = dict(os.environ)
            # numpy's OpenBLAS picks its own kernel and cache sizes in this command.
            env.pop("OPENBLAS_CORETYPE", None)
            env.pop("OPENBLAS_L2_SIZE", None)
            env["OPENBLAS_NUM_THREADS"] = str(t)
            out = run([sys.executable, bench, "--blas", "numpy", "--threads", str(t),
                       "--time", str(args.time), "--shapes", "sq512,sq1024"], env)
            res.update(parse(out)[0])
    return res


def ours(args, threads):
    res, hashes, madds = {}, {}, {}
    t_alt = "|".join(f"t{t}" for t in threads)
    if "models" in args.what:
        steps = "|".join(args.steps)
        v, h, n = parse(run(["cargo", "bench", "-q", "--bench", "models", "--",
                             f"models/step/({steps})/.*/({t_alt})$"]))
        res.update(v)
        hashes.update(h)
        madds.update(n)
    if "gemm" in args.what:
        isa = widest_isa() or "[a-z0-9]+"
        shapes = "|".join(s for s, _ in GEMM_SHAPES)
        res.update(parse(run(["cargo", "bench", "-q", "--bench", "gemm", "--",
                              f"(exact|fast)/{isa}/({t_alt})/({shapes})$"]))[0])
    return res, hashes, madds


def path_of(rounds, prefix, suffix):
    """The ISA path of the first label `prefix<isa>suffix` that any round has, widest first."""
    for isa in ["avx512", "avx2", "neon", "v128", "scalar"]:
        if any(f"{prefix}{isa}{suffix}" in r for r in rounds):
            return isa
    return None


def collect(rounds, label):
    """The rounds' (median, cpu) values of `label`."""
    return [r[label] for r in rounds if label in r]


def best_median(values, higher_is_better):
    """(best, median) of the rounds' medians, or None."""
    meds = [v[0] for v in values]
    if not meds:
        return None
    return (max(meds) if higher_is_better else min(meds)), statistics.median(meds)


def cpu_median(values):
    cpus = [v[1] for v in values if v[1] is not None]
    return statistics.median(cpus) if cpus else None


def fmt_pair(p, unit):
    if p is None:
        return "—"
    if unit == "ms":
        f = (lambda x: f"{x:.1f}") if p[1] >= 100 else (lambda x: f"{x:.2f}")
        return f"{f(p[0])} / {f(p[1])}"
    return f"{p[0]:.1f} / {p[1]:.1f}"


def fmt_ratio(a, b):
    return "—" if a is None or b is None else f"{a[0] / b[0]:.2f}× / {a[1] / b[1]:.2f}×"


def hash_cell(hashes, labels):
    """The hash of a step in one mode at one thread count over the rounds, and whether it
    equals the other thread counts' (`labels` lists this row's label first)."""
    seen = {hashes[r][l] for r in range(len(hashes)) for l in labels[:1] if l in hashes[r]}
    other = {hashes[r][l] for r in range(len(hashes)) for l in labels[1:] if l in hashes[r]}
    if not seen:
        return "—"
    if len(seen) > 1:
        return "DIFFERS between rounds: " + ", ".join(sorted(seen))
    (h,) = seen
    return f"`{h}`" + ("" if not other or other == seen else " (≠ other thread count)")


def print_arithmetic(args, threads, isa, torch_rounds, our_rounds, our_madds, peaks):
    """The arithmetic of each step (the multiply-adds its products perform, as the backend
    counted them) and the rate each side reaches, as a fraction of the path's ceiling:
    exact mode against the register-only multiply-then-add ceiling, fast mode and PyTorch
    against the FMA peak (`benches/peak.rs`, per thread, times the thread count)."""
    print("\nArithmetic of each step: GFLOP = 2 × the multiply-adds of its products and convolutions, "
          "counted by the backend; each rate is that over the step's time (GFLOP/s: at one thread the "
          "median CPU time of the calling thread, which other processes do not inflate; at more the "
          "median wall time), then its fraction of the ceiling (exact: multiply-then-add ceiling; fast "
          "and PyTorch: FMA peak; one thread's ceiling × threads):\n")
    head = ["step", "threads", "GFLOP", "PyTorch", "of FMA peak", "exact", "of exact ceiling", "fast",
            "of FMA peak"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    fma = peaks.get(f"peak/fast/{isa['fast']}")
    ceiling = {"exact": peaks.get(f"peak/exact/{isa['exact']}"), "fast": fma}
    for step in args.steps:
        for t in threads:
            madds = {r.get(f"models/step/{step}/{m}/{isa[m]}/t{t}")
                     for r in our_madds for m in ["exact", "fast"]} - {None}
            if not madds:
                continue
            if len(madds) > 1:
                print(f"| {STEP_NAMES.get(step, step)} | {t} | DIFFERS: {sorted(madds)} |")
                continue
            (n,) = madds
            gflop = 2 * n / 1e9

            def cell(values, peak):
                """The rate over the rounds' median time (CPU time at one thread)."""
                med = best_median(values, False)
                ms = cpu_median(values) if t == 1 else None
                ms = ms if ms is not None else (med and med[1])
                if ms is None:
                    return ["—", "—"]
                rate = gflop / (ms / 1e3)
                return [f"{rate:.1f}", f"{rate / (peak * t):.2f}" if peak else "—"]

            ref = collect(torch_rounds, f"models/step/{step}/torch/t{t}")
            cells = [STEP_NAMES.get(step, step), str(t), f"{gflop:.2f}"] + cell(ref, fma)
            for mode in ["exact", "fast"]:
                cells += cell(collect(our_rounds, f"models/step/{step}/{mode}/{isa[mode]}/t{t}"), ceiling[mode])
            print("| " + " | ".join(cells) + " |")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--what", default="models,gemm")
    p.add_argument("--time", type=float, default=1.0, help="seconds of timed calls per PyTorch benchmark")
    p.add_argument("--steps", default=",".join(STEPS), help="training steps to time")
    args = p.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    args.what = set(args.what.split(","))
    args.steps = [s for s in args.steps.split(",") if s]
    if args.rounds < 1:
        sys.exit("--rounds must be at least 1")

    up_before = uptime()
    run(["cargo", "bench", "--no-run", "-q", "--bench", "models", "--bench", "gemm", "--bench", "peak"])
    peaks = parse_peak(run(["cargo", "bench", "-q", "--bench", "peak"]))
    torch_rounds, our_rounds, our_hashes, our_madds = [], [], [], []
    for r in range(args.rounds):
        print(f"round {r + 1} of {args.rounds}: {uptime()}", file=sys.stderr, flush=True)
        order = ["torch", "ours"] if r % 2 == 0 else ["ours", "torch"]
        for who in order:
            if who == "torch":
                torch_rounds.append(python_refs(args, threads))
            else:
                v, h, n = ours(args, threads)
                our_rounds.append(v)
                our_hashes.append(h)
                our_madds.append(n)
    up_after = uptime()

    print(f"\nCPU: {cpu_model()} ({os.cpu_count()} logical CPUs)")
    print(f"before: {up_before}")
    print(f"after:  {up_after}")
    print(f"{args.rounds} rounds, alternating; each cell is best / median of the rounds' medians.\n")

    if "models" in args.what:
        isa = {m: path_of(our_rounds, f"models/step/{args.steps[0]}/{m}/", f"/t{threads[0]}")
               for m in ["exact", "fast"]}
        print(f"Training steps, ms per step (exact: {isa['exact']} path, fast: {isa['fast']} path; "
              "speed = PyTorch's time / ours, above 1 ours is faster):\n")
        head = ["step", "threads", "PyTorch", "exact", "exact speed", "exact hash", "fast", "fast speed", "fast hash"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        cpu_rows = []
        for step in args.steps:
            for t in threads:
                torch_v = collect(torch_rounds, f"models/step/{step}/torch/t{t}")
                ref = best_median(torch_v, False)
                cells = [STEP_NAMES.get(step, step), str(t), fmt_pair(ref, "ms")]
                cpu = {"torch": cpu_median(torch_v)}
                for mode in ["exact", "fast"]:
                    label = f"models/step/{step}/{mode}/{isa[mode]}/t{t}"
                    v = collect(our_rounds, label)
                    mine = best_median(v, False)
                    cpu[mode] = cpu_median(v)
                    others = [f"models/step/{step}/{mode}/{isa[mode]}/t{u}" for u in threads if u != t]
                    cells += [fmt_pair(mine, "ms"), fmt_ratio(ref, mine), hash_cell(our_hashes, [label] + others)]
                print("| " + " | ".join(cells) + " |")
                if t == 1:
                    cpu_rows.append((step, cpu))
        if cpu_rows:
            print("\nOne thread, CPU time of the calling thread per step (median over the rounds, ms; "
                  "speed = PyTorch's / ours):\n")
            head = ["step", "PyTorch", "exact", "exact speed", "fast", "fast speed"]
            print("| " + " | ".join(head) + " |")
            print("|" + "---|" * len(head))
            for step, cpu in cpu_rows:
                def c(x):
                    return "—" if x is None else f"{x:.2f}"

                def s(x):
                    return "—" if x is None or cpu["torch"] is None else f"{cpu['torch'] / x:.2f}×"

                print(f"| {STEP_NAMES.get(step, step)} | {c(cpu['torch'])} | {c(cpu['exact'])} | {s(cpu['exact'])}"
                      f" | {c(cpu['fast'])} | {s(cpu['fast'])} |")

        print_arithmetic(args, threads, isa, torch_rounds, our_rounds, our_madds, peaks)

    if "gemm" in args.what:
        gisa = {m: path_of(our_rounds, f"gemm/{m}/", f"/t{threads[0]}/{GEMM_SHAPES[0][0]}") for m in ["exact", "fast"]}
        print(f"\nGEMM, GFLOP/s (exact: {gisa['exact']} path, fast: {gisa['fast']} path; "
              "ratio = ours / the faster BLAS):\n")
        head = ["product", "threads", "torch (MKL)", "numpy (OpenBLAS)", "exact", "exact ratio", "exact of ceiling",
                "fast", "fast ratio"]
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
        for shape, name in GEMM_SHAPES:
            for t in threads:
                tv = best_median(collect(torch_rounds, f"gemm/torch/t{t}/{shape}"), True)
                nv = best_median(collect(torch_rounds, f"gemm/numpy/t{t}/{shape}"), True)
                refs = [x for x in (tv, nv) if x]
                ref = (max(x[0] for x in refs), max(x[1] for x in refs)) if refs else None
                cells = [name, str(t), fmt_pair(tv, "GF"), fmt_pair(nv, "GF")]
                for mode in ["exact", "fast"]:
                    v = collect(our_rounds, f"gemm/{mode}/{gisa[mode]}/t{t}/{shape}")
                    mine = best_median(v, True)
                    cells += [fmt_pair(mine, "GF"), fmt_ratio(mine, ref)]
                    if mode == "exact":
                        # At one thread, against its own ceiling, on CPU time.
                        peak, cpu = peaks.get(f"peak/exact/{gisa[mode]}"), cpu_median(v)
                        ok = t == 1 and peak and cpu
                        cells.append(f"{cpu / peak:.2f} of {peak:.0f}" if ok else "—")
                print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
