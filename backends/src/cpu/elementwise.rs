//! Element-wise lane loops: every [`UnaryOp`], its backward rule and every [`BinaryOp`],
//! written once over a [`SimdLane`] so that the vector body and the scalar tail (the
//! `f32` instantiation of the same code) give the bits of [`crate::scalar`].

use super::simd::SimdLane;
use crate::lane::{Exact, Lane, Madd};
use crate::scalar::ModeSpec;
use crate::transcendental::generic as tr;
use exactgrad_core::{BinaryOp, ComputeMode, UnaryOp, CANONICAL_NAN};

#[inline(always)]
fn k<L: Lane>(v: f32) -> L {
    L::splat(v)
}

/// `-x` by flipping the sign bit (adding 2^31 modulo 2^32 flips only bit 31).
#[inline(always)]
fn neg<L: Lane>(x: L) -> L {
    L::from_bits(L::bits_add(x.to_bits(), L::bits_splat(0x8000_0000)))
}

/// Rewrites NaN lanes to the canonical NaN in exact mode.
#[inline(always)]
pub(crate) fn finish<L: Lane, M: ModeSpec>(v: L) -> L {
    if M::MODE == ComputeMode::Exact {
        L::select(v.is_nan(), k(CANONICAL_NAN), v)
    } else {
        v
    }
}

/// `x^p` exactly as [`crate::scalar::powf_in`] computes it, per lane.
#[inline(always)]
fn pow<L: SimdLane, M: Madd<L>>(x: L, p: f32) -> L {
    if p == 0.0 {
        return k(1.0);
    }
    if p == 1.0 {
        return x;
    }
    if p == 0.5 {
        return x.sqrt();
    }
    if p == -0.5 {
        return k::<L>(1.0).div(x.sqrt());
    }
    if p == (p as i32) as f32 && p.abs() <= 64.0 {
        let mut n = (p as i32).unsigned_abs();
        let mut base = x;
        let mut acc = k::<L>(1.0);
        let mut first = true;
        while n != 0 {
            if n & 1 == 1 {
                acc = if first { base } else { acc.mul(base) };
                first = false;
            }
            n >>= 1;
            if n != 0 {
                base = base.mul(base);
            }
        }
        return if p < 0.0 { k::<L>(1.0).div(acc) } else { acc };
    }
    if p.is_nan() {
        return k(CANONICAL_NAN);
    }
    let general = tr::exp::<L, M>(k::<L>(p).mul(tr::log::<L, M>(x)));
    let (at_inf, at_zero) = if p > 0.0 {
        (f32::INFINITY, 0.0)
    } else {
        (0.0, f32::INFINITY)
    };
    let r = L::select(x.eq(k(f32::INFINITY)), k(at_inf), general);
    let r = L::select(x.eq(k(0.0)), k(at_zero), r);
    L::select(L::mask_or(x.lt(k(0.0)), x.is_nan()), k(CANONICAL_NAN), r)
}

/// One lane of [`UnaryOp`] (before NaN canonicalisation), mirroring
/// [`crate::scalar::unary_in`].
#[inline(always)]
pub(crate) fn unary<L: SimdLane, M: Madd<L>>(op: UnaryOp, x: L) -> L {
    match op {
        UnaryOp::Neg => neg(x),
        UnaryOp::Abs => L::from_bits(L::bits_and(x.to_bits(), L::bits_splat(0x7fff_ffff))),
        UnaryOp::Relu => L::select(L::mask_or(x.gt(k(0.0)), x.is_nan()), x, k(0.0)),
        UnaryOp::LeakyRelu(s) => L::select(x.gt(k(0.0)), x, x.mul(k(s))),
        UnaryOp::Sigmoid => tr::sigmoid::<L, M>(x),
        UnaryOp::Tanh => tr::tanh::<L, M>(x),
        UnaryOp::Exp => tr::exp::<L, M>(x),
        UnaryOp::Log => tr::log::<L, M>(x),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::GeluErf => tr::gelu_erf::<L, Exact>(x),
        UnaryOp::GeluTanh => tr::gelu_tanh::<L, Exact>(x),
        UnaryOp::Pow(p) => pow::<L, M>(x, p),
        UnaryOp::Clamp(lo, hi) => {
            let t = L::select(x.lt(k(lo)), k(lo), x);
            let r = L::select(t.gt(k(hi)), k(hi), t);
            L::select(x.is_nan(), x, r)
        }
        UnaryOp::AddScalar(c) => x.add(k(c)),
        UnaryOp::MulScalar(c) => x.mul(k(c)),
    }
}

/// One lane of the backward rule of [`UnaryOp`], mirroring
/// [`crate::scalar::unary_backward_in`].
#[inline(always)]
pub(crate) fn unary_backward<L: SimdLane, M: Madd<L>>(op: UnaryOp, x: L, y: L, g: L) -> L {
    let zero = k::<L>(0.0);
    match op {
        UnaryOp::Neg => neg(g),
        UnaryOp::Abs => L::select(x.gt(zero), g, L::select(x.lt(zero), neg(g), zero)),
        UnaryOp::Relu => L::select(y.le(zero), zero, g),
        UnaryOp::LeakyRelu(s) => L::select(x.gt(zero), g, g.mul(k(s))),
        UnaryOp::Sigmoid => g.mul(y.mul(k::<L>(1.0).sub(y))),
        UnaryOp::Tanh => g.mul(k::<L>(1.0).sub(y.mul(y))),
        UnaryOp::Exp => g.mul(y),
        UnaryOp::Log => g.div(x),
        UnaryOp::Sqrt => g.div(k::<L>(2.0).mul(y)),
        UnaryOp::GeluErf => g.mul(tr::gelu_erf_grad::<L, Exact>(x)),
        UnaryOp::GeluTanh => g.mul(tr::gelu_tanh_grad::<L, Exact>(x)),
        UnaryOp::Pow(p) => {
            if p == 0.0 {
                zero
            } else {
                g.mul(k::<L>(p).mul(pow::<L, M>(x, p - 1.0)))
            }
        }
        UnaryOp::Clamp(lo, hi) => {
            // An absent (infinite) bound does not stop the gradient, even at NaN.
            let t = x.eq(x);
            let all = L::mask_or(t, L::mask_not(t));
            let above = if lo == f32::NEG_INFINITY {
                all
            } else {
                x.gt(k(lo))
            };
            let below = if hi == f32::INFINITY {
                all
            } else {
                x.lt(k(hi))
            };
            L::select(L::mask_and(above, below), g, zero)
        }
        UnaryOp::AddScalar(_) => g,
        UnaryOp::MulScalar(c) => g.mul(k(c)),
    }
}

/// One lane of [`BinaryOp`].
#[inline(always)]
pub(crate) fn binary<L: Lane>(op: BinaryOp, a: L, b: L) -> L {
    match op {
        BinaryOp::Add => a.add(b),
        BinaryOp::Sub => a.sub(b),
        BinaryOp::Mul => a.mul(b),
        BinaryOp::Div => a.div(b),
    }
}

/// `out[i] = op(x[i])`: full lanes, then the scalar tail.
#[inline(always)]
pub(crate) fn unary_slice<L: SimdLane, M: ModeSpec + Madd<L>>(
    op: UnaryOp,
    x: &[f32],
    out: &mut [f32],
) {
    let n = x.len().min(out.len());
    let w = L::WIDTH;
    let mut i = 0;
    while i + w <= n {
        // SAFETY: i + w <= n bounds both slices.
        unsafe {
            let v = L::load(x.as_ptr().add(i));
            finish::<L, M>(unary::<L, M>(op, v)).store(out.as_mut_ptr().add(i));
        }
        i += w;
    }
    while i < n {
        out[i] = finish::<f32, M>(unary::<f32, M>(op, x[i]));
        i += 1;
    }
}

/// `out[i] = op'(x[i], y[i], g[i])`: full lanes, then the scalar tail.
#[inline(always)]
pub(crate) fn unary_backward_slice<L: SimdLane, M: ModeSpec + Madd<L>>(
    op: UnaryOp,
    x: &[f32],
    y: &[f32],
    g: &[f32],
    out: &mut [f32],
) {
    let n = out.len();
    assert!(
        x.len() >= n && y.len() >= n && g.len() >= n,
        "unary_backward: lengths"
    );
    let w = L::WIDTH;
    let mut i = 0;
    while i + w <= n {
        // SAFETY: i + w <= n, and every input holds at least n elements.
        unsafe {
            let (xv, yv, gv) = (
                L::load(x.as_ptr().add(i)),
                L::load(y.as_ptr().add(i)),
                L::load(g.as_ptr().add(i)),
            );
            finish::<L, M>(unary_backward::<L, M>(op, xv, yv, gv)).store(out.as_mut_ptr().add(i));
        }
        i += w;
    }
    while i < n {
        out[i] = finish::<f32, M>(unary_backward::<f32, M>(op, x[i], y[i], g[i]));
        i += 1;
    }
}

/// One row of a broadcast binary operation: `a` and `b` have inner strides `sa`, `sb`
/// in {0, 1} (vectorised) or anything else (scalar loop of the same operations).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) fn binary_row<L: SimdLane, M: ModeSpec>(
    op: BinaryOp,
    a: &[f32],
    ia: usize,
    sa: usize,
    b: &[f32],
    ib: usize,
    sb: usize,
    out: &mut [f32],
) {
    let n = out.len();
    if n == 0 {
        return;
    }
    assert!(
        ia + (n - 1) * sa < a.len() && ib + (n - 1) * sb < b.len(),
        "binary: operand bounds"
    );
    let w = L::WIDTH;
    let mut i = 0;
    if sa <= 1 && sb <= 1 {
        let av = if sa == 0 { Some(L::splat(a[ia])) } else { None };
        let bv = if sb == 0 { Some(L::splat(b[ib])) } else { None };
        while i + w <= n {
            // SAFETY: the assertion above bounds every index ia + j·sa and ib + j·sb for
            // j < n, and i + w <= n.
            unsafe {
                let x = av.unwrap_or_else(|| L::load(a.as_ptr().add(ia + i)));
                let y = bv.unwrap_or_else(|| L::load(b.as_ptr().add(ib + i)));
                finish::<L, M>(binary(op, x, y)).store(out.as_mut_ptr().add(i));
            }
            i += w;
        }
    }
    while i < n {
        out[i] = finish::<f32, M>(binary(op, a[ia + i * sa], b[ib + i * sb]));
        i += 1;
    }
}
