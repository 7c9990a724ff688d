//! Unit tests of the exact transcendental functions: NaN and special values, spot values,
//! tails, symmetry, monotonicity, the fast variants and the documented coefficient bits.

use super::*;

const NAN: u32 = CANONICAL_NAN_BITS;
type F = fn(f32) -> f32;
const ALL: [(&str, F); 9] = [
    ("exp", exp),
    ("log", log),
    ("tanh", tanh),
    ("sigmoid", sigmoid),
    ("erf", erf),
    ("gelu_erf", gelu_erf),
    ("gelu_tanh", gelu_tanh),
    ("gelu_erf_grad", gelu_erf_grad),
    ("gelu_tanh_grad", gelu_tanh_grad),
];

/// Distance in representable f32 values (same sign assumed).
fn ulps(a: f32, b: f32) -> u32 {
    a.to_bits().abs_diff(b.to_bits())
}

fn same(name: &str, got: f32, want: f32) {
    assert!(
        got.to_bits() == want.to_bits(),
        "{name}: got {got:e} ({:#x}), want {want:e}",
        got.to_bits()
    );
}

#[test]
fn nan_in_gives_canonical_nan() {
    let nans = [
        0x7FC0_0000u32,
        0xFFC0_0000,
        0x7F80_0001,
        0xFF80_0001,
        0x7FFF_FFFF,
        0xFFFF_FFFF,
        0x7FA0_1234,
    ];
    for (name, f) in ALL {
        for &b in &nans {
            assert_eq!(f(f32::from_bits(b)).to_bits(), NAN, "{name}({b:#x})");
        }
    }
}

#[test]
fn special_values() {
    let (inf, ninf) = (f32::INFINITY, f32::NEG_INFINITY);
    same("exp(-inf)", exp(ninf), 0.0);
    same("exp(inf)", exp(inf), inf);
    same("exp(0)", exp(0.0), 1.0);
    same("exp(-0)", exp(-0.0), 1.0);
    same("exp(89)", exp(89.0), inf);
    same("exp(-104)", exp(-104.0), 0.0);
    same("log(0)", log(0.0), ninf);
    same("log(-0)", log(-0.0), ninf);
    same("log(inf)", log(inf), inf);
    same("log(1)", log(1.0), 0.0);
    assert_eq!(log(-1.0).to_bits(), NAN);
    assert_eq!(log(-f32::MIN_POSITIVE).to_bits(), NAN);
    assert_eq!(log(ninf).to_bits(), NAN);
    same("tanh(inf)", tanh(inf), 1.0);
    same("tanh(-inf)", tanh(ninf), -1.0);
    same("tanh(0)", tanh(0.0), 0.0);
    same("tanh(-0)", tanh(-0.0), -0.0);
    same("sigmoid(-inf)", sigmoid(ninf), 0.0);
    same("sigmoid(inf)", sigmoid(inf), 1.0);
    same("sigmoid(0)", sigmoid(0.0), 0.5);
    same("sigmoid(-0)", sigmoid(-0.0), 0.5);
    same("erf(inf)", erf(inf), 1.0);
    same("erf(-inf)", erf(ninf), -1.0);
    same("erf(0)", erf(0.0), 0.0);
    same("erf(-0)", erf(-0.0), -0.0);
    for (name, g) in [("gelu_erf", gelu_erf as F), ("gelu_tanh", gelu_tanh)] {
        same(name, g(inf), inf);
        same(name, g(ninf), -0.0);
        same(name, g(0.0), 0.0);
        same(name, g(-0.0), -0.0);
        same(name, g(-1000.0), -0.0);
        same(name, g(1000.0), 1000.0);
    }
    for (name, g) in [
        ("gelu_erf_grad", gelu_erf_grad as F),
        ("gelu_tanh_grad", gelu_tanh_grad),
    ] {
        same(name, g(inf), 1.0);
        same(name, g(ninf), -0.0);
        same(name, g(0.0), 0.5);
        same(name, g(-0.0), 0.5);
        same(name, g(1000.0), 1.0);
    }
}

#[test]
fn spot_values() {
    // expected values are the correctly rounded f32 results
    let cases: [(&str, F, f32, f32, u32); 17] = [
        ("exp(1)", exp, 1.0, 2.718_281_7, 1),
        ("exp(-100)", exp, -100.0, f32::from_bits(0x1b), 1),
        ("log(2)", log, 2.0, core::f32::consts::LN_2, 1),
        ("log(min subnormal)", log, f32::from_bits(1), -103.278_93, 1),
        ("tanh(0.5)", tanh, 0.5, 0.462_117_17, 2),
        ("sigmoid(3)", sigmoid, 3.0, 0.952_574_13, 2),
        ("sigmoid(-3)", sigmoid, -3.0, 1.0 - 0.952_574_13, 2),
        ("erf(1)", erf, 1.0, 0.842_700_8, 2),
        ("erf(1e-30)", erf, 1e-30, 1.128_379_1e-30, 2),
        ("erf(1e-45)", erf, f32::from_bits(1), f32::from_bits(1), 0),
        ("gelu_erf(1)", gelu_erf, 1.0, 0.841_344_8, 3),
        ("gelu_erf(-3)", gelu_erf, -3.0, -0.004_049_694, 3),
        ("gelu_tanh(1)", gelu_tanh, 1.0, 0.841_192, 3),
        ("gelu_erf_grad(1)", gelu_erf_grad, 1.0, 1.083_315_5, 3),
        ("gelu_erf_grad(-3)", gelu_erf_grad, -3.0, -0.011_945_647, 3),
        ("gelu_tanh_grad(0)", gelu_tanh_grad, 0.0, 0.5, 0),
        ("tanh(1e-20)", tanh, 1e-20, 1e-20, 0),
    ];
    for (name, f, x, want, tol) in cases {
        let got = f(x);
        assert!(ulps(got, want) <= tol, "{name}: got {got:e}, want {want:e}");
    }
}

#[test]
fn tails_are_not_flushed() {
    // sigmoid far left is exp(x)/(1+exp(x)) = exp(x) in f32, subnormal but not 0
    for x in [-90.0f32, -95.5, -100.0, -103.0] {
        let s = sigmoid(x);
        assert!(s > 0.0, "sigmoid({x}) = 0");
        same("sigmoid tail", s, exp(x));
    }
    assert!(gelu_erf(-13.0) < 0.0 && gelu_erf(-13.0) > -1e-36);
    assert!(gelu_tanh(-10.0) < 0.0);
    assert!(gelu_erf_grad(-13.0) < 0.0);
    assert!(gelu_tanh_grad(-10.0) < 0.0);
    assert!(exp(-103.0) > 0.0);
}

#[test]
fn odd_functions_are_odd() {
    let mut b = 0u32;
    while b < 0x7F80_0000 {
        let x = f32::from_bits(b);
        assert_eq!(
            tanh(-x).to_bits(),
            tanh(x).to_bits() ^ 0x8000_0000,
            "tanh {x:e}"
        );
        assert_eq!(
            erf(-x).to_bits(),
            erf(x).to_bits() ^ 0x8000_0000,
            "erf {x:e}"
        );
        b += 0x0001_0001;
    }
}

#[test]
fn monotone_on_a_sweep() {
    let mut prev = [f32::NEG_INFINITY; 6];
    let mut x = -20.0f32;
    while x < 20.0 {
        let ys = [
            exp(x),
            tanh(x),
            sigmoid(x),
            erf(x),
            log(x + 20.5),
            gelu_erf(x.abs()),
        ];
        for (i, (&y, p)) in ys.iter().zip(prev.iter_mut()).enumerate() {
            assert!(
                y >= *p || (i == 5 && x <= 0.0),
                "function {i} decreases at {x}"
            );
            *p = y;
        }
        x += 1.0 / 512.0;
    }
}

#[test]
fn generic_instantiation_equals_the_scalar_functions() {
    use crate::lane::Exact;
    let mut b = 0u32;
    while b < u32::MAX - 0x0010_0001 {
        let x = f32::from_bits(b);
        assert_eq!(generic::exp::<f32, Exact>(x).to_bits(), exp(x).to_bits());
        assert_eq!(
            generic::gelu_tanh_grad::<f32, Exact>(x).to_bits(),
            gelu_tanh_grad(x).to_bits()
        );
        b += 0x0010_0001;
    }
}

#[cfg(feature = "std")]
#[test]
fn fast_variants_are_close_to_exact() {
    let mut b = 0u32;
    while b < u32::MAX - 0x0000_4001 {
        let x = f32::from_bits(b);
        for (name, e, f) in [
            ("exp", exp as F, fast::exp as F),
            ("log", log, fast::log),
            ("tanh", tanh, fast::tanh),
            ("sigmoid", sigmoid, fast::sigmoid),
        ] {
            let (ye, yf) = (e(x), f(x));
            if ye.is_nan() {
                assert_eq!(yf.to_bits(), NAN, "fast {name}({x:e})");
            } else if ye != yf {
                assert!(
                    ulps(ye, yf) <= 2,
                    "fast {name}({x:e}): {yf:e} vs exact {ye:e}"
                );
            }
        }
        b += 0x0000_4001;
    }
}

#[test]
fn coefficient_literals_have_the_documented_bits() {
    use coeffs::*;
    let check = |name: &str, c: &[f32], bits: &[u32]| {
        for (i, (&v, &b)) in c.iter().zip(bits).enumerate() {
            assert_eq!(v.to_bits(), b, "{name}[{i}]");
        }
    };
    check(
        "EXP_P",
        &EXP_P,
        &[
            0x3F000000, 0x3E2AAAAA, 0x3D2AAA74, 0x3C088987, 0x3AB6A65F, 0x394EFDDE,
        ],
    );
    check(
        "LOG_R",
        &LOG_R,
        &[0x3F2AAAAA, 0x3ECCCE13, 0x3E91E9E7, 0x3E78A09D],
    );
    check(
        "TANH_P",
        &TANH_P,
        &[
            0xBEAAAAAA, 0x3E08883D, 0xBD5CF8C4, 0x3CB1D2A8, 0xBC062F67, 0x3B0D13FF,
        ],
    );
    check(
        "ERF_Q",
        &ERF_Q,
        &[
            0x3E0375D4, 0xBEC0939F, 0x3DE71673, 0xBCDBFB8D, 0x3BA9F912, 0xBA51A8AF, 0x38A3B8FE,
        ],
    );
    check("MILLS_H0", &MILLS_H0, &[0x3F4C422A, 0xB2C2BC9B]);
    check(
        "MILLS_P",
        &MILLS_P,
        &[0xBEBA0CFA, 0xBE9059AB, 0xBDD5547A, 0xBCA926CF, 0xBAF941AD],
    );
    check(
        "MILLS_Q",
        &MILLS_Q,
        &[
            0x3F800000, 0x3F89B556, 0x3F0E86A6, 0x3E2AB568, 0x3CEC79E7, 0x3B1C32A9,
        ],
    );
}
