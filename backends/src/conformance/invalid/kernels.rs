//! Probes of the core kernels: strided copy, element-wise, select, sums, products and
//! softmax.

use super::*;

pub(super) fn probes<B: Backend>(b: &B) -> exactgrad_core::Result<Vec<Probe<B>>> {
    let data = Arc::new(b.storage_from_vec(vec![1.0f32; 16])?);
    let mut v: Vec<Probe<B>> = Vec::new();
    let mut add = |what: &'static str, f: KernelCall<B>| v.push(Probe { what, run: f });
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "copy_strided: offset past the buffer",
        Box::new(move |out| {
            b1.copy_strided(
                B::view(&d1),
                &layout(&[4], &[1], 14),
                B::slice_mut(out, 0..4),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "copy_strided: stride overflowing usize",
        Box::new(move |out| {
            b1.copy_strided(
                B::view(&d1),
                &layout(&[2, 2], &[usize::MAX / 2 + 1, 1], 0),
                B::slice_mut(out, 0..4),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "copy_strided: offset near usize::MAX",
        Box::new(move |out| {
            b1.copy_strided(
                B::view(&d1),
                &layout(&[2], &[1], usize::MAX - 1),
                B::slice_mut(out, 0..2),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "copy_strided: one stride for two dimensions",
        Box::new(move |out| {
            b1.copy_strided(
                B::view(&d1),
                &layout(&[2, 2], &[1], 0),
                B::slice_mut(out, 0..4),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "copy_strided: output too short",
        Box::new(move |out| {
            b1.copy_strided(
                B::view(&d1),
                &layout(&[4], &[1], 0),
                B::slice_mut(out, 0..3),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "unary: output length",
        Box::new(move |out| {
            let d = B::view(&d1);
            b1.unary(UnaryOp::Exp, B::slice(d, 0..5), B::slice_mut(out, 0..4))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "unary_backward: input lengths",
        Box::new(move |out| {
            let d = B::view(&d1);
            b1.unary_backward(
                UnaryOp::Tanh,
                B::slice(d, 0..4),
                B::slice(d, 0..3),
                B::slice(d, 0..4),
                B::slice_mut(out, 0..4),
            )
        }),
    );
    for op in BinaryOp::ALL {
        let (b1, d1) = (b.clone(), data.clone());
        add(
            "binary: operand layout past the buffer",
            Box::new(move |out| {
                let d = B::view(&d1);
                let la = layout(&[4, 4], &[4, 1], 4);
                let lb = layout(&[4, 4], &[0, 1], 0);
                b1.binary(op, d, &la, d, &lb, B::slice_mut(out, 0..16))
            }),
        );
        let (b1, d1) = (b.clone(), data.clone());
        add(
            "binary: offset wrapping around usize",
            Box::new(move |out| {
                let d = B::view(&d1);
                let la = layout(&[8], &[1], usize::MAX - 3);
                let lb = layout(&[8], &[1], 0);
                b1.binary(op, d, &la, d, &lb, B::slice_mut(out, 0..8))
            }),
        );
        let (b1, d1) = (b.clone(), data.clone());
        add(
            "binary: layouts of different shapes",
            Box::new(move |out| {
                let d = B::view(&d1);
                let la = layout(&[2, 8], &[8, 1], 0);
                let lb = layout(&[8, 2], &[2, 1], 0);
                b1.binary(op, d, &la, d, &lb, B::slice_mut(out, 0..16))
            }),
        );
    }
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "select: condition layout past the buffer",
        Box::new(move |out| {
            let d = B::view(&d1);
            let l = layout(&[4], &[1], 0);
            b1.select(B::slice(d, 0..2), &l, d, &l, d, &l, B::slice_mut(out, 0..4))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "sum: huge stride",
        Box::new(move |out| {
            b1.sum(
                B::view(&d1),
                &layout(&[2, 4], &[1 << 40, 1], 0),
                &[true, false],
                B::slice_mut(out, 0..4),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "sum: element count overflowing usize",
        Box::new(move |out| {
            b1.sum(
                B::view(&d1),
                &layout(&[(1 << 62) + 1, 4], &[0, 1], 0),
                &[true, false],
                B::slice_mut(out, 0..4),
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "sum: flags for another rank",
        Box::new(move |out| {
            b1.sum(
                B::view(&d1),
                &layout(&[4, 4], &[4, 1], 0),
                &[true],
                B::slice_mut(out, 0..4),
            )
        }),
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
            let d = B::view(&d1);
            b1.matmul(&spec, d, d, B::slice_mut(out, 0..16))
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
            let d = B::view(&d1);
            b1.matmul(&spec, d, d, B::slice_mut(out, 0..8))
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
            let d = B::view(&d1);
            b1.matmul(&spec, d, d, B::slice_mut(out, 0..3))
        }),
    );
    // Operands broadcast along k (stride 0) fit any buffer: a reduction beyond
    // `MatmulSpec::MAX_K`, or an operand of more than MAX_ELEMENTS elements, is refused
    // (the CPU driver divided by `k · NR`, which wrapped to 0).
    for (what, k, n) in [
        ("matmul: k = 2^60 broadcast steps", 1usize << 60, 1),
        ("matmul: k = 2^63 broadcast steps", 1 << 63, 1),
        (
            "matmul: k = 2^56 broadcast steps over 128 columns",
            1 << 56,
            128,
        ),
    ] {
        let (b1, d1) = (b.clone(), data.clone());
        add(
            what,
            Box::new(move |out| {
                let spec = MatmulSpec {
                    batch: 1,
                    m: 1,
                    k,
                    n,
                    a_offset: 0,
                    a_strides: [0, 0, 0],
                    b_offset: 0,
                    b_strides: [0, 0, 0],
                };
                let d = B::view(&d1);
                b1.matmul(&spec, d, d, B::slice_mut(out, 0..n))
            }),
        );
    }
    for (what, seg, k) in [
        ("matmul_acc: segment length 0", 0, 4),
        ("matmul_acc: segment length not dividing k", 3, 4),
        ("matmul_acc: operand past its buffer", 2, 40),
    ] {
        let (b1, d1) = (b.clone(), data.clone());
        add(
            what,
            Box::new(move |out| {
                let spec = MatmulSpec {
                    batch: 1,
                    m: 2,
                    k,
                    n: 2,
                    a_offset: 0,
                    a_strides: [0, k, 1],
                    b_offset: 0,
                    b_strides: [0, 2, 1],
                };
                let d = B::view(&d1);
                b1.matmul_acc(&spec, seg, d, d, B::slice_mut(out, 0..4))
            }),
        );
    }
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "softmax: rows × cols overflowing usize",
        Box::new(move |out| {
            b1.softmax(B::view(&d1), usize::MAX, 2, false, B::slice_mut(out, 0..16))
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "softmax: rows × cols past the buffer",
        Box::new(move |out| b1.softmax(B::view(&d1), 4, 8, true, B::slice_mut(out, 0..16))),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "softmax_backward: gradient length",
        Box::new(move |out| {
            let d = B::view(&d1);
            b1.softmax_backward(d, B::slice(d, 0..8), 4, 4, false, B::slice_mut(out, 0..16))
        }),
    );
    training_probes(b, &data, &mut add)?;
    v.extend(cell_probes(b)?);
    Ok(v)
}

// ----- recurrent cells ------------------------------------------------------------------------
