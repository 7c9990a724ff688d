//! Invalid arguments: every kernel must refuse buffers and layouts that do not agree
//! (with an error, never a panic, never a read or write outside its buffers).
//!
//! [`check_invalid_arguments`] calls each kernel with hand-built arguments a caller could
//! pass through the safe API: output buffers of the wrong length, layouts whose offset
//! or strides reach past the buffer (also by overflowing `usize`), strides that do not
//! match the rank, mismatched broadcast shapes, `rows × cols` that overflows, and
//! product specs whose operands do not fit their buffers. Each call runs under
//! `catch_unwind`; it passes when the kernel returns an error.

use exactgrad_core::backend::MatmulSpec;
use exactgrad_core::recurrent::{
    CellShape, GruCellGradInputs, GruCellGradOutputs, GruCellInputs, GruCellOutputs,
    LstmCellGradInputs, LstmCellGradOutputs, LstmCellInputs, LstmCellOutputs,
};
use exactgrad_core::{Backend, BinaryOp, Layout, Shape, UnaryOp};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::string::String;
use std::vec;
use std::vec::Vec;

/// A call of one kernel on a given output buffer.
type KernelCall = Box<dyn Fn(&mut [f32]) -> Result<(), exactgrad_core::Error>>;

/// One invalid call that must be refused.
struct Probe {
    what: &'static str,
    run: KernelCall,
}

fn layout(shape: &[usize], strides: &[usize], offset: usize) -> Layout {
    Layout {
        shape: Shape::from(shape),
        strides: strides.to_vec(),
        offset,
    }
}

fn probes<B: Backend>(b: &B) -> Vec<Probe> {
    let data = vec![1.0f32; 16];
    let mut v: Vec<Probe> = Vec::new();
    let mut add =
        |what: &'static str, f: Box<dyn Fn(&mut [f32]) -> _>| v.push(Probe { what, run: f });
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "copy_strided: offset past the buffer",
        Box::new(move |out| b1.copy_strided(&d1, &layout(&[4], &[1], 14), &mut out[..4])),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "copy_strided: stride overflowing usize",
        Box::new(move |out| {
            b1.copy_strided(
                &d1,
                &layout(&[2, 2], &[usize::MAX / 2 + 1, 1], 0),
                &mut out[..4],
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "copy_strided: offset near usize::MAX",
        Box::new(move |out| {
            b1.copy_strided(&d1, &layout(&[2], &[1], usize::MAX - 1), &mut out[..2])
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "copy_strided: one stride for two dimensions",
        Box::new(move |out| b1.copy_strided(&d1, &layout(&[2, 2], &[1], 0), &mut out[..4])),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "copy_strided: output too short",
        Box::new(move |out| b1.copy_strided(&d1, &layout(&[4], &[1], 0), &mut out[..3])),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "unary: output length",
        Box::new(move |out| b1.unary(UnaryOp::Exp, &d1[..5], &mut out[..4])),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "unary_backward: input lengths",
        Box::new(move |out| {
            b1.unary_backward(UnaryOp::Tanh, &d1[..4], &d1[..3], &d1[..4], &mut out[..4])
        }),
    );
    for op in BinaryOp::ALL {
        let (b1, d1) = (b.clone(), data.clone());
        add(
            "binary: operand layout past the buffer",
            Box::new(move |out| {
                let la = layout(&[4, 4], &[4, 1], 4);
                let lb = layout(&[4, 4], &[0, 1], 0);
                b1.binary(op, &d1, &la, &d1, &lb, &mut out[..16])
            }),
        );
        let (b1, d1) = (b.clone(), data.clone());
        add(
            "binary: offset wrapping around usize",
            Box::new(move |out| {
                let la = layout(&[8], &[1], usize::MAX - 3);
                let lb = layout(&[8], &[1], 0);
                b1.binary(op, &d1, &la, &d1, &lb, &mut out[..8])
            }),
        );
        let (b1, d1) = (b.clone(), data.clone());
        add(
            "binary: layouts of different shapes",
            Box::new(move |out| {
                let la = layout(&[2, 8], &[8, 1], 0);
                let lb = layout(&[8, 2], &[2, 1], 0);
                b1.binary(op, &d1, &la, &d1, &lb, &mut out[..16])
            }),
        );
    }
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "select: condition layout past the buffer",
        Box::new(move |out| {
            let l = layout(&[4], &[1], 0);
            b1.select(&d1[..2], &l, &d1, &l, &d1, &l, &mut out[..4])
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "sum: huge stride",
        Box::new(move |out| {
            b1.sum(
                &d1,
                &layout(&[2, 4], &[1 << 40, 1], 0),
                &[true, false],
                &mut out[..4],
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "sum: element count overflowing usize",
        Box::new(move |out| {
            b1.sum(
                &d1,
                &layout(&[(1 << 62) + 1, 4], &[0, 1], 0),
                &[true, false],
                &mut out[..4],
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "sum: flags for another rank",
        Box::new(move |out| b1.sum(&d1, &layout(&[4, 4], &[4, 1], 0), &[true], &mut out[..4])),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "matmul: operand past its buffer",
        Box::new(move |out| {
            let spec = MatmulSpec {
                batch: 1,
                m: 4,
                k: 4,
                n: 4,
                a_offset: 1,
                a_strides: [0, 4, 1],
                b_offset: 0,
                b_strides: [0, 4, 1],
            };
            b1.matmul(&spec, &d1, &d1, &mut out[..16])
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "matmul: batch stride overflowing usize",
        Box::new(move |out| {
            let spec = MatmulSpec {
                batch: 2,
                m: 2,
                k: 2,
                n: 2,
                a_offset: 0,
                a_strides: [usize::MAX, 2, 1],
                b_offset: 0,
                b_strides: [0, 2, 1],
            };
            b1.matmul(&spec, &d1, &d1, &mut out[..8])
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "matmul: output length",
        Box::new(move |out| {
            let spec = MatmulSpec {
                batch: 1,
                m: 2,
                k: 2,
                n: 2,
                a_offset: 0,
                a_strides: [0, 2, 1],
                b_offset: 0,
                b_strides: [0, 2, 1],
            };
            b1.matmul(&spec, &d1, &d1, &mut out[..3])
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "softmax: rows × cols overflowing usize",
        Box::new(move |out| b1.softmax(&d1, usize::MAX, 2, false, &mut out[..16])),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "softmax: rows × cols past the buffer",
        Box::new(move |out| b1.softmax(&d1, 4, 8, true, &mut out[..16])),
    );
    let (b1, d1) = (b.clone(), data);
    add(
        "softmax_backward: gradient length",
        Box::new(move |out| b1.softmax_backward(&d1, &d1[..8], 4, 4, false, &mut out[..16])),
    );
    v.extend(cell_probes(b));
    v
}

// ----- recurrent cells ------------------------------------------------------------------------

/// Invalid calls of the recurrent cell kernels: buffers shorter or longer than the
/// [`CellShape`] says, a bias of the wrong length, `batch × hidden` overflowing `usize`.
fn cell_probes<B: Backend>(b: &B) -> Vec<Probe> {
    let mut v: Vec<Probe> = Vec::new();
    let mut add =
        |what: &'static str, f: Box<dyn Fn(&mut [f32]) -> _>| v.push(Probe { what, run: f });
    let s = CellShape {
        batch: 2,
        hidden: 2,
    };
    let d = vec![0.5f32; 16];
    let b1 = b.clone();
    add(
        "lstm_cell: xg shorter than batch × 4·hidden",
        Box::new(move |out| {
            let (gates, rest) = out.split_at_mut(16);
            let (c, h) = rest.split_at_mut(4);
            b1.lstm_cell(
                s,
                LstmCellInputs {
                    xg: &d[..15],
                    hg: &d,
                    bias_ih: None,
                    bias_hh: None,
                    c_prev: &d[..4],
                },
                LstmCellOutputs {
                    gates,
                    c,
                    h: &mut h[..4],
                },
            )
        }),
    );
    let (b1, d) = (b.clone(), vec![0.5f32; 16]);
    add(
        "lstm_cell: bias of the wrong length",
        Box::new(move |out| {
            let (gates, rest) = out.split_at_mut(16);
            let (c, h) = rest.split_at_mut(4);
            b1.lstm_cell(
                s,
                LstmCellInputs {
                    xg: &d,
                    hg: &d,
                    bias_ih: Some(&d[..7]),
                    bias_hh: None,
                    c_prev: &d[..4],
                },
                LstmCellOutputs {
                    gates,
                    c,
                    h: &mut h[..4],
                },
            )
        }),
    );
    let (b1, d) = (b.clone(), vec![0.5f32; 16]);
    add(
        "lstm_cell: batch × hidden overflowing usize",
        Box::new(move |out| {
            let (gates, rest) = out.split_at_mut(16);
            let (c, h) = rest.split_at_mut(4);
            b1.lstm_cell(
                CellShape {
                    batch: usize::MAX / 2,
                    hidden: 4,
                },
                LstmCellInputs {
                    xg: &d,
                    hg: &d,
                    bias_ih: None,
                    bias_hh: None,
                    c_prev: &d[..4],
                },
                LstmCellOutputs {
                    gates,
                    c,
                    h: &mut h[..4],
                },
            )
        }),
    );
    let (b1, d) = (b.clone(), vec![0.5f32; 16]);
    add(
        "lstm_cell_backward: dc_prev too long",
        Box::new(move |out| {
            let (dgates, dc_prev) = out.split_at_mut(16);
            b1.lstm_cell_backward(
                s,
                LstmCellGradInputs {
                    gates: &d,
                    c_prev: &d[..4],
                    c: &d[..4],
                    dy: &d[..4],
                    dh_next: &d[..4],
                    dc_next: &d[..4],
                },
                LstmCellGradOutputs {
                    dgates,
                    dc_prev: &mut dc_prev[..5],
                },
            )
        }),
    );
    let (b1, d) = (b.clone(), vec![0.5f32; 16]);
    add(
        "gru_cell: gates holding 3·hidden per row instead of 4·hidden",
        Box::new(move |out| {
            let (gates, h) = out.split_at_mut(12);
            b1.gru_cell(
                s,
                GruCellInputs {
                    xg: &d[..12],
                    hg: &d[..12],
                    bias_ih: None,
                    bias_hh: Some(&d[..6]),
                    h_prev: &d[..4],
                },
                GruCellOutputs {
                    gates,
                    h: &mut h[..4],
                },
            )
        }),
    );
    let (b1, d) = (b.clone(), vec![0.5f32; 16]);
    add(
        "gru_cell_backward: h_prev shorter than batch × hidden",
        Box::new(move |out| {
            let (dxg, rest) = out.split_at_mut(12);
            let (dhg, dh_prev) = rest.split_at_mut(12);
            b1.gru_cell_backward(
                s,
                GruCellGradInputs {
                    gates: &d,
                    h_prev: &d[..3],
                    dy: &d[..4],
                    dh_next: &d[..4],
                },
                GruCellGradOutputs {
                    dxg,
                    dhg,
                    dh_prev: &mut dh_prev[..4],
                },
            )
        }),
    );
    v
}

/// Runs every invalid call on `backend`; returns how many were refused, or a message
/// naming the first call that was accepted or panicked.
pub fn check_invalid_arguments<B: Backend>(backend: &B) -> Result<usize, String> {
    let all = probes(backend);
    for p in &all {
        let mut out = vec![0.0f32; 64];
        match catch_unwind(AssertUnwindSafe(|| (p.run)(&mut out))) {
            Ok(Err(_)) => {}
            Ok(Ok(())) => {
                return Err(format!(
                    "backend {} accepted invalid arguments: {}",
                    backend.name(),
                    p.what
                ))
            }
            Err(_) => {
                return Err(format!(
                    "backend {} panicked on invalid arguments instead of returning an error: {}",
                    backend.name(),
                    p.what
                ))
            }
        }
    }
    Ok(all.len())
}

impl core::fmt::Debug for Probe {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.what)
    }
}
