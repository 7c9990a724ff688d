#!/usr/bin/env python3
"""Times exactgrad beside PyTorch (and numpy's BLAS) on the same work, in one run.

Usage: .venv/bin/python tools/compare_speed.py [--threads 1,2] [--what models,gemm]
                                               [--time 1.0]

Order of the runs: PyTorch (and numpy's matmul), then exactgrad's benches
(`cargo bench --bench models`, `cargo bench --bench gemm`), then PyTorch again, so that a
change of the machine's load during the run shows as a difference between the two
PyTorch columns. The table gives, per piece of work and thread count, the medians of
individually timed calls and the ratio "ours speed / reference speed" (above 1: ours is
faster). The reference of a training step is PyTorch (the faster of its two runs); the
reference of a GEMM is the faster of torch.matmul (MKL) and numpy.matmul (OpenBLAS).
At one thread the table also gives the ratio of CPU-time figures (the calling thread's,
which other processes' time slices do not inflate); prefer them on a shared machine.

Exact-mode GEMM rows at one thread also give the CPU-time rate as a fraction of the
path's register-only multiply-then-add ceiling (`cargo bench --bench peak`).

The benches must be able to build (`cargo bench --no-run` is run first); Python needs
torch 2.15.0 and numpy (README, "PyTorch oracle").
"""

import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# name  median  unit  (... optional "cpu-time median X" or "caller cpu mean X ms")
LINE = re.compile(
    r"^(?P<label>(?:models|gemm)/\S+)\s+median\s+(?P<median>[\d.]+)\s+(?P<unit>ms|GFLOP/s)"
    r"(?:.*?(?:cpu-time median (?P<cpu_gf>[\d.]+)|caller cpu mean (?P<cpu_ms>[\d.]+) ms))?"
)

GEMM_SHAPES = ["512x512x512", "1024x1024x1024"]
STEPS = ["step/conv_net", "step/encoder", "step/crnn"]


def parse(text):
    """label -> (median, cpu or None, unit)."""
    out = {}
    for line in text.splitlines():
        m = LINE.match(line.strip())
        if not m:
            continue
        cpu = m.group("cpu_gf") or m.group("cpu_ms")
        out[m.group("label")] = (float(m.group("median")), float(cpu) if cpu else None, m.group("unit"))
    return out


def run(cmd, env=None):
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    r = subprocess.run(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}")
    return r.stdout


def python_refs(args, threads):
    """PyTorch's models and GEMM, and numpy's GEMM, at every thread count."""
    res = {}
    shapes = []
    if "gemm" in args.what:
        shapes += ["sq512", "sq1024"]
    if "models" in args.what:
        shapes += ["models"]
    bench = os.path.join(HERE, "bench_torch.py")
    res.update(parse(run([sys.executable, bench, "--threads", ",".join(map(str, threads)),
                          "--time", str(args.time), "--shapes", ",".join(shapes)])))
    if "gemm" in args.what:
        for t in threads:
            env = dict(os.environ)
            # numpy's OpenBLAS picks its own kernel and cache sizes in this command.
            env.pop("OPENBLAS_CORETYPE", None)
            env.pop("OPENBLAS_L2_SIZE", None)
            env["OPENBLAS_NUM_THREADS"] = str(t)
            res.update(parse(run([sys.executable, bench, "--blas", "numpy", "--threads", str(t),
                                  "--time", str(args.time), "--shapes", "sq512,sq1024"], env)))
    return res


def ours(args, threads):
    res = {}
    t_alt = "|".join(f"t{t}" for t in threads)
    if "models" in args.what:
        res.update(parse(run(["cargo", "bench", "-q", "--bench", "models", "--",
                              f"models/step/.*/({t_alt})$"])))
    if "gemm" in args.what:
        res.update(parse(run(["cargo", "bench", "-q", "--bench", "gemm", "--",
                              f"/({t_alt})/({'|'.join(GEMM_SHAPES)})$"])))
        res.update(parse_peak(run(["cargo", "bench", "-q", "--bench", "peak"])))
    return res


# peak/avx512   tile 6×4  ( 16 f32 per mul-add)   exact   117.3 GFLOP/s   fast   117.3 GFLOP/s
PEAK = re.compile(r"^peak/(?P<isa>\S+)\s.*?exact\s+(?P<exact>[\d.]+) GFLOP/s\s+fast\s+(?P<fast>[\d.]+|—)")


def parse_peak(text):
    """peak/{mode}/{isa} -> (ceiling GFLOP/s, None, unit): the register-only ceiling of
    each GEMM path (benches/peak.rs)."""
    out = {}
    for line in text.splitlines():
        m = PEAK.match(line.strip())
        if not m:
            continue
        for mode in ["exact", "fast"]:
            if m.group(mode) != "—":
                out[f"peak/{mode}/{m.group('isa')}"] = (float(m.group(mode)), None, "GFLOP/s")
    return out


def widest_path(res, label):
    """The entry `label(isa)` of the widest ISA path that ran, as (label, value)."""
    for isa in ["avx512", "avx2", "neon", "v128", "scalar"]:
        if label(isa) in res:
            return label(isa), res[label(isa)]
    return None, None


def fmt(v, unit):
    return "—" if v is None else (f"{v:.2f} ms" if unit == "ms" else f"{v:.1f} GF/s")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", default="1,2")
    p.add_argument("--what", default="models,gemm")
    p.add_argument("--time", type=float, default=1.0)
    args = p.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    args.what = set(args.what.split(","))

    load = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else ["?"] * 3
    run(["cargo", "bench", "--no-run", "-q", "--bench", "models", "--bench", "gemm", "--bench", "peak"])
    first = python_refs(args, threads)
    mine = ours(args, threads)
    second = python_refs(args, threads)
    load2 = open("/proc/loadavg").read().split()[:3] if os.path.exists("/proc/loadavg") else ["?"] * 3

    rows = []
    for t in threads:
        if "models" in args.what:
            for step in STEPS:
                ref = [r.get(f"models/{step}/torch/t{t}") for r in (first, second)]
                ref = [x for x in ref if x]
                if not ref:
                    continue
                best = min(ref, key=lambda x: x[0])
                best_cpu = min((x[1] for x in ref if x[1] is not None), default=None)
                for mode in ["exact", "fast"]:
                    key, v = widest_path(mine, lambda isa: f"models/{step}/{mode}/{isa}/t{t}")
                    if not v:
                        continue
                    ratio = best[0] / v[0]
                    cpu_ratio = best_cpu / v[1] if (t == 1 and best_cpu and v[1]) else None
                    rows.append((f"{step} t{t}", f"{mode}/{key.split('/')[4]}", fmt(v[0], "ms"),
                                 " / ".join(fmt(x[0], "ms") for x in ref), f"{ratio:.2f}×",
                                 f"{cpu_ratio:.2f}×" if cpu_ratio else "—"))
        if "gemm" in args.what:
            for shape in GEMM_SHAPES:
                refs = []
                for r in (first, second):
                    for lib in ["torch", "numpy"]:
                        x = r.get(f"gemm/{lib}/t{t}/{shape}")
                        if x:
                            refs.append((lib, x))
                if not refs:
                    continue
                lib, best = max(refs, key=lambda x: x[1][0])
                best_cpu = max((x[1][1] for x in refs if x[1][1] is not None), default=None)
                for mode in ["exact", "fast"]:
                    key, v = widest_path(mine, lambda isa: f"gemm/{mode}/{isa}/t{t}/{shape}")
                    if not v:
                        continue
                    ratio = v[0] / best[0]
                    cpu_ratio = v[1] / best_cpu if (t == 1 and best_cpu and v[1]) else None
                    refs_txt = " / ".join(f"{l} {fmt(x[0], 'GF')}" for l, x in refs)
                    isa = key.split('/')[2]
                    # At one thread, exact mode also against its own ceiling (the
                    # register-only mul+add rate of benches/peak.rs), on CPU time.
                    peak = mine.get(f"peak/{mode}/{isa}")
                    if mode == "exact" and t == 1 and peak and v[1]:
                        ratio_txt = f"{ratio:.2f}× of {lib}; {v[1] / peak[0]:.2f} of its ceiling {peak[0]:.0f}"
                    else:
                        ratio_txt = f"{ratio:.2f}× of {lib}"
                    rows.append((f"gemm {shape} t{t}", f"{mode}/{isa}",
                                 fmt(v[0], "GF"), refs_txt, ratio_txt,
                                 f"{cpu_ratio:.2f}×" if cpu_ratio else "—"))

    print(f"\nload average before {' '.join(load)}, after {' '.join(load2)}")
    head = ("work", "ours", "ours median", "reference medians (run 1 / run 2 ...)",
            "speed ratio", "cpu-time ratio")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
