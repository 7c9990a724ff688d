//! Probes of the recurrent cell kernels (LSTM and GRU, forward and backward).

use super::*;

/// Invalid calls of the recurrent cell kernels: buffers shorter or longer than the
/// [`CellShape`] says, a bias of the wrong length, `batch × hidden` overflowing `usize`.
pub(super) fn cell_probes<B: Backend>(b: &B) -> exactgrad_core::Result<Vec<Probe<B>>> {
    let mut v: Vec<Probe<B>> = Vec::new();
    let mut add = |what: &'static str, f: KernelCall<B>| v.push(Probe { what, run: f });
    let s = CellShape {
        batch: 2,
        hidden: 2,
    };
    let data = Arc::new(b.storage_from_vec(vec![0.5f32; 16])?);
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "lstm_cell: xg shorter than batch × 4·hidden",
        Box::new(move |out| {
            let d = B::view(&d1);
            let (gates, rest) = B::split_at_mut(B::shorten_mut(out), 16);
            let (c, h) = B::split_at_mut(rest, 4);
            b1.lstm_cell(
                s,
                LstmCellInputs {
                    xg: B::slice(d, 0..15),
                    hg: d,
                    bias_ih: None,
                    bias_hh: None,
                    c_prev: B::slice(d, 0..4),
                },
                LstmCellOutputs {
                    gates,
                    c,
                    h: B::slice_mut(h, 0..4),
                },
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "lstm_cell: bias of the wrong length",
        Box::new(move |out| {
            let d = B::view(&d1);
            let (gates, rest) = B::split_at_mut(B::shorten_mut(out), 16);
            let (c, h) = B::split_at_mut(rest, 4);
            b1.lstm_cell(
                s,
                LstmCellInputs {
                    xg: d,
                    hg: d,
                    bias_ih: Some(B::slice(d, 0..7)),
                    bias_hh: None,
                    c_prev: B::slice(d, 0..4),
                },
                LstmCellOutputs {
                    gates,
                    c,
                    h: B::slice_mut(h, 0..4),
                },
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "lstm_cell: batch × hidden overflowing usize",
        Box::new(move |out| {
            let d = B::view(&d1);
            let (gates, rest) = B::split_at_mut(B::shorten_mut(out), 16);
            let (c, h) = B::split_at_mut(rest, 4);
            b1.lstm_cell(
                CellShape {
                    batch: usize::MAX / 2,
                    hidden: 4,
                },
                LstmCellInputs {
                    xg: d,
                    hg: d,
                    bias_ih: None,
                    bias_hh: None,
                    c_prev: B::slice(d, 0..4),
                },
                LstmCellOutputs {
                    gates,
                    c,
                    h: B::slice_mut(h, 0..4),
                },
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "lstm_cell_backward: dc_prev too long",
        Box::new(move |out| {
            let d = B::view(&d1);
            let (dgates, dc_prev) = B::split_at_mut(B::shorten_mut(out), 16);
            b1.lstm_cell_backward(
                s,
                LstmCellGradInputs {
                    gates: d,
                    c_prev: B::slice(d, 0..4),
                    c: B::slice(d, 0..4),
                    dy: B::slice(d, 0..4),
                    dh_next: B::slice(d, 0..4),
                    dc_next: B::slice(d, 0..4),
                },
                LstmCellGradOutputs {
                    dgates,
                    dc_prev: B::slice_mut(dc_prev, 0..5),
                },
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "gru_cell: gates holding 3·hidden per row instead of 4·hidden",
        Box::new(move |out| {
            let d = B::view(&d1);
            let (gates, h) = B::split_at_mut(B::shorten_mut(out), 12);
            b1.gru_cell(
                s,
                GruCellInputs {
                    xg: B::slice(d, 0..12),
                    hg: B::slice(d, 0..12),
                    bias_ih: None,
                    bias_hh: Some(B::slice(d, 0..6)),
                    h_prev: B::slice(d, 0..4),
                },
                GruCellOutputs {
                    gates,
                    h: B::slice_mut(h, 0..4),
                },
            )
        }),
    );
    let (b1, d1) = (b.clone(), data.clone());
    add(
        "gru_cell_backward: h_prev shorter than batch × hidden",
        Box::new(move |out| {
            let d = B::view(&d1);
            let (dxg, rest) = B::split_at_mut(B::shorten_mut(out), 12);
            let (dhg, dh_prev) = B::split_at_mut(rest, 12);
            b1.gru_cell_backward(
                s,
                GruCellGradInputs {
                    gates: d,
                    h_prev: B::slice(d, 0..3),
                    dy: B::slice(d, 0..4),
                    dh_next: B::slice(d, 0..4),
                },
                GruCellGradOutputs {
                    dxg,
                    dhg,
                    dh_prev: B::slice_mut(dh_prev, 0..4),
                },
            )
        }),
    );
    Ok(v)
}
