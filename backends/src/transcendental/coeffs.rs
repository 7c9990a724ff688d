//! Coefficient tables (see `docs/transcendentals.md`; each is `c0, c1, …` in increasing
//! powers, evaluated by Horner's rule from the highest power down).

/// exp: e^r = 1 + r + r²·P(r), |r| ≤ ln2/2.
pub const EXP_P: [f32; 6] = [
    0.5,           // 0x3F000000
    0.16666666,    // 0x3E2AAAAA
    0.041666463,   // 0x3D2AAA74
    0.00833357,    // 0x3C088987
    0.001393508,   // 0x3AB6A65F
    0.00019740264, // 0x394EFDDE
];
/// log: log(1+f) = f − f²/2 + s·(f²/2 + z·R(z)), s = f/(2+f), z = s².
pub const LOG_R: [f32; 4] = [
    0.6666666,  // 0x3F2AAAAA
    0.40000972, // 0x3ECCCE13
    0.28498766, // 0x3E91E9E7
    0.24280019, // 0x3E78A09D
];
/// tanh: tanh(x) = x + x·(z·P(z)), z = x², |x| < 0.625.
pub const TANH_P: [f32; 6] = [
    -0.3333333,   // 0xBEAAAAAA
    0.13333221,   // 0x3E08883D
    -0.05394818,  // 0xBD5CF8C4
    0.021706894,  // 0x3CB1D2A8
    -0.008190013, // 0xBC062F67
    0.0021526811, // 0x3B0D13FF
];
/// erf: erf(x) = x + x·Q(z), z = x², |x| < 1.
pub const ERF_Q: [f32; 7] = [
    0.12837917,    // 0x3E0375D4
    -0.37612626,   // 0xBEC0939F
    0.11283579,    // 0x3DE71673
    -0.026853347,  // 0xBCDBFB8D
    0.005187162,   // 0x3BA9F912
    -0.0007997853, // 0xBA51A8AF
    7.806903e-5,   // 0x38A3B8FE
];
/// Normal tail Φ(−u) = φ(u) / D(u), u ≥ 0, D(u) = H0 + u·(1 + R(u)) with
/// H0 = 2/√(2π) = `MILLS_H0[0] + MILLS_H0[1]` and R(u) ≈ RP(u)/RQ(u) on 0 ≤ u ≤ 15.
pub const MILLS_H0: [f32; 2] = [
    0.7978846,    // 0x3F4C422A
    -2.267034e-8, // 0xB2C2BC9B
];
/// R(u) ≈ RP(u)/RQ(u): numerator.
pub const MILLS_P: [f32; 5] = [
    -0.36338025,   // 0xBEBA0CFA
    -0.2819341,    // 0xBE9059AB
    -0.10416503,   // 0xBDD5547A
    -0.020648388,  // 0xBCA926CF
    -0.0019016765, // 0xBAF941AD
];
/// R(u) ≈ RP(u)/RQ(u): denominator.
pub const MILLS_Q: [f32; 6] = [
    1.0,          // 0x3F800000
    1.0758464,    // 0x3F89B556
    0.5567421,    // 0x3F0E86A6
    0.16670763,   // 0x3E2AB568
    0.028866721,  // 0x3CEC79E7
    0.0023833907, // 0x3B1C32A9
];
