//! Running kernels against the reference: the [`Inputs`] of a case, the comparison of
//! outputs ([`first_difference`]) and the drivers from one case ([`check_case`]) to the
//! whole suite ([`check_backend`], [`assert_conforms`]).

use super::cases::{kernel_cases, values, Call, Case, Config, Kernel};
use super::report::{Mismatch, Report};
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::{Backend, ComputeMode, Layout, Philox};
use std::boxed::Box;
use std::string::{String, ToString};
use std::vec::Vec;

/// The inputs of a case, built once and shared by every backend under test.
#[derive(Clone, Debug)]
pub struct Inputs {
    bufs: Vec<Vec<f32>>,
    layouts: Vec<Layout>,
    spec: Option<MatmulSpec>,
    out_len: usize,
    shape: String,
}

impl Inputs {
    /// The buffers, layouts and output length of `case`; `y` of the backward kernels
    /// comes from `reference` when the case asks for a forward output.
    pub fn new<R: Backend>(case: &Case, reference: &R) -> Self {
        let seed = case.seed;
        let sp = case.specials;
        let vals = |i: u64, n: usize| {
            values(
                n,
                seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)),
                sp,
            )
        };
        let mut inp = Inputs {
            bufs: Vec::new(),
            layouts: Vec::new(),
            spec: None,
            out_len: 0,
            shape: String::new(),
        };
        match &case.call {
            Call::Train(t) => {
                let (bufs, out_len) = super::training::inputs(t, reference, &vals);
                inp.bufs = bufs;
                inp.out_len = out_len;
                inp.shape = t.shape();
            }
            Call::CopyStrided { src } => {
                let (l, n) = src.layout();
                inp.shape = format!("{:?} strides {:?} offset {}", l.shape, l.strides, l.offset);
                inp.out_len = l.numel();
                inp.bufs.push(vals(0, n));
                inp.layouts.push(l);
            }
            Call::Unary { len, .. } => {
                inp.shape = format!("[{len}]");
                inp.out_len = *len;
                inp.bufs.push(vals(0, *len));
            }
            Call::UnaryBackward {
                op,
                len,
                y_from_forward,
            } => {
                inp.shape = format!("[{len}]");
                inp.out_len = *len;
                let x = vals(0, *len);
                let y = if *y_from_forward {
                    let mut y = vec![0.0; *len];
                    // A reference whose forward kernel fails is caught by the forward
                    // cases; here its outputs become NaN inputs.
                    if reference.unary(*op, &x, &mut y).is_err() {
                        y.fill(f32::NAN);
                    }
                    y
                } else {
                    vals(1, *len)
                };
                inp.bufs.extend([x, y, vals(2, *len)]);
            }
            Call::Binary { shape, a, b, .. } => {
                let (la, na) = a.layout(shape);
                let (lb, nb) = b.layout(shape);
                inp.shape = format!(
                    "{shape:?}; a strides {:?} offset {}; b strides {:?} offset {}",
                    la.strides, la.offset, lb.strides, lb.offset
                );
                inp.out_len = shape.iter().product();
                inp.bufs.extend([vals(0, na), vals(1, nb)]);
                inp.layouts.extend([la, lb]);
            }
            Call::Select { shape, cond, a, b } => {
                let (lc, nc) = cond.layout(shape);
                let (la, na) = a.layout(shape);
                let (lb, nb) = b.layout(shape);
                inp.shape = format!(
                    "{shape:?}; cond strides {:?}; a strides {:?}; b strides {:?}",
                    lc.strides, la.strides, lb.strides
                );
                inp.out_len = shape.iter().product();
                let mut c = vals(0, nc);
                let mut r = Philox::new(seed ^ 0xC0DD);
                for v in c.iter_mut() {
                    match r.below(4) {
                        0 => *v = 0.0,
                        1 => *v = -0.0,
                        _ => {}
                    }
                }
                inp.bufs.extend([c, vals(1, na), vals(2, nb)]);
                inp.layouts.extend([lc, la, lb]);
            }
            Call::Sum { x, reduce } => {
                let (l, n) = x.layout();
                assert_eq!(
                    reduce.len(),
                    l.rank(),
                    "Sum: reduce flags do not match rank"
                );
                inp.shape = format!(
                    "{:?} strides {:?} offset {} reduce {:?}",
                    l.shape, l.strides, l.offset, reduce
                );
                inp.out_len = (0..l.rank())
                    .filter(|&d| !reduce[d])
                    .map(|d| l.shape[d])
                    .product();
                inp.bufs.push(vals(0, n));
                inp.layouts.push(l);
            }
            Call::Matmul {
                batch,
                m,
                k,
                n,
                a_trans,
                b_trans,
                a_bcast,
                b_bcast,
                offsets,
            } => {
                let (batch, m, k, n) = (*batch, *m, *k, *n);
                let a_mats = if *a_bcast { 1 } else { batch };
                let b_mats = if *b_bcast { 1 } else { batch };
                let a_strides = [
                    if *a_bcast { 0 } else { m * k },
                    if *a_trans { 1 } else { k },
                    if *a_trans { m } else { 1 },
                ];
                let b_strides = [
                    if *b_bcast { 0 } else { k * n },
                    if *b_trans { 1 } else { n },
                    if *b_trans { k } else { 1 },
                ];
                let spec = MatmulSpec {
                    batch,
                    m,
                    k,
                    n,
                    a_offset: offsets.0,
                    a_strides,
                    b_offset: offsets.1,
                    b_strides,
                };
                inp.shape = format!(
                    "batch {batch} [{m}×{k}]·[{k}×{n}] a strides {a_strides:?} b strides {b_strides:?}"
                );
                inp.out_len = batch * m * n;
                inp.bufs.extend([
                    vals(0, offsets.0 + a_mats * m * k),
                    vals(1, offsets.1 + b_mats * k * n),
                ]);
                inp.spec = Some(spec);
            }
            Call::Softmax { rows, cols, .. } => {
                inp.shape = format!("[{rows}, {cols}]");
                inp.out_len = rows * cols;
                inp.bufs.push(vals(0, rows * cols));
            }
            Call::SoftmaxBackward {
                rows,
                cols,
                log,
                y_from_forward,
            } => {
                inp.shape = format!("[{rows}, {cols}]");
                let len = rows * cols;
                inp.out_len = len;
                let y = if *y_from_forward {
                    let x = vals(0, len);
                    let mut y = vec![0.0; len];
                    // As for unary backward: a failing forward kernel is caught by the
                    // forward cases.
                    if reference.softmax(&x, *rows, *cols, *log, &mut y).is_err() {
                        y.fill(f32::NAN);
                    }
                    y
                } else {
                    vals(0, len)
                };
                inp.bufs.extend([y, vals(1, len)]);
            }
        }
        inp
    }

    /// The shapes and layouts of the case, as printed in reports.
    pub fn shape(&self) -> &str {
        &self.shape
    }

    /// Runs the case's kernel on `backend` and returns its output (the output buffer is
    /// pre-filled with [`UNWRITTEN`], so an element the kernel skips shows up), or the
    /// error the kernel returned.
    pub fn run<B: Backend>(
        &self,
        call: &Call,
        backend: &B,
    ) -> Result<Vec<f32>, exactgrad_core::Error> {
        if let Call::Train(t) = call {
            return super::training::run(t, &self.bufs, self.out_len, backend);
        }
        let mut out = vec![UNWRITTEN; self.out_len];
        let (bf, l) = (&self.bufs, &self.layouts);
        match call {
            Call::Train(_) => Ok(()),
            Call::CopyStrided { .. } => backend.copy_strided(&bf[0], &l[0], &mut out),
            Call::Unary { op, .. } => backend.unary(*op, &bf[0], &mut out),
            Call::UnaryBackward { op, .. } => {
                backend.unary_backward(*op, &bf[0], &bf[1], &bf[2], &mut out)
            }
            Call::Binary { op, .. } => backend.binary(*op, &bf[0], &l[0], &bf[1], &l[1], &mut out),
            Call::Select { .. } => {
                backend.select(&bf[0], &l[0], &bf[1], &l[1], &bf[2], &l[2], &mut out)
            }
            Call::Sum { reduce, .. } => backend.sum(&bf[0], &l[0], reduce, &mut out),
            Call::Matmul { .. } => match self.spec.as_ref() {
                Some(spec) => backend.matmul(spec, &bf[0], &bf[1], &mut out),
                None => Err(exactgrad_core::Error::invalid(
                    "matmul",
                    "spec",
                    "the case has no product spec",
                )),
            },
            Call::Softmax { rows, cols, log } => {
                backend.softmax(&bf[0], *rows, *cols, *log, &mut out)
            }
            Call::SoftmaxBackward {
                rows, cols, log, ..
            } => backend.softmax_backward(&bf[0], &bf[1], *rows, *cols, *log, &mut out),
        }?;
        Ok(out)
    }
}

/// The value output buffers hold before a kernel runs (a finite pattern no kernel of the
/// suite produces by chance).
pub const UNWRITTEN: f32 = f32::from_bits(0x7F7F_A5A5);

/// The index of the first element where `got` and `want` differ under `mode`'s rule
/// (exact: bits; fast: bits, but any NaN equals any NaN), or the shorter length if the
/// lengths differ.
pub fn first_difference(mode: ComputeMode, got: &[f32], want: &[f32]) -> Option<usize> {
    let same = |a: f32, b: f32| {
        a.to_bits() == b.to_bits() || (mode == ComputeMode::Fast && a.is_nan() && b.is_nan())
    };
    got.iter()
        .zip(want)
        .position(|(&a, &b)| !same(a, b))
        .or_else(|| (got.len() != want.len()).then(|| got.len().min(want.len())))
}

/// Checks one case on every backend of `backends` against `reference` (whose output is
/// computed once).
pub fn check_case_on<B: Backend, R: Backend>(
    backends: &[B],
    reference: &R,
    case: &Case,
) -> Result<(), Box<Mismatch>> {
    let inputs = Inputs::new(case, reference);
    let mismatch = |backend: String, index: usize, got, want, error: Option<String>| {
        Box::new(Mismatch {
            kernel: case.call.label(),
            backend,
            reference: reference.name(),
            shape: inputs.shape().to_string(),
            case: case.clone(),
            index,
            got,
            want,
            error,
        })
    };
    let want = inputs
        .run(&case.call, reference)
        .map_err(|e| mismatch(reference.name(), 0, None, None, Some(e.to_string())))?;
    for b in backends {
        let got = inputs.run(&case.call, b).map_err(|e| {
            mismatch(
                b.name(),
                0,
                None,
                want.first().copied(),
                Some(e.to_string()),
            )
        })?;
        if let Some(i) = first_difference(b.mode(), &got, &want) {
            return Err(mismatch(
                b.name(),
                i,
                got.get(i).copied(),
                want.get(i).copied(),
                None,
            ));
        }
    }
    Ok(())
}

/// Checks one case on `backend` against `reference`.
pub fn check_case<B: Backend, R: Backend>(
    backend: &B,
    reference: &R,
    case: &Case,
) -> Result<(), Box<Mismatch>> {
    check_case_on(core::slice::from_ref(backend), reference, case)
}

/// Runs every case of `kernel` on every backend of `backends`; returns the number of
/// cases.
pub fn check_kernel_on<B: Backend, R: Backend>(
    backends: &[B],
    reference: &R,
    kernel: Kernel,
    config: &Config,
) -> Result<usize, Box<Mismatch>> {
    let cases = kernel_cases(kernel, config);
    for c in &cases {
        check_case_on(backends, reference, c)?;
    }
    Ok(cases.len())
}

/// Runs every case of `kernel` on `backend`; returns the number of cases.
pub fn check_kernel<B: Backend, R: Backend>(
    backend: &B,
    reference: &R,
    kernel: Kernel,
    config: &Config,
) -> Result<usize, Box<Mismatch>> {
    check_kernel_on(core::slice::from_ref(backend), reference, kernel, config)
}

/// Runs the whole suite (every kernel) on every backend of `backends`.
pub fn check_backends<B: Backend, R: Backend>(
    backends: &[B],
    reference: &R,
    config: &Config,
) -> Result<Report, Box<Mismatch>> {
    let mut report = Report::default();
    for k in Kernel::ALL {
        let n = check_kernel_on(backends, reference, k, config)?;
        report.cases.push((k, n));
    }
    Ok(report)
}

/// Runs the whole differential suite (every kernel) on `backend` against `reference`.
/// [`check_invalid_arguments`](super::check_invalid_arguments) checks the refusal of
/// invalid arguments; [`assert_conforms`] and
/// [`conformance_tests!`](crate::conformance_tests) run both.
pub fn check_backend<B: Backend, R: Backend>(
    backend: &B,
    reference: &R,
    config: &Config,
) -> Result<Report, Box<Mismatch>> {
    check_backends(core::slice::from_ref(backend), reference, config)
}

/// Runs the whole suite and panics with the first [`Mismatch`] if there is one.
pub fn assert_conforms<B: Backend, R: Backend>(
    backend: &B,
    reference: &R,
    config: &Config,
) -> Report {
    if let Err(m) = super::check_invalid_arguments(backend) {
        panic!("{m}");
    }
    match check_backend(backend, reference, config) {
        Ok(r) => r,
        Err(m) => panic!("{m}"),
    }
}
