//! Running kernels against the reference: the [`Inputs`] of a case, the comparison of
//! outputs ([`first_difference`]) and the drivers from one case ([`check_case`]) to the
//! whole suite ([`check_backend`], [`assert_conforms`]).

use super::cases::{kernel_cases, values, Call, Case, Config, Kernel};
use super::report::{Mismatch, Report};
use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::recurrent::{
    CellShape, GruCellGradInputs, GruCellGradOutputs, GruCellInputs, GruCellOutputs,
    LstmCellGradInputs, LstmCellGradOutputs, LstmCellInputs, LstmCellOutputs,
};
use exactgrad_core::{Backend, ComputeMode, Layout, Philox, ViewMutOf};
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
            Call::Digest { len } => {
                inp.shape = format!("[{len}]");
                // The 64-bit digest as four 16-bit pieces, each an exact f32.
                inp.out_len = 4;
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
                    let forward = || -> Result<Vec<f32>, exactgrad_core::Error> {
                        let xs = upload(reference, &x)?;
                        let mut y = reference.storage_from_vec(vec![0.0; *len])?;
                        reference.unary(*op, R::view(&xs), R::view_mut(&mut y))?;
                        R::storage_to_vec(&y)
                    };
                    // A reference whose forward kernel fails is caught by the forward
                    // cases; here its outputs become NaN inputs.
                    forward().unwrap_or_else(|_| vec![f32::NAN; *len])
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
                seg,
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
                if *seg > 0 {
                    inp.shape += &format!(" segments of {seg}");
                }
                inp.out_len = batch * m * n;
                inp.bufs.extend([
                    vals(0, offsets.0 + a_mats * m * k),
                    vals(1, offsets.1 + b_mats * k * n),
                ]);
                if *seg > 0 {
                    // The output's values before the segments are added.
                    inp.bufs.push(vals(2, batch * m * n));
                }
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
                    let forward = || -> Result<Vec<f32>, exactgrad_core::Error> {
                        let xs = upload(reference, &x)?;
                        let mut y = reference.storage_from_vec(vec![0.0; len])?;
                        reference.softmax(R::view(&xs), *rows, *cols, *log, R::view_mut(&mut y))?;
                        R::storage_to_vec(&y)
                    };
                    // As for unary backward: a failing forward kernel is caught by the
                    // forward cases.
                    forward().unwrap_or_else(|_| vec![f32::NAN; len])
                } else {
                    vals(0, len)
                };
                inp.bufs.extend([y, vals(1, len)]);
            }
            Call::RecurrentCell {
                kernel,
                batch,
                hidden,
                from_forward,
                ..
            } => cell_inputs(
                &mut inp,
                *kernel,
                *batch,
                *hidden,
                *from_forward,
                &vals,
                reference,
            ),
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
        let mut out = backend.storage_from_vec(vec![UNWRITTEN; self.out_len])?;
        let (bf, l) = (&self.bufs, &self.layouts);
        let up = |i: usize| upload(backend, &bf[i]);
        match call {
            Call::Train(_) => Ok(()),
            Call::CopyStrided { .. } => {
                let x = up(0)?;
                backend.copy_strided(B::view(&x), &l[0], B::view_mut(&mut out))
            }
            Call::Unary { op, .. } => {
                let x = up(0)?;
                backend.unary(*op, B::view(&x), B::view_mut(&mut out))
            }
            Call::Digest { .. } => {
                let x = up(0)?;
                let d = backend.digest(B::view(&x))?;
                let pieces: Vec<f32> = (0..4).map(|i| ((d >> (16 * i)) & 0xffff) as f32).collect();
                B::with_host_mut(B::view_mut(&mut out), |o| o.copy_from_slice(&pieces))
            }
            Call::UnaryBackward { op, .. } => {
                let (x, y, g) = (up(0)?, up(1)?, up(2)?);
                backend.unary_backward(
                    *op,
                    B::view(&x),
                    B::view(&y),
                    B::view(&g),
                    B::view_mut(&mut out),
                )
            }
            Call::Binary { op, .. } => {
                let (a, b) = (up(0)?, up(1)?);
                backend.binary(
                    *op,
                    B::view(&a),
                    &l[0],
                    B::view(&b),
                    &l[1],
                    B::view_mut(&mut out),
                )
            }
            Call::Select { .. } => {
                let (c, a, b) = (up(0)?, up(1)?, up(2)?);
                backend.select(
                    B::view(&c),
                    &l[0],
                    B::view(&a),
                    &l[1],
                    B::view(&b),
                    &l[2],
                    B::view_mut(&mut out),
                )
            }
            Call::Sum { reduce, .. } => {
                let x = up(0)?;
                backend.sum(B::view(&x), &l[0], reduce, B::view_mut(&mut out))
            }
            Call::Matmul { seg, .. } => match self.spec.as_ref() {
                Some(spec) if *seg > 0 => {
                    let mut init = vec![UNWRITTEN; self.out_len];
                    init.copy_from_slice(&bf[2]);
                    out = backend.storage_from_vec(init)?;
                    let (a, b) = (up(0)?, up(1)?);
                    backend.matmul_acc(spec, *seg, B::view(&a), B::view(&b), B::view_mut(&mut out))
                }
                Some(spec) => {
                    let (a, b) = (up(0)?, up(1)?);
                    backend.matmul(spec, B::view(&a), B::view(&b), B::view_mut(&mut out))
                }
                None => Err(exactgrad_core::Error::invalid(
                    "matmul",
                    "spec",
                    "the case has no product spec",
                )),
            },
            Call::Softmax { rows, cols, log } => {
                let x = up(0)?;
                backend.softmax(B::view(&x), *rows, *cols, *log, B::view_mut(&mut out))
            }
            Call::SoftmaxBackward {
                rows, cols, log, ..
            } => {
                let (y, g) = (up(0)?, up(1)?);
                backend.softmax_backward(
                    B::view(&y),
                    B::view(&g),
                    *rows,
                    *cols,
                    *log,
                    B::view_mut(&mut out),
                )
            }
            Call::RecurrentCell {
                kernel,
                batch,
                hidden,
                bias_ih,
                bias_hh,
                ..
            } => run_cell(
                backend,
                *kernel,
                CellShape {
                    batch: *batch,
                    hidden: *hidden,
                },
                (*bias_ih, *bias_hh),
                bf,
                B::view_mut(&mut out),
            ),
        }?;
        B::storage_to_vec(&out)
    }
}

/// `v` uploaded to a buffer of `backend` (the kit's inputs are host vectors, shared by
/// every backend under test).
pub(super) fn upload<B: Backend>(
    backend: &B,
    v: &[f32],
) -> Result<B::Storage, exactgrad_core::Error> {
    backend.storage_from_vec(v.to_vec())
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

// ----- recurrent cells ------------------------------------------------------------------------

/// The buffers of a recurrent cell case, in the order [`run_cell`] reads them:
///
/// - `lstm_cell`: `xg`, `hg`, `bias_ih`, `bias_hh`, `c_prev`;
/// - `lstm_cell_backward`: `gates`, `c_prev`, `c`, `dy`, `dh_next`, `dc_next`;
/// - `gru_cell`: `xg`, `hg`, `bias_ih`, `bias_hh`, `h_prev`;
/// - `gru_cell_backward`: `gates`, `h_prev`, `dy`, `dh_next`.
///
/// With `from_forward`, the backward rules' kept gates (and `c`) are the reference's
/// forward outputs on random `xg`, `hg`, biases and states.
fn cell_inputs<R: Backend>(
    inp: &mut Inputs,
    kernel: Kernel,
    batch: usize,
    hidden: usize,
    from_forward: bool,
    vals: &dyn Fn(u64, usize) -> Vec<f32>,
    reference: &R,
) {
    let shape = CellShape { batch, hidden };
    let (bh, g) = (batch * hidden, |k: usize| batch * k * hidden);
    inp.shape = format!("batch {batch} hidden {hidden}");
    let forward = |gates: usize, state: Vec<f32>| -> (Vec<f32>, Vec<f32>) {
        let (xg, hg) = (vals(10, g(gates)), vals(11, g(gates)));
        let (bi, bhh) = (vals(12, gates * hidden), vals(13, gates * hidden));
        let run = || -> Result<(Vec<f32>, Vec<f32>), exactgrad_core::Error> {
            let (xg, hg) = (upload(reference, &xg)?, upload(reference, &hg)?);
            let (bi, bhh) = (upload(reference, &bi)?, upload(reference, &bhh)?);
            let state = upload(reference, &state)?;
            let mut kept = reference.storage_from_vec(vec![0.0; g(4)])?;
            let mut out = reference.storage_from_vec(vec![0.0; bh])?;
            if gates == 4 {
                let mut h = reference.storage_from_vec(vec![0.0; bh])?;
                reference.lstm_cell(
                    shape,
                    LstmCellInputs {
                        xg: R::view(&xg),
                        hg: R::view(&hg),
                        bias_ih: Some(R::view(&bi)),
                        bias_hh: Some(R::view(&bhh)),
                        c_prev: R::view(&state),
                    },
                    LstmCellOutputs {
                        gates: R::view_mut(&mut kept),
                        c: R::view_mut(&mut out),
                        h: R::view_mut(&mut h),
                    },
                )?;
            } else {
                reference.gru_cell(
                    shape,
                    GruCellInputs {
                        xg: R::view(&xg),
                        hg: R::view(&hg),
                        bias_ih: Some(R::view(&bi)),
                        bias_hh: Some(R::view(&bhh)),
                        h_prev: R::view(&state),
                    },
                    GruCellOutputs {
                        gates: R::view_mut(&mut kept),
                        h: R::view_mut(&mut out),
                    },
                )?;
            }
            Ok((R::storage_to_vec(&kept)?, R::storage_to_vec(&out)?))
        };
        // A failing reference forward is caught by the forward cases; here its outputs
        // become NaN inputs.
        run().unwrap_or_else(|_| (vec![f32::NAN; g(4)], vec![f32::NAN; bh]))
    };
    match kernel {
        Kernel::LstmCell => {
            inp.out_len = g(4) + 2 * bh;
            inp.bufs.extend([
                vals(0, g(4)),
                vals(1, g(4)),
                vals(2, 4 * hidden),
                vals(3, 4 * hidden),
                vals(4, bh),
            ]);
        }
        Kernel::LstmCellBackward => {
            inp.out_len = g(4) + bh;
            let c_prev = vals(1, bh);
            let (gates, c) = if from_forward {
                forward(4, c_prev.clone())
            } else {
                (vals(0, g(4)), vals(2, bh))
            };
            inp.bufs
                .extend([gates, c_prev, c, vals(3, bh), vals(4, bh), vals(5, bh)]);
        }
        Kernel::GruCell => {
            inp.out_len = g(4) + bh;
            inp.bufs.extend([
                vals(0, g(3)),
                vals(1, g(3)),
                vals(2, 3 * hidden),
                vals(3, 3 * hidden),
                vals(4, bh),
            ]);
        }
        _ => {
            inp.out_len = 2 * g(3) + bh;
            let h_prev = vals(1, bh);
            let gates = if from_forward {
                forward(3, h_prev.clone()).0
            } else {
                vals(0, g(4))
            };
            inp.bufs.extend([gates, h_prev, vals(2, bh), vals(3, bh)]);
        }
    }
}

/// Runs a recurrent cell kernel on the buffers of [`cell_inputs`], its outputs written
/// one after the other into `out` (in the order of the outputs' fields).
fn run_cell<B: Backend>(
    backend: &B,
    kernel: Kernel,
    shape: CellShape,
    (bias_ih, bias_hh): (bool, bool),
    bf: &[Vec<f32>],
    out: ViewMutOf<'_, B>,
) -> Result<(), exactgrad_core::Error> {
    let bh = shape.batch * shape.hidden;
    let up = |i: usize| upload(backend, &bf[i]);
    match kernel {
        Kernel::LstmCell => {
            let (xg, hg, bi, bhh, c_prev) = (up(0)?, up(1)?, up(2)?, up(3)?, up(4)?);
            let (gates, rest) = B::split_at_mut(B::shorten_mut(out), 4 * bh);
            let (c, h) = B::split_at_mut(rest, bh);
            backend.lstm_cell(
                shape,
                LstmCellInputs {
                    xg: B::view(&xg),
                    hg: B::view(&hg),
                    bias_ih: bias_ih.then_some(B::view(&bi)),
                    bias_hh: bias_hh.then_some(B::view(&bhh)),
                    c_prev: B::view(&c_prev),
                },
                LstmCellOutputs { gates, c, h },
            )
        }
        Kernel::LstmCellBackward => {
            let (gates, c_prev, c) = (up(0)?, up(1)?, up(2)?);
            let (dy, dh_next, dc_next) = (up(3)?, up(4)?, up(5)?);
            let (dgates, dc_prev) = B::split_at_mut(B::shorten_mut(out), 4 * bh);
            backend.lstm_cell_backward(
                shape,
                LstmCellGradInputs {
                    gates: B::view(&gates),
                    c_prev: B::view(&c_prev),
                    c: B::view(&c),
                    dy: B::view(&dy),
                    dh_next: B::view(&dh_next),
                    dc_next: B::view(&dc_next),
                },
                LstmCellGradOutputs { dgates, dc_prev },
            )
        }
        Kernel::GruCell => {
            let (xg, hg, bi, bhh, h_prev) = (up(0)?, up(1)?, up(2)?, up(3)?, up(4)?);
            let (gates, h) = B::split_at_mut(B::shorten_mut(out), 4 * bh);
            backend.gru_cell(
                shape,
                GruCellInputs {
                    xg: B::view(&xg),
                    hg: B::view(&hg),
                    bias_ih: bias_ih.then_some(B::view(&bi)),
                    bias_hh: bias_hh.then_some(B::view(&bhh)),
                    h_prev: B::view(&h_prev),
                },
                GruCellOutputs { gates, h },
            )
        }
        _ => {
            let (gates, h_prev, dy, dh_next) = (up(0)?, up(1)?, up(2)?, up(3)?);
            let (dxg, rest) = B::split_at_mut(B::shorten_mut(out), 3 * bh);
            let (dhg, dh_prev) = B::split_at_mut(rest, 3 * bh);
            backend.gru_cell_backward(
                shape,
                GruCellGradInputs {
                    gates: B::view(&gates),
                    h_prev: B::view(&h_prev),
                    dy: B::view(&dy),
                    dh_next: B::view(&dh_next),
                },
                GruCellGradOutputs { dxg, dhg, dh_prev },
            )
        }
    }
}
