//! Lanes: the element type that the exact polynomial kernels are written against.
//!
//! The transcendental functions of [`crate::transcendental`] and the element-wise
//! formulas of [`crate::elementwise`] are written once, generic over a [`Lane`], and use
//! only the operations of this trait: IEEE f32 `+ − × ÷` and square root, ordered
//! comparisons giving a mask, a lane-wise select, bit casts to and from a lane of `u32`,
//! and wrapping integer arithmetic and shifts on those bits. Every operation is lane-wise
//! and has exactly one IEEE result, so a vector implementation (one lane per element)
//! executes the same operation sequence per lane as the scalar `f32` implementation and
//! gives equal bits by construction. The generic code never branches on data: special
//! cases are computed and then chosen by [`Lane::select`].
//!
//! The multiply-add of the polynomial evaluations is a separate parameter, [`Madd`]:
//! [`Exact`] rounds the product and then the sum (the Exact mode contract), [`Fast`]
//! fuses them (Fast mode, for lanes that implement [`FusedLane`]).
//!
//! Requirements on an implementation: IEEE binary32 round-to-nearest-even arithmetic
//! with subnormals (no flush-to-zero, no denormals-are-zero), comparisons that are
//! false when either operand is NaN, and integer operations that wrap modulo 2^32.

/// One or more f32 lanes with the operations the exact kernels are allowed to use.
pub trait Lane: Copy {
    /// Lane-wise boolean (a comparison result).
    type Mask: Copy;
    /// Lane-wise `u32`: the bit pattern of each f32 lane.
    type Bits: Copy;

    /// Every lane set to `v`.
    fn splat(v: f32) -> Self;
    /// Lane-wise IEEE sum.
    fn add(self, o: Self) -> Self;
    /// Lane-wise IEEE difference.
    fn sub(self, o: Self) -> Self;
    /// Lane-wise IEEE product.
    fn mul(self, o: Self) -> Self;
    /// Lane-wise IEEE quotient.
    fn div(self, o: Self) -> Self;
    /// Lane-wise IEEE square root (correctly rounded).
    fn sqrt(self) -> Self;

    /// Lane-wise `self < o` (false if either is NaN).
    fn lt(self, o: Self) -> Self::Mask;
    /// Lane-wise `self <= o` (false if either is NaN).
    fn le(self, o: Self) -> Self::Mask;
    /// Lane-wise `self == o` (false if either is NaN).
    fn eq(self, o: Self) -> Self::Mask;
    /// Lane-wise `a && b`.
    fn mask_and(a: Self::Mask, b: Self::Mask) -> Self::Mask;
    /// Lane-wise `a || b`.
    fn mask_or(a: Self::Mask, b: Self::Mask) -> Self::Mask;
    /// Lane-wise `!a`.
    fn mask_not(a: Self::Mask) -> Self::Mask;
    /// Lane-wise `if m { a } else { b }`.
    fn select(m: Self::Mask, a: Self, b: Self) -> Self;

    /// Lane-wise bit pattern (`f32::to_bits`).
    fn to_bits(self) -> Self::Bits;
    /// Lane-wise value of a bit pattern (`f32::from_bits`).
    fn from_bits(b: Self::Bits) -> Self;
    /// Every bits lane set to `v`.
    fn bits_splat(v: u32) -> Self::Bits;
    /// Lane-wise wrapping integer sum.
    fn bits_add(a: Self::Bits, b: Self::Bits) -> Self::Bits;
    /// Lane-wise wrapping integer difference.
    fn bits_sub(a: Self::Bits, b: Self::Bits) -> Self::Bits;
    /// Lane-wise bitwise and.
    fn bits_and(a: Self::Bits, b: Self::Bits) -> Self::Bits;
    /// Lane-wise bitwise or.
    fn bits_or(a: Self::Bits, b: Self::Bits) -> Self::Bits;
    /// Lane-wise left shift by the constant `N` (< 32).
    fn bits_shl<const N: u32>(a: Self::Bits) -> Self::Bits;
    /// Lane-wise logical right shift by the constant `N` (< 32).
    fn bits_shr<const N: u32>(a: Self::Bits) -> Self::Bits;
    /// Lane-wise arithmetic right shift (sign-extending, as `i32`) by the constant `N` (< 32).
    fn bits_sar<const N: u32>(a: Self::Bits) -> Self::Bits;

    /// Lane-wise `self > o`; provided as `o < self`.
    #[inline(always)]
    fn gt(self, o: Self) -> Self::Mask {
        o.lt(self)
    }
    /// Lane-wise `self >= o`; provided as `o <= self`.
    #[inline(always)]
    fn ge(self, o: Self) -> Self::Mask {
        o.le(self)
    }
    /// Lane-wise NaN test; provided as `!(self == self)`.
    #[inline(always)]
    fn is_nan(self) -> Self::Mask {
        Self::mask_not(self.eq(self))
    }
}

/// A lane with a fused multiply-add (one rounding), used by [`Fast`].
pub trait FusedLane: Lane {
    /// Lane-wise `self * b + c` rounded once.
    fn fused_mul_add(self, b: Self, c: Self) -> Self;
}

/// The multiply-add of the polynomial evaluations: `a * b + c`.
pub trait Madd<L: Lane> {
    /// `a * b + c` with this strategy's rounding.
    fn madd(a: L, b: L, c: L) -> L;
}

/// Exact mode: the product is rounded, then the sum (`(a * b) + c`, two roundings).
#[derive(Clone, Copy, Debug, Default)]
pub struct Exact;

/// Fast mode: fused multiply-add (`a * b + c`, one rounding).
#[derive(Clone, Copy, Debug, Default)]
pub struct Fast;

impl<L: Lane> Madd<L> for Exact {
    #[inline(always)]
    fn madd(a: L, b: L, c: L) -> L {
        a.mul(b).add(c)
    }
}

impl<L: FusedLane> Madd<L> for Fast {
    #[inline(always)]
    fn madd(a: L, b: L, c: L) -> L {
        a.fused_mul_add(b, c)
    }
}

impl Lane for f32 {
    type Mask = bool;
    type Bits = u32;

    #[inline(always)]
    fn splat(v: f32) -> Self {
        v
    }
    #[inline(always)]
    fn add(self, o: Self) -> Self {
        self + o
    }
    #[inline(always)]
    fn sub(self, o: Self) -> Self {
        self - o
    }
    #[inline(always)]
    fn mul(self, o: Self) -> Self {
        self * o
    }
    #[inline(always)]
    fn div(self, o: Self) -> Self {
        self / o
    }
    #[inline(always)]
    fn sqrt(self) -> Self {
        crate::sqrt::sqrt(self)
    }
    #[inline(always)]
    fn lt(self, o: Self) -> bool {
        self < o
    }
    #[inline(always)]
    fn le(self, o: Self) -> bool {
        self <= o
    }
    #[inline(always)]
    fn eq(self, o: Self) -> bool {
        self == o
    }
    #[inline(always)]
    fn mask_and(a: bool, b: bool) -> bool {
        a & b
    }
    #[inline(always)]
    fn mask_or(a: bool, b: bool) -> bool {
        a | b
    }
    #[inline(always)]
    fn mask_not(a: bool) -> bool {
        !a
    }
    #[inline(always)]
    fn select(m: bool, a: Self, b: Self) -> Self {
        if m {
            a
        } else {
            b
        }
    }
    #[inline(always)]
    fn to_bits(self) -> u32 {
        f32::to_bits(self)
    }
    #[inline(always)]
    fn from_bits(b: u32) -> Self {
        f32::from_bits(b)
    }
    #[inline(always)]
    fn bits_splat(v: u32) -> u32 {
        v
    }
    #[inline(always)]
    fn bits_add(a: u32, b: u32) -> u32 {
        a.wrapping_add(b)
    }
    #[inline(always)]
    fn bits_sub(a: u32, b: u32) -> u32 {
        a.wrapping_sub(b)
    }
    #[inline(always)]
    fn bits_and(a: u32, b: u32) -> u32 {
        a & b
    }
    #[inline(always)]
    fn bits_or(a: u32, b: u32) -> u32 {
        a | b
    }
    #[inline(always)]
    fn bits_shl<const N: u32>(a: u32) -> u32 {
        a << N
    }
    #[inline(always)]
    fn bits_shr<const N: u32>(a: u32) -> u32 {
        a >> N
    }
    #[inline(always)]
    fn bits_sar<const N: u32>(a: u32) -> u32 {
        ((a as i32) >> N) as u32
    }
}

#[cfg(feature = "std")]
impl FusedLane for f32 {
    #[inline(always)]
    fn fused_mul_add(self, b: Self, c: Self) -> Self {
        f32::mul_add(self, b, c)
    }
}

/// Two lanes evaluated in lockstep: every operation is applied to both halves, the first
/// half's instruction first.
///
/// The element-wise loops use it for the long transcendental formulas, whose one-vector
/// dependency chain is longer than the out-of-order window of many cores: interleaving
/// two independent chains keeps the arithmetic units busy. Each half executes exactly the
/// operation sequence of `L`, so the bits are those of `L` (and of `f32`).
#[derive(Clone, Copy, Debug)]
pub struct Pair<L>(pub L, pub L);

macro_rules! pair_ops {
    ($($name:ident),*) => {
        $(
            #[inline(always)]
            fn $name(self, o: Self) -> Self {
                Pair(self.0.$name(o.0), self.1.$name(o.1))
            }
        )*
    };
}

macro_rules! pair_cmps {
    ($($name:ident),*) => {
        $(
            #[inline(always)]
            fn $name(self, o: Self) -> Self::Mask {
                (self.0.$name(o.0), self.1.$name(o.1))
            }
        )*
    };
}

macro_rules! pair_bits {
    ($($name:ident),*) => {
        $(
            #[inline(always)]
            fn $name(a: Self::Bits, b: Self::Bits) -> Self::Bits {
                (L::$name(a.0, b.0), L::$name(a.1, b.1))
            }
        )*
    };
}

macro_rules! pair_shifts {
    ($($name:ident),*) => {
        $(
            #[inline(always)]
            fn $name<const N: u32>(a: Self::Bits) -> Self::Bits {
                (L::$name::<N>(a.0), L::$name::<N>(a.1))
            }
        )*
    };
}

impl<L: Lane> Lane for Pair<L> {
    type Mask = (L::Mask, L::Mask);
    type Bits = (L::Bits, L::Bits);

    #[inline(always)]
    fn splat(v: f32) -> Self {
        Pair(L::splat(v), L::splat(v))
    }
    pair_ops!(add, sub, mul, div);
    #[inline(always)]
    fn sqrt(self) -> Self {
        Pair(self.0.sqrt(), self.1.sqrt())
    }
    pair_cmps!(lt, le, eq);
    #[inline(always)]
    fn mask_and(a: Self::Mask, b: Self::Mask) -> Self::Mask {
        (L::mask_and(a.0, b.0), L::mask_and(a.1, b.1))
    }
    #[inline(always)]
    fn mask_or(a: Self::Mask, b: Self::Mask) -> Self::Mask {
        (L::mask_or(a.0, b.0), L::mask_or(a.1, b.1))
    }
    #[inline(always)]
    fn mask_not(a: Self::Mask) -> Self::Mask {
        (L::mask_not(a.0), L::mask_not(a.1))
    }
    #[inline(always)]
    fn select(m: Self::Mask, a: Self, b: Self) -> Self {
        Pair(L::select(m.0, a.0, b.0), L::select(m.1, a.1, b.1))
    }
    #[inline(always)]
    fn to_bits(self) -> Self::Bits {
        (self.0.to_bits(), self.1.to_bits())
    }
    #[inline(always)]
    fn from_bits(b: Self::Bits) -> Self {
        Pair(L::from_bits(b.0), L::from_bits(b.1))
    }
    #[inline(always)]
    fn bits_splat(v: u32) -> Self::Bits {
        (L::bits_splat(v), L::bits_splat(v))
    }
    pair_bits!(bits_add, bits_sub, bits_and, bits_or);
    pair_shifts!(bits_shl, bits_shr, bits_sar);
}

impl<L: FusedLane> FusedLane for Pair<L> {
    #[inline(always)]
    fn fused_mul_add(self, b: Self, c: Self) -> Self {
        Pair(
            self.0.fused_mul_add(b.0, c.0),
            self.1.fused_mul_add(b.1, c.1),
        )
    }
}
