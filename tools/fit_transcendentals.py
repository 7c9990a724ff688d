#!/usr/bin/env python3
"""Derive the polynomial and rational coefficients of backends/src/transcendental.rs.

Every fit is a weighted minimax approximation computed by Lawson's iteratively
reweighted least squares on a dense grid, with the target function evaluated by
mpmath at 50 digits. Coefficients are then rounded to f32 one at a time, from the
most significant (lowest order) to the least, refitting the remaining ones after
each rounding so that the higher-order terms absorb the rounding of the lower ones.
The rational fit of R (the normal-tail denominator D(u) = (u + H0) + u*R(u)) uses the
linearised (Loeb / Sanathanan-Koerner) iteration.

Usage:  python3 tools/fit_transcendentals.py      (needs numpy and mpmath)

Prints each coefficient set as Rust `f32` literals (shortest round-trip decimal and the
hex bit pattern) together with the weighted error of the f32-rounded fit evaluated in f64.
"""

import mpmath as mp
import numpy as np

mp.mp.dps = 50


def f32(v):
    return float(np.float32(v))


def cheb_grid(a, b, n):
    k = np.arange(n)
    x = np.cos(np.pi * (k + 0.5) / n)
    pts = 0.5 * (a + b) + 0.5 * (b - a) * x
    return np.sort(np.concatenate([pts, [a, b]]))


def lawson(A, y, iters=400):
    """Approximately minimise max |A c - y| by Lawson's algorithm."""
    m = A.shape[0]
    w = np.full(m, 1.0 / m)
    c = None
    for _ in range(iters):
        sw = np.sqrt(w)
        c, *_ = np.linalg.lstsq(A * sw[:, None], y * sw, rcond=None)
        e = np.abs(A @ c - y)
        w = w * e
        s = w.sum()
        if s == 0:
            break
        w /= s
        w = np.maximum(w, 1e-300)
    return c


def fit_poly(target, weight, xs, powers, fixed=None, iters=400):
    """Minimax fit of target(x) ~ sum c_j x^powers[j], error weighted by weight(x).

    Coefficients in `fixed` (index -> value) are not fitted. Returns the f32-rounded
    coefficients (rounded in order of increasing power, refitting after each)."""
    fixed = dict(fixed or {})
    t = np.array([target(x) for x in xs])
    w = np.array([weight(x) for x in xs])
    X = np.array(xs)
    for _ in range(len(powers)):
        free = [j for j in range(len(powers)) if j not in fixed]
        if not free:
            break
        y = t.copy()
        for j, v in fixed.items():
            y -= v * X ** powers[j]
        A = np.stack([X ** powers[j] for j in free], axis=1) * w[:, None]
        c = lawson(A, y * w, iters)
        j0 = free[0]
        fixed[j0] = f32(c[0])
    coeffs = [fixed[j] for j in range(len(powers))]
    approx = sum(c * X ** p for c, p in zip(coeffs, powers))
    err = np.max(np.abs((approx - t) * w))
    return coeffs, err


def fit_rational(target, weight, xs, n, m, q0=1.0, p0=None, iters=30):
    """Weighted minimax fit of target ~ P_n(x) / Q_m(x) with Q(0) = q0 (and P(0) = p0 when
    given): minimises
    max |P/Q - target| * weight by the linearised iteration |P - target*Q| * weight / |Q_prev|.

    The coefficients are rounded to f32 one at a time (p0, q1, p1, q2, ...), the free ones
    being refitted after each rounding. Returns (p, q) and the max weighted error of the
    rounded fit evaluated in f64."""
    X = np.array(xs)
    t = np.array([target(x) for x in xs])
    w = np.array([weight(x) for x in xs])
    cols = [X ** i for i in range(n + 1)] + [-t * X ** j for j in range(1, m + 1)]
    C = np.stack(cols, axis=1)
    nv = n + 1 + m

    def solve(fixed, qprev):
        c = np.zeros(nv)
        for _ in range(iters):
            free = [j for j in range(nv) if j not in fixed]
            y = t * q0
            for j, v in fixed.items():
                y = y - v * C[:, j]
            sc = w / np.abs(qprev)
            if free:
                cf = lawson(C[:, free] * sc[:, None], y * sc, 200)
                for j, v in zip(free, cf):
                    c[j] = v
            for j, v in fixed.items():
                c[j] = v
            q = np.concatenate([[q0], c[n + 1:]])
            qprev = np.polyval(q[::-1], X)
            if not free:
                break
        return c, qprev

    fixed = {} if p0 is None else {0: p0}
    c, qprev = solve(fixed, np.full_like(X, q0))
    order = []
    for i in range(max(n + 1, m + 1)):
        if i <= n:
            order.append(i)
        if 1 <= i + 1 <= m:
            order.append(n + 1 + i)
    for j in order:
        if j in fixed:
            continue
        fixed[j] = f32(c[j])
        c, qprev = solve(fixed, qprev)
    p = np.array([fixed[i] for i in range(n + 1)])
    q = np.array([q0] + [fixed[n + 1 + j] for j in range(m)])
    P = np.polyval(p[::-1], X)
    Q = np.polyval(q[::-1], X)
    err = np.max(np.abs(P / Q - t) * w)
    return list(p), list(q), err


def show(name, coeffs, err, note=""):
    print(f"// {name}: max weighted error {err:.3e} ({np.log2(err):.1f} bits) {note}")
    for c in coeffs:
        bits = np.array([c], dtype=np.float32).view(np.uint32)[0]
        print(f"    {np.float32(c)!s}, // 0x{bits:08X}")


# ---------------------------------------------------------------- exp
# exp(r) = 1 + r + r^2 * P(r),  |r| <= ln2/2 (+ a margin for the rounding of k).
def exp_target(r):
    r = mp.mpf(r)
    if r == 0:
        return 0.5
    return float((mp.exp(r) - 1 - r) / (r * r))


def exp_weight(r):
    return r * r / np.exp(r)


# ---------------------------------------------------------------- log
# log(1+f) = f - f^2/2 + s*(f^2/2 + R(z)),  s = f/(2+f), z = s^2, R(z) = z*(c1 + c2 z + ...)
# R(z) = 2 atanh(s)/s - 2  for s = sqrt(z)
def log_target(z):
    z = mp.mpf(z)
    if z == 0:
        return 0.0
    s = mp.sqrt(z)
    return float(2 * mp.atanh(s) / s - 2)


# ---------------------------------------------------------------- tanh
# tanh(x) = x + x * (z * P(z)),  z = x^2; fitted in z
def tanh_target(z):
    z = mp.mpf(z)
    if z == 0:
        return -1.0 / 3
    x = mp.sqrt(z)
    return float((mp.tanh(x) / x - 1) / z)


def tanh_weight(z):
    x = np.sqrt(z)
    return z * x / float(mp.tanh(x)) if z > 0 else 0.0


# ---------------------------------------------------------------- erf
# erf(x) = x + x * Q(z),  z = x^2
def erf_target(z):
    z = mp.mpf(z)
    if z == 0:
        return float(2 / mp.sqrt(mp.pi) - 1)
    x = mp.sqrt(z)
    return float(mp.erf(x) / x - 1)


def erf_weight(z):
    if z == 0:
        return 1.0
    x = mp.sqrt(mp.mpf(z))
    return float(x / mp.erf(x))


# ---------------------------------------------------------------- Mills ratio
# Phi(-u) = phi(u) / D(u),  u >= 0,  D(u) = u + H(u) = H0 + u * (1 + R(u)),
# H0 = D(0) = 2/sqrt(2 pi) (stored as hi + lo),  R = RP/RQ rational.
# The error of R enters D as u*dR, so R is fitted with the weight u / D(u).
PHI0 = 1 / mp.sqrt(2 * mp.pi)
H0 = 2 * PHI0


def D_exact(u):
    u = mp.mpf(u)
    return mp.npdf(u) / (mp.erfc(u / mp.sqrt(2)) / 2)


def R_target(u):
    u = mp.mpf(u)
    if u == 0:
        return float(2 / mp.pi - 1)
    return float((D_exact(u) - H0) / u - 1)


def R_weight(u):
    return float(u / D_exact(u))


def main():
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--exp-deg", type=int, default=5)
    ap.add_argument("--log-deg", type=int, default=4)
    ap.add_argument("--tanh-deg", type=int, default=5)
    ap.add_argument("--tanh-max", type=float, default=0.625)
    ap.add_argument("--erf-deg", type=int, default=6)
    ap.add_argument("--erf-max", type=float, default=1.0)
    ap.add_argument("--g-num", type=int, default=4)
    ap.add_argument("--g-den", type=int, default=5)
    ap.add_argument("--g-max", type=float, default=15.1)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = set(a.only.split(",")) if a.only else None

    if not only or "exp" in only:
        h = 0.3466 + 2e-5
        xs = cheb_grid(-h, h, 3000)
        powers = list(range(a.exp_deg + 1))
        c, e = fit_poly(exp_target, exp_weight, xs, powers, fixed={0: 0.5})
        show("EXP_P (c0 + c1 r + ...)", c, e, "relative to exp(r)")
    if not only or "log" in only:
        smax = (np.sqrt(2) - 1) / (np.sqrt(2) + 1) + 1e-6
        xs = cheb_grid(0, smax * smax, 3000)
        powers = list(range(1, a.log_deg + 1))
        c, e = fit_poly(log_target, lambda z: 1.0, xs, powers)
        show("LOG_R (z, z^2, ...)", c, e, "absolute in R")
    if not only or "tanh" in only:
        xs = cheb_grid(0, a.tanh_max ** 2, 3000)
        powers = list(range(a.tanh_deg + 1))
        c, e = fit_poly(tanh_target, tanh_weight, xs, powers)
        show(f"TANH_P on [0,{a.tanh_max}]", c, e, "relative to tanh(x)")
    if not only or "erf" in only:
        xs = cheb_grid(0, a.erf_max ** 2, 3000)
        powers = list(range(a.erf_deg + 1))
        c, e = fit_poly(erf_target, erf_weight, xs, powers)
        show(f"ERF_Q on [0,{a.erf_max}]", c, e, "relative to erf(x)")
    if not only or "mills" in only:
        xs = cheb_grid(0, a.g_max, 4000)
        h0 = f32(H0)
        show("MILLS_H0 hi, lo", [h0, f32(H0 - h0)], 2.0 ** -48)
        p, q, e = fit_rational(R_target, R_weight, xs, a.g_num, a.g_den)
        show(f"MILLS_P on [0,{a.g_max}]", p, e, "relative error contributed to D")
        show("MILLS_Q", q, e)


if __name__ == "__main__":
    main()
