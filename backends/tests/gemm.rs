//! Differential tests of the blocked GEMM: every path of `ExactBackend` gives the bits of
//! `ScalarRefBackend`, and every path of `FastBackend` (the FMA paths and the scalar
//! path) those of `FastScalarRefBackend`, at 1, 2, 3 and 8 threads, for random shapes,
//! layouts (transposed
//! operands, padded rows, offsets, batch stride 0) and values (NaN, ±inf, ±0,
//! subnormals, wide magnitudes).
//!
//! Fast mode does not canonicalise NaN, and which NaN operand an x86 FMA propagates
//! depends on the instruction form the compiler picks, so in fast mode two NaNs compare
//! equal; every other value must match bit for bit. In exact mode every NaN is the
//! canonical `0x7FC00000` and all bits are compared.

use exactgrad_backends::cpu::{CpuBackend, Isa};
use exactgrad_backends::lane::{Exact, Fast};
use exactgrad_backends::{FastScalarRefBackend, ScalarRefBackend};
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::BackendImpl as _;
use exactgrad_core::{Backend, ComputeMode, Philox};
use proptest::prelude::*;
use std::sync::OnceLock;

const THREADS: [usize; 4] = [1, 2, 3, 8];

/// Every backend under test, built once (each owns a thread pool).
struct Backends {
    exact: Vec<CpuBackend<Exact>>,
    fast: Vec<CpuBackend<Fast>>,
}

fn backends() -> &'static Backends {
    static B: OnceLock<Backends> = OnceLock::new();
    B.get_or_init(|| {
        let mut exact = Vec::new();
        let mut fast = Vec::new();
        for isa in Isa::ALL {
            for t in THREADS {
                match CpuBackend::<Exact>::with_isa(isa, t) {
                    Ok(b) => exact.push(b),
                    Err(e) if t == 1 => eprintln!("skipped: matmul exact {isa} ({e})"),
                    Err(_) => {}
                }
                match CpuBackend::<Fast>::with_isa(isa, t) {
                    Ok(b) => fast.push(b),
                    Err(e) if t == 1 => eprintln!("skipped: matmul fast {isa} ({e})"),
                    Err(_) => {}
                }
            }
        }
        Backends { exact, fast }
    })
}

/// How an operand is laid out in its storage.
#[derive(Clone, Copy, Debug)]
enum Form {
    /// Rows of `cols` elements, one after another.
    RowMajor,
    /// Stored transposed: row stride 1, column stride `rows`.
    Transposed,
    /// Row-major with `pad` unused elements after each row.
    Padded(usize),
}

/// A batched operand: storage, offset and strides.
struct Operand {
    data: Vec<f32>,
    offset: usize,
    strides: [usize; 3],
}

fn value(r: &mut Philox, special_per_1024: u32) -> f32 {
    if r.below(1024) < special_per_1024 {
        const SPECIAL: [f32; 10] = [
            f32::NAN,
            f32::INFINITY,
            f32::NEG_INFINITY,
            0.0,
            -0.0,
            1e-40,
            -3e-42,
            f32::MIN_POSITIVE,
            f32::MAX,
            -1e-45,
        ];
        return SPECIAL[r.below(SPECIAL.len() as u32) as usize];
    }
    // Wide magnitudes make the result depend on the order of the additions; a few
    // subnormal-range values exercise gradual underflow.
    let mant = r.next_f32() * 2.0 - 1.0;
    let e = r.below(40) as i32 - 20 - if r.below(16) == 0 { 110 } else { 0 };
    mant * 2f32.powi(e)
}

#[allow(clippy::too_many_arguments)]
fn operand(
    r: &mut Philox,
    batches: usize,
    rows: usize,
    cols: usize,
    form: Form,
    offset: usize,
    special: u32,
) -> Operand {
    let (rs, cs, per) = match form {
        Form::RowMajor => (cols, 1, rows * cols),
        Form::Transposed => (1, rows, rows * cols),
        Form::Padded(p) => (cols + p, 1, rows * (cols + p)),
    };
    let len = offset + batches * per;
    let data = (0..len).map(|_| value(r, special)).collect();
    Operand {
        data,
        offset,
        strides: [if batches == 1 { 0 } else { per }, rs, cs],
    }
}

/// One product to test.
#[derive(Clone, Debug)]
struct Case {
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    a_form: Form,
    b_form: Form,
    a_shared: bool,
    b_shared: bool,
    special: u32,
    seed: u64,
}

impl Case {
    fn build(&self) -> (MatmulSpec, Vec<f32>, Vec<f32>) {
        let mut r = Philox::new(self.seed);
        let a_batches = if self.a_shared { 1 } else { self.batch };
        let b_batches = if self.b_shared { 1 } else { self.batch };
        let a = operand(
            &mut r,
            a_batches,
            self.m,
            self.k,
            self.a_form,
            3,
            self.special,
        );
        let b = operand(
            &mut r,
            b_batches,
            self.k,
            self.n,
            self.b_form,
            5,
            self.special,
        );
        let spec = MatmulSpec {
            batch: self.batch,
            m: self.m,
            k: self.k,
            n: self.n,
            a_offset: a.offset,
            a_strides: a.strides,
            b_offset: b.offset,
            b_strides: b.strides,
        };
        (spec, a.data, b.data)
    }
}

/// Runs `case` on every backend and panics with the first difference.
fn check(case: &Case) {
    let (spec, a, b) = case.build();
    let len = spec.batch * spec.m * spec.n;
    let shape = format!(
        "batch {} m {} k {} n {} (a {:?}{}, b {:?}{}, specials {}/1024, seed {})",
        case.batch,
        case.m,
        case.k,
        case.n,
        case.a_form,
        if case.a_shared { " shared" } else { "" },
        case.b_form,
        if case.b_shared { " shared" } else { "" },
        case.special,
        case.seed
    );
    let bs = backends();

    let mut want = vec![0.0f32; len];
    ScalarRefBackend.matmul(&spec, &a, &b, &mut want).unwrap();
    for be in &bs.exact {
        let mut got = vec![f32::from_bits(0xdead_beef); len];
        be.matmul(&spec, &a, &b, &mut got).unwrap();
        compare(
            &want,
            &got,
            ComputeMode::Exact,
            be.isa(),
            be.threads(),
            &spec,
            &shape,
        );
    }

    FastScalarRefBackend
        .matmul(&spec, &a, &b, &mut want)
        .unwrap();
    for be in &bs.fast {
        let mut got = vec![f32::from_bits(0xdead_beef); len];
        be.matmul(&spec, &a, &b, &mut got).unwrap();
        compare(
            &want,
            &got,
            ComputeMode::Fast,
            be.isa(),
            be.threads(),
            &spec,
            &shape,
        );
    }
}

fn compare(
    want: &[f32],
    got: &[f32],
    mode: ComputeMode,
    isa: Isa,
    threads: usize,
    spec: &MatmulSpec,
    shape: &str,
) {
    let same = |w: f32, g: f32| {
        w.to_bits() == g.to_bits() || (mode == ComputeMode::Fast && w.is_nan() && g.is_nan())
    };
    if let Some(idx) = (0..want.len()).find(|&i| !same(want[i], got[i])) {
        let (bi, i, j) = (idx / (spec.m * spec.n), idx / spec.n % spec.m, idx % spec.n);
        panic!(
            "kernel matmul, mode {mode}, path {isa}, threads {threads}, shape {shape}: \
             first difference at [{bi}, {i}, {j}]: got {:e} ({:#010x}), want {:e} ({:#010x})",
            got[idx],
            got[idx].to_bits(),
            want[idx],
            want[idx].to_bits()
        );
    }
}

fn form() -> impl Strategy<Value = Form> {
    prop_oneof![
        3 => Just(Form::RowMajor),
        2 => Just(Form::Transposed),
        1 => (1usize..4).prop_map(Form::Padded),
    ]
}

fn case(max: usize) -> impl Strategy<Value = Case> {
    (
        (1usize..=3, 0..=max, 0..=max, 0..=max),
        (form(), form(), any::<bool>(), any::<bool>()),
        (prop_oneof![Just(0u32), Just(4), Just(64)], any::<u64>()),
    )
        .prop_map(
            |((batch, m, k, n), (a_form, b_form, a_shared, b_shared), (special, seed))| Case {
                batch,
                m,
                k,
                n,
                a_form,
                b_form,
                a_shared,
                b_shared,
                special,
                seed,
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if cfg!(debug_assertions) { 64 } else { 1000 },
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_shapes_match_the_scalar_reference(c in case(70)) {
        check(&c);
    }
}

fn fixed(batch: usize, m: usize, k: usize, n: usize, forms: (Form, Form), seed: u64) -> Case {
    Case {
        batch,
        m,
        k,
        n,
        a_form: forms.0,
        b_form: forms.1,
        a_shared: false,
        b_shared: false,
        special: 4,
        seed,
    }
}

/// Sizes around every path's micro-tile edges (rows: 4, 6 and 8, short kernels of 2, 3
/// and 4; columns: 4, 8, 12, 16, 32 and 64, edge kernels of one and two lanes).
#[test]
fn tile_edges() {
    let rm = (Form::RowMajor, Form::RowMajor);
    let mut seed = 1;
    for m in [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12, 13, 15, 16, 17] {
        for n in [
            1, 3, 4, 5, 8, 9, 11, 12, 13, 15, 16, 17, 23, 24, 25, 31, 32, 33, 47, 48, 63, 64, 65,
            97, 129,
        ] {
            for k in [1, 2, 17] {
                seed += 1;
                check(&fixed(1, m, k, n, rm, seed));
            }
        }
    }
}

/// Larger products: several k blocks (k > 512: the accumulator leaves the registers and
/// comes back), several row blocks (m > 144) and parallel chunks, batches with their own
/// or a shared B.
#[test]
fn large_shapes() {
    let (rm, tt) = (
        (Form::RowMajor, Form::RowMajor),
        (Form::Transposed, Form::Transposed),
    );
    let (rt, tr) = (
        (Form::RowMajor, Form::Transposed),
        (Form::Transposed, Form::RowMajor),
    );
    let cases = [
        fixed(1, 129, 257, 67, rm, 11),
        fixed(1, 129, 257, 67, tt, 12),
        fixed(2, 67, 600, 45, rt, 13),
        fixed(1, 200, 513, 40, tr, 14),
        fixed(3, 65, 300, 33, rm, 15),
        fixed(1, 1, 1000, 130, rm, 16),
        fixed(1, 130, 1000, 1, rm, 17),
        fixed(1, 150, 1100, 70, rt, 21),
        Case {
            b_shared: true,
            ..fixed(3, 70, 270, 50, rm, 18)
        },
        Case {
            a_shared: true,
            ..fixed(3, 70, 270, 50, tr, 19)
        },
        Case {
            special: 0,
            ..fixed(1, 256, 256, 256, rm, 20)
        },
        // Few rows per B (B read in place for full panels, the last panel packed), with
        // several k blocks, per-batch and shared B, on both sides of the row limit.
        fixed(2, 16, 600, 130, rm, 22),
        fixed(1, 40, 1030, 200, rm, 23),
        Case {
            b_shared: true,
            ..fixed(2, 24, 520, 129, rm, 24)
        },
        fixed(1, 48, 100, 257, rm, 25),
        fixed(1, 49, 100, 257, rm, 26),
        fixed(3, 7, 64, 192, rt, 27),
        fixed(2, 16, 300, 130, (Form::RowMajor, Form::Padded(3)), 28),
        // A transposed B with fewer rows than columns: computed as the transpose.
        fixed(1, 16, 700, 144, rt, 29),
        fixed(1, 5, 3, 200, rt, 30),
        fixed(1, 33, 520, 70, (Form::Padded(2), Form::Transposed), 31),
        fixed(4, 16, 300, 27, rt, 32),
        Case {
            a_shared: true,
            ..fixed(3, 8, 100, 40, rt, 33)
        },
        Case {
            b_shared: true,
            ..fixed(3, 8, 100, 40, rt, 34)
        },
    ];
    for c in &cases {
        check(c);
    }
}

/// The order of the additions is the canonical one: `1e8 + 1 − 1e8` loses the 1.
#[test]
fn canonical_order() {
    let bs = backends();
    let k = 3;
    let a = [1e8f32, 1.0, -1e8];
    let b = [1.0f32; 3];
    let spec = MatmulSpec {
        batch: 1,
        m: 1,
        k,
        n: 1,
        a_offset: 0,
        a_strides: [0, k, 1],
        b_offset: 0,
        b_strides: [0, 1, 1],
    };
    for be in &bs.exact {
        let mut c = [f32::NAN];
        be.matmul(&spec, &a, &b, &mut c).unwrap();
        assert_eq!(c[0], 0.0, "{}", be.name());
        assert!(c[0].is_sign_positive(), "{}", be.name());
    }
}

/// The context counts each product's `batch · m · n · k` multiply-adds, `matmul_acc`'s as
/// well, and a product of an empty dimension as none.
#[test]
fn products_count_their_multiply_adds() {
    let b = CpuBackend::<Exact>::with_threads(2);
    assert_eq!(b.context().multiply_adds(), 0);
    let spec = |batch, m, k, n| MatmulSpec {
        batch,
        m,
        k,
        n,
        a_offset: 0,
        a_strides: [m * k, k, 1],
        b_offset: 0,
        b_strides: [k * n, n, 1],
    };
    let (x, y) = (vec![1.0f32; 2 * 3 * 5], vec![1.0f32; 2 * 5 * 7]);
    let mut out = vec![0.0f32; 2 * 3 * 7];
    b.matmul(&spec(2, 3, 5, 7), &x, &y, &mut out).unwrap();
    assert_eq!(b.context().multiply_adds(), 2 * 3 * 5 * 7);
    assert!(out.iter().all(|&v| v == 5.0));
    b.matmul_acc(&spec(2, 3, 5, 7), 5, &x, &y, &mut out)
        .unwrap();
    assert_eq!(b.context().multiply_adds(), 2 * 2 * 3 * 5 * 7);
    assert!(out.iter().all(|&v| v == 10.0));
    b.matmul(&spec(2, 3, 0, 7), &x, &y, &mut out).unwrap();
    assert_eq!(b.context().multiply_adds(), 2 * 2 * 3 * 5 * 7);
    // A clone shares the context, and so the count.
    assert_eq!(b.clone().context().multiply_adds(), 2 * 2 * 3 * 5 * 7);
}
