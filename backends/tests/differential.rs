//! The differential suite of the CPU backends, through the conformance kit: every path of
//! `ExactBackend` against `ScalarRefBackend` bit for bit, and every path of `FastBackend`
//! (the FMA paths, and the scalar path, which on a CPU without FMA computes each fused
//! multiply-add in software) against `FastScalarRefBackend` (bits, any NaN equal to any
//! NaN), each at 1, 2, 3 and 8 threads, for every kernel of the `Backend` trait: the
//! promises of `docs/arithmetic.md` §1 and §6.
//!
//! Two drivers: the kit's own seeded suite (`suite_*`: random cases plus every unary op
//! and every subset of summed dimensions), and proptest strategies (`prop_*`) that build
//! the kit's cases from shrinkable parts. A path this CPU lacks is reported as skipped.

use exactgrad_backends::conformance::{
    self, check_case_on, check_kernel_on, unary_ops, Call, Case, Config, Kernel, Operand, Specials,
    View, BINARY_OPS, LANE_WIDTHS,
};
use exactgrad_backends::cpu::{CpuBackend, Isa};
use exactgrad_backends::lane::{Exact, Fast};
use exactgrad_backends::{FastScalarRefBackend, ScalarRefBackend};
use exactgrad_core::{Backend, ComputeMode};
use proptest::prelude::*;
use std::sync::OnceLock;

const THREADS: [usize; 4] = [1, 2, 3, 8];

/// Every supported path at every thread count; unsupported paths are printed as skipped.
fn backends<M>(mode: ComputeMode) -> Vec<CpuBackend<M>>
where
    CpuBackend<M>: Backend,
    M: exactgrad_backends::scalar::ModeSpec,
{
    let mut v = Vec::new();
    for isa in Isa::ALL {
        if !isa.is_supported(mode) {
            println!("skipped: the {isa} path in {mode} mode is not supported by this CPU");
            continue;
        }
        for t in THREADS {
            v.push(CpuBackend::<M>::with_isa(isa, t).expect("supported path"));
        }
    }
    v
}

fn exact() -> &'static [CpuBackend<Exact>] {
    static B: OnceLock<Vec<CpuBackend<Exact>>> = OnceLock::new();
    B.get_or_init(|| backends::<Exact>(ComputeMode::Exact))
}

fn fast() -> &'static [CpuBackend<Fast>] {
    static B: OnceLock<Vec<CpuBackend<Fast>>> = OnceLock::new();
    B.get_or_init(|| backends::<Fast>(ComputeMode::Fast))
}

fn config() -> Config {
    if cfg!(debug_assertions) {
        Config::quick()
    } else {
        Config::default()
    }
}

/// Runs the kit's suite of `kernel` in both modes.
fn suite(kernel: Kernel) {
    let cfg = config();
    let n =
        check_kernel_on(exact(), &ScalarRefBackend, kernel, &cfg).unwrap_or_else(|m| panic!("{m}"));
    check_kernel_on(fast(), &FastScalarRefBackend, kernel, &cfg).unwrap_or_else(|m| panic!("{m}"));
    println!(
        "{kernel}: {n} cases on {} exact and {} fast backends",
        exact().len(),
        fast().len()
    );
}

#[test]
fn suite_copy_strided() {
    suite(Kernel::CopyStrided)
}
#[test]
fn suite_unary() {
    suite(Kernel::Unary)
}
#[test]
fn suite_unary_backward() {
    suite(Kernel::UnaryBackward)
}
#[test]
fn suite_binary() {
    suite(Kernel::Binary)
}
#[test]
fn suite_select() {
    suite(Kernel::Select)
}
#[test]
fn suite_sum() {
    suite(Kernel::Sum)
}
#[test]
fn suite_matmul() {
    suite(Kernel::Matmul)
}
#[test]
fn suite_matmul_acc() {
    suite(Kernel::MatmulAcc)
}
#[test]
fn suite_softmax() {
    suite(Kernel::Softmax)
}
#[test]
fn suite_softmax_backward() {
    suite(Kernel::SoftmaxBackward)
}

// The recurrent cells.
#[test]
fn suite_lstm_cell() {
    suite(Kernel::LstmCell)
}
#[test]
fn suite_lstm_cell_backward() {
    suite(Kernel::LstmCellBackward)
}
#[test]
fn suite_gru_cell() {
    suite(Kernel::GruCell)
}
#[test]
fn suite_gru_cell_backward() {
    suite(Kernel::GruCellBackward)
}

#[test]
fn suite_norm_stats() {
    suite(Kernel::NormStats)
}

#[test]
fn suite_norm_forward() {
    suite(Kernel::NormForward)
}

#[test]
fn suite_norm_backward() {
    suite(Kernel::NormBackward)
}

#[test]
fn suite_max_pool2d() {
    suite(Kernel::MaxPool2d)
}

#[test]
fn suite_max_pool2d_backward() {
    suite(Kernel::MaxPool2dBackward)
}

#[test]
fn suite_avg_pool2d() {
    suite(Kernel::AvgPool2d)
}

#[test]
fn suite_avg_pool2d_backward() {
    suite(Kernel::AvgPool2dBackward)
}

#[test]
fn suite_adaptive_avg_pool2d() {
    suite(Kernel::AdaptiveAvgPool2d)
}

#[test]
fn suite_adaptive_avg_pool2d_backward() {
    suite(Kernel::AdaptiveAvgPool2dBackward)
}

#[test]
fn suite_im2col() {
    suite(Kernel::Im2col)
}

#[test]
fn suite_col2im() {
    suite(Kernel::Col2im)
}

#[test]
fn suite_depthwise_conv() {
    suite(Kernel::DepthwiseConv)
}

#[test]
fn suite_depthwise_grad_input() {
    suite(Kernel::DepthwiseGradInput)
}

#[test]
fn suite_depthwise_grad_weight() {
    suite(Kernel::DepthwiseGradWeight)
}

#[test]
fn suite_attention_scores() {
    suite(Kernel::AttentionScores)
}

#[test]
fn suite_dropout_mask() {
    suite(Kernel::DropoutMask)
}

#[test]
fn suite_sgd_step() {
    suite(Kernel::SgdStep)
}

#[test]
fn suite_adam_step() {
    suite(Kernel::AdamStep)
}

/// Checks `case` on every backend of both modes.
fn check(case: &Case) -> Result<(), TestCaseError> {
    check_case_on(exact(), &ScalarRefBackend, case)
        .map_err(|m| TestCaseError::fail(m.to_string()))?;
    check_case_on(fast(), &FastScalarRefBackend, case)
        .map_err(|m| TestCaseError::fail(m.to_string()))
}

// ---- proptest strategies building the kit's cases -------------------------------------

/// A dimension length: 0, 1, one off a lane width, or anything up to 150.
fn len() -> impl Strategy<Value = usize> {
    prop_oneof![
        1 => Just(0usize),
        3 => Just(1usize),
        7 => (0..LANE_WIDTHS.len(), 0usize..3).prop_map(|(i, d)| LANE_WIDTHS[i] + d - 1),
        9 => 1usize..=150,
    ]
}

/// A shape of rank 0 to 4 with at most `max` elements (the largest dimensions halved).
fn shape(max: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(len(), 0..=4).prop_map(move |mut s| {
        while s.iter().product::<usize>() > max {
            let i = (0..s.len()).max_by_key(|&i| s[i]).unwrap();
            s[i] /= 2;
        }
        s
    })
}

/// A random view of `shape`.
fn view_of(shape: Vec<usize>) -> impl Strategy<Value = View> {
    let r = shape.len();
    (
        Just((0..r).collect::<Vec<_>>()).prop_shuffle(),
        prop::collection::vec(prop_oneof![3 => Just(1usize), 1 => Just(2usize)], r),
        prop::collection::vec(prop::bool::weighted(0.15), r),
        0usize..6,
        0usize..3,
    )
        .prop_map(move |(order, step, expand, offset, pad)| View {
            shape: shape.clone(),
            order,
            step,
            expand,
            offset,
            pad,
        })
}

fn view(max: usize) -> impl Strategy<Value = View> {
    shape(max).prop_flat_map(view_of)
}

/// An operand broadcast to `out`: leading dimensions dropped, some dimensions 1.
fn operand(out: Vec<usize>) -> impl Strategy<Value = Operand> {
    let r = out.len();
    (0..=r, prop::collection::vec(prop::bool::weighted(0.25), r)).prop_flat_map(
        move |(lead, ones)| {
            let own: Vec<usize> = (lead..r)
                .map(|d| if ones[d] { 1 } else { out[d] })
                .collect();
            view_of(own).prop_map(|view| Operand { view })
        },
    )
}

fn specials() -> impl Strategy<Value = Specials> {
    prop::sample::select(Specials::ALL.to_vec())
}

fn case(call: impl Strategy<Value = Call>) -> impl Strategy<Value = Case> {
    (call, any::<u64>(), specials()).prop_map(|(call, seed, specials)| Case {
        call,
        seed,
        specials,
    })
}

const MAX: usize = 1 << 13;

fn unary_op() -> impl Strategy<Value = exactgrad_core::UnaryOp> {
    prop::sample::select(unary_ops())
}

fn cases() -> u32 {
    if cfg!(debug_assertions) {
        8
    } else {
        128
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn prop_copy_strided(c in case(view(MAX).prop_map(|src| Call::CopyStrided { src }))) {
        check(&c)?;
    }

    #[test]
    fn prop_unary(c in case((unary_op(), 0usize..=300).prop_map(|(op, len)| Call::Unary { op, len }))) {
        check(&c)?;
    }

    #[test]
    fn prop_unary_backward(c in case((unary_op(), 0usize..=300, any::<bool>())
        .prop_map(|(op, len, y_from_forward)| Call::UnaryBackward { op, len, y_from_forward }))) {
        check(&c)?;
    }

    #[test]
    fn prop_binary(c in case(shape(MAX).prop_flat_map(|s| (
        prop::sample::select(BINARY_OPS.to_vec()), operand(s.clone()), operand(s.clone()), Just(s),
    )).prop_map(|(op, a, b, shape)| Call::Binary { op, shape, a, b }))) {
        check(&c)?;
    }

    #[test]
    fn prop_select(c in case(shape(MAX).prop_flat_map(|s| (
        operand(s.clone()), operand(s.clone()), operand(s.clone()), Just(s),
    )).prop_map(|(cond, a, b, shape)| Call::Select { shape, cond, a, b }))) {
        check(&c)?;
    }

    #[test]
    fn prop_sum(c in case(view(MAX).prop_flat_map(|x| {
        let r = x.shape.len();
        (Just(x), prop::collection::vec(any::<bool>(), r))
    }).prop_map(|(x, reduce)| Call::Sum { x, reduce }))) {
        check(&c)?;
    }

    #[test]
    fn prop_matmul(c in case((1usize..=3, len(), len(), len(), any::<[bool; 4]>(), 0usize..4, 0usize..4)
        .prop_map(|(batch, m, k, n, f, oa, ob)| {
            let (mut m, mut k, mut n) = (m, k, n);
            while batch * m * k * n > 1 << 18 {
                if m >= k && m >= n { m /= 2 } else if k >= n { k /= 2 } else { n /= 2 }
            }
            Call::Matmul { batch, m, k, n, a_trans: f[0], b_trans: f[1], a_bcast: f[2], b_bcast: f[3], offsets: (oa, ob), seg: 0 }
        }))) {
        check(&c)?;
    }

    #[test]
    fn prop_matmul_acc(c in case((1usize..=3, len(), 1usize..=64, len(), any::<[bool; 4]>(), 0usize..4, 0usize..4, 1usize..=8)
        .prop_map(|(batch, m, seg, n, f, oa, ob, segments)| {
            let (mut m, mut n) = (m, n);
            while batch * m * seg * segments * n > 1 << 18 {
                if m >= n { m /= 2 } else { n /= 2 }
            }
            Call::Matmul { batch, m, k: seg * segments, n, a_trans: f[0], b_trans: f[1], a_bcast: f[2], b_bcast: f[3], offsets: (oa, ob), seg }
        }))) {
        check(&c)?;
    }

    #[test]
    fn prop_softmax(c in case((len(), len(), any::<bool>())
        .prop_map(|(rows, cols, log)| Call::Softmax { rows, cols, log }))) {
        check(&c)?;
    }

    #[test]
    fn prop_softmax_backward(c in case((len(), len(), any::<bool>(), any::<bool>())
        .prop_map(|(rows, cols, log, y_from_forward)| Call::SoftmaxBackward { rows, cols, log, y_from_forward }))) {
        check(&c)?;
    }
}

/// Shapes that split into several parallel chunks, so that 1, 3 and 8 threads really
/// divide the work differently (the random suites rarely reach them).
#[test]
fn large_shapes_split_across_threads() {
    let seed = 7;
    let calls = [
        Call::Unary {
            op: exactgrad_core::UnaryOp::GeluTanh,
            len: 70_001,
        },
        Call::Softmax {
            rows: 301,
            cols: 257,
            log: false,
        },
        Call::Softmax {
            rows: 129,
            cols: 1000,
            log: true,
        },
        Call::SoftmaxBackward {
            rows: 300,
            cols: 129,
            log: false,
            y_from_forward: true,
        },
        Call::SoftmaxBackward {
            rows: 77,
            cols: 513,
            log: true,
            y_from_forward: true,
        },
        Call::Sum {
            x: View::contiguous(&[300, 257]),
            reduce: vec![false, true],
        },
        Call::Sum {
            x: View::contiguous(&[300, 257]),
            reduce: vec![true, false],
        },
        Call::Sum {
            x: View::contiguous(&[40, 30, 70]),
            reduce: vec![true, false, true],
        },
        Call::Sum {
            x: View::contiguous(&[70_000]),
            reduce: vec![true],
        },
        Call::CopyStrided {
            src: View {
                order: vec![1, 0],
                ..View::contiguous(&[300, 257])
            },
        },
        Call::Select {
            shape: vec![200, 300],
            cond: Operand {
                view: View::contiguous(&[200, 1]),
            },
            a: Operand {
                view: View::contiguous(&[300]),
            },
            b: Operand {
                view: View::contiguous(&[200, 300]),
            },
        },
    ];
    for call in calls {
        for specials in [Specials::None, Specials::Rare] {
            check(&Case {
                call: call.clone(),
                seed,
                specials,
            })
            .unwrap_or_else(|e| panic!("{e}"));
        }
    }
    let _ = conformance::first_difference;
}
