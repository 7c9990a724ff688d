//! The backward rule of one layer and direction: the steps in reverse order, then the
//! weight and input gradients over all rows (`docs/recurrent.md`).

use super::*;

/// The backward rule of [`layer`]: one gradient per recorded input (x, h0, c0 when
/// given, w_ih, w_hh, the biases when given).
pub(super) fn layer_backward<B: Backend>(
    k: &Kept<B>,
    g: &Tensor<B>,
) -> Result<Vec<Option<Tensor<B>>>> {
    let d = k.dims;
    let op = k.cell.layer_name();
    let be = g.backend();
    let (t, bh, gh) = (d.t, d.bh(), d.gh());
    let shape = CellShape {
        batch: d.b,
        hidden: d.h,
    };
    let zeros = |n: usize| zeros_of(be, op, n);
    let gv = values(g)?;
    let y = values(k.out.get()?)?;
    let h0 = values(k.h0.get()?)?;
    let c0 = match &k.c0 {
        Some(c) => values(c.get()?)?,
        None => zeros(bh)?,
    };
    let w_hh = values(k.w_hh.get()?)?;
    // The state before step `tt` (in time order): h0 / c0 for the first processed step.
    let prev = |tt: usize| -> Option<usize> {
        if d.reverse {
            (tt + 1 < t).then_some(tt + 1)
        } else {
            tt.checked_sub(1)
        }
    };
    let mut da = zeros(t * d.b * gh)?;
    let mut dhg_all = zeros(if k.cell == Cell::Gru { t * d.b * gh } else { 0 })?;
    let mut dh_next = zeros(bh)?;
    let mut dc_next = if k.cell == Cell::Lstm {
        let mut c = zeros(bh)?;
        copy(be, part::<B>(&gv, t * bh, bh), B::view_mut(&mut c))?;
        c
    } else {
        zeros(0)?
    };
    let mut dc_prev = zeros(bh)?;
    let mut dh_direct = zeros(bh)?;
    let mut m = zeros(bh)?;
    for s in (0..t).rev() {
        let tt = d.time(s);
        let gates = part::<B>(&k.gates, tt * 4 * bh, 4 * bh);
        let dy = part::<B>(&gv, tt * bh, bh);
        match k.cell {
            Cell::Lstm => {
                let c_prev = match prev(tt) {
                    Some(p) => part::<B>(&k.cs, p * bh, bh),
                    None => B::view(&c0),
                };
                be.lstm_cell_backward(
                    shape,
                    LstmCellGradInputs {
                        gates,
                        c_prev,
                        c: part::<B>(&k.cs, tt * bh, bh),
                        dy,
                        dh_next: B::view(&dh_next),
                        dc_next: B::view(&dc_next),
                    },
                    LstmCellGradOutputs {
                        dgates: part_mut::<B>(&mut da, tt * d.b * gh, d.b * gh),
                        dc_prev: B::view_mut(&mut dc_prev),
                    },
                )?;
                std::mem::swap(&mut dc_next, &mut dc_prev);
                gemm(
                    be,
                    (d.b, gh, d.h),
                    part::<B>(&da, tt * d.b * gh, d.b * gh),
                    [gh, 1],
                    B::view(&w_hh),
                    [d.h, 1],
                    B::view_mut(&mut dh_next),
                )?;
            }
            Cell::Gru => {
                let h_prev = match prev(tt) {
                    Some(p) => part::<B>(&y, p * bh, bh),
                    None => B::view(&h0),
                };
                be.gru_cell_backward(
                    shape,
                    GruCellGradInputs {
                        gates,
                        h_prev,
                        dy,
                        dh_next: B::view(&dh_next),
                    },
                    GruCellGradOutputs {
                        dxg: part_mut::<B>(&mut da, tt * d.b * gh, d.b * gh),
                        dhg: part_mut::<B>(&mut dhg_all, tt * d.b * gh, d.b * gh),
                        dh_prev: B::view_mut(&mut dh_direct),
                    },
                )?;
                let dhg_t = part::<B>(&dhg_all, tt * d.b * gh, d.b * gh);
                let (wv, mv) = (B::view(&w_hh), B::view_mut(&mut m));
                gemm(be, (d.b, gh, d.h), dhg_t, [gh, 1], wv, [d.h, 1], mv)?;
                let l = Layout::contiguous([bh]);
                let (dd, mv) = (B::view(&dh_direct), B::view(&m));
                be.binary(BinaryOp::Add, dd, &l, mv, &l, B::view_mut(&mut dh_next))?;
            }
        }
    }
    let dh_all = if k.cell == Cell::Gru { &dhg_all } else { &da };
    let [need_x, need_h0, need_c0, need_wih, need_whh, need_bih, need_bhh] = k.need;
    let mut grads: Vec<Option<Tensor<B>>> = Vec::new();
    // x: Δ · W_ih.
    grads.push(if need_x {
        let w_ih = values(k.w_ih.get()?)?;
        Some(new_tensor(be, op, Shape::from([t, d.b, d.i]), |dx| {
            let (dv, wv) = (B::view(&da), B::view(&w_ih));
            gemm(be, (t * d.b, gh, d.i), dv, [gh, 1], wv, [d.i, 1], dx)
        })?)
    } else {
        None
    });
    grads.push(if need_h0 {
        Some(Tensor::leaf_from_storage(be, dh_next, [d.b, d.h].into())?)
    } else {
        None
    });
    if k.c0.is_some() {
        grads.push(if need_c0 {
            Some(Tensor::leaf_from_storage(be, dc_next, [d.b, d.h].into())?)
        } else {
            None
        });
    }
    // W_ih: Δᵀ · X over the T·B rows in time order.
    grads.push(if need_wih {
        let xs = values(k.x.get()?)?;
        Some(new_tensor(be, op, Shape::from([gh, d.i]), |dw| {
            let (dv, xv) = (B::view(&da), B::view(&xs));
            gemm(be, (gh, t * d.b, d.i), dv, [1, gh], xv, [d.i, 1], dw)
        })?)
    } else {
        None
    });
    // W_hh: Δ_hᵀ · H_prev, H_prev the state before each step, in time order.
    grads.push(if need_whh {
        let mut h_prev = zeros(t * bh)?;
        let row = Layout::contiguous([bh]);
        for tt in 0..t {
            let src = match prev(tt) {
                Some(p) => part::<B>(&y, p * bh, bh),
                None => B::view(&h0),
            };
            copy_as(be, src, &row, part_mut::<B>(&mut h_prev, tt * bh, bh))?;
        }
        Some(new_tensor(be, op, Shape::from([gh, d.h]), |dw| {
            gemm(
                be,
                (gh, t * d.b, d.h),
                B::view(dh_all),
                [1, gh],
                B::view(&h_prev),
                [d.h, 1],
                dw,
            )
        })?)
    } else {
        None
    });
    // Biases: Σ64 of the rows of Δ (b_ih) and Δ_h (b_hh), in time order.
    let bias_sum = |rows: &B::Storage| -> Result<Tensor<B>> {
        let mut copied = be.uninit(t * d.b * gh)?;
        copy(be, B::view(rows), B::view_mut(&mut copied))?;
        let m = Tensor::leaf_from_storage(be, copied, [t * d.b, gh].into())?;
        sum_unrecorded(&m, &[true, false])
    };
    if k.has_bias[0] {
        grads.push(if need_bih { Some(bias_sum(&da)?) } else { None });
    }
    if k.has_bias[1] {
        grads.push(if need_bhh {
            Some(bias_sum(dh_all)?)
        } else {
            None
        });
    }
    Ok(grads)
}
