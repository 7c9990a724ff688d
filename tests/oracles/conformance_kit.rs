//! The conformance kit, used from outside the backends crate as a downstream crate would:
//! a backend defined here (the scalar reference wrapped so that it counts its kernel
//! calls and the unary operators it sees) passes the whole suite, every kernel is
//! exercised and every operator of the unary table runs with each of its samples, forward
//! and backward; a deliberately broken backend (exp off by one ulp) is caught and the
//! report names kernel, backend, shape and the first differing element with its bits.

use exactgrad::backends::conformance::{self, Config, Kernel, Mismatch};
use exactgrad::backends::ScalarRefBackend;
use exactgrad::core::backend::{
    BinaryArgs, Checked, CopyStridedArgs, GruCellArgs, GruCellBackwardArgs, LstmCellArgs,
    LstmCellBackwardArgs, MatmulArgs, SelectArgs, SoftmaxArgs, SoftmaxBackwardArgs, SumArgs,
    UnaryArgs, UnaryBackwardArgs,
};
use exactgrad::core::{Backend, BackendImpl, ComputeMode, Result, UnaryOp};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The scalar reference with a call counter per kernel (indexed like `Kernel::ALL`) and
/// the set of unary operators (`kernel: op`) it was called with.
#[derive(Clone, Debug)]
struct Counting {
    calls: Arc<[AtomicUsize]>,
    ops: Arc<Mutex<BTreeSet<String>>>,
}

impl Default for Counting {
    fn default() -> Self {
        Self {
            calls: Kernel::ALL.iter().map(|_| AtomicUsize::new(0)).collect(),
            ops: Arc::default(),
        }
    }
}

impl Counting {
    fn hit(&self, k: Kernel) {
        let i = Kernel::ALL.iter().position(|&x| x == k).unwrap();
        self.calls[i].fetch_add(1, Ordering::Relaxed);
    }

    fn saw(&self, k: Kernel, op: UnaryOp) {
        self.ops.lock().unwrap().insert(format!("{k}: {op:?}"));
    }

    fn has_seen(&self, k: Kernel, op: UnaryOp) -> bool {
        self.ops.lock().unwrap().contains(&format!("{k}: {op:?}"))
    }

    fn count(&self, k: Kernel) -> usize {
        let i = Kernel::ALL.iter().position(|&x| x == k).unwrap();
        self.calls[i].load(Ordering::Relaxed)
    }
}

impl BackendImpl for Counting {
    type Storage = Vec<f32>;
    exactgrad::core::host_views!();

    fn name(&self) -> String {
        "counting-scalar-ref".into()
    }
    fn mode(&self) -> ComputeMode {
        ComputeMode::Exact
    }
    fn zeros(&self, len: usize) -> Result<Vec<f32>> {
        BackendImpl::zeros(&ScalarRefBackend, len)
    }
    fn storage_from_vec(&self, data: Vec<f32>) -> Result<Vec<f32>> {
        Ok(data)
    }
    fn copy_strided_impl(&self, args: Checked<CopyStridedArgs<'_>>) -> Result<()> {
        self.hit(Kernel::CopyStrided);
        ScalarRefBackend.copy_strided_impl(args)
    }
    fn unary_impl(&self, args: Checked<UnaryArgs<'_>>) -> Result<()> {
        self.hit(Kernel::Unary);
        self.saw(Kernel::Unary, args.op);
        ScalarRefBackend.unary_impl(args)
    }
    fn unary_backward_impl(&self, args: Checked<UnaryBackwardArgs<'_>>) -> Result<()> {
        self.hit(Kernel::UnaryBackward);
        self.saw(Kernel::UnaryBackward, args.op);
        ScalarRefBackend.unary_backward_impl(args)
    }
    fn binary_impl(&self, args: Checked<BinaryArgs<'_>>) -> Result<()> {
        self.hit(Kernel::Binary);
        ScalarRefBackend.binary_impl(args)
    }
    fn select_impl(&self, args: Checked<SelectArgs<'_>>) -> Result<()> {
        self.hit(Kernel::Select);
        ScalarRefBackend.select_impl(args)
    }
    fn sum_impl(&self, args: Checked<SumArgs<'_>>) -> Result<()> {
        self.hit(Kernel::Sum);
        ScalarRefBackend.sum_impl(args)
    }
    fn matmul_impl(&self, args: Checked<MatmulArgs<'_>>) -> Result<()> {
        self.hit(Kernel::Matmul);
        ScalarRefBackend.matmul_impl(args)
    }
    fn softmax_impl(&self, args: Checked<SoftmaxArgs<'_>>) -> Result<()> {
        self.hit(Kernel::Softmax);
        ScalarRefBackend.softmax_impl(args)
    }
    fn softmax_backward_impl(&self, args: Checked<SoftmaxBackwardArgs<'_>>) -> Result<()> {
        self.hit(Kernel::SoftmaxBackward);
        ScalarRefBackend.softmax_backward_impl(args)
    }
    fn lstm_cell_impl(&self, args: Checked<LstmCellArgs<'_>>) -> Result<()> {
        self.hit(Kernel::LstmCell);
        ScalarRefBackend.lstm_cell_impl(args)
    }
    fn lstm_cell_backward_impl(&self, args: Checked<LstmCellBackwardArgs<'_>>) -> Result<()> {
        self.hit(Kernel::LstmCellBackward);
        ScalarRefBackend.lstm_cell_backward_impl(args)
    }
    fn gru_cell_impl(&self, args: Checked<GruCellArgs<'_>>) -> Result<()> {
        self.hit(Kernel::GruCell);
        ScalarRefBackend.gru_cell_impl(args)
    }
    fn gru_cell_backward_impl(&self, args: Checked<GruCellBackwardArgs<'_>>) -> Result<()> {
        self.hit(Kernel::GruCellBackward);
        ScalarRefBackend.gru_cell_backward_impl(args)
    }
}

/// The scalar reference, except that `exp` of a positive finite result is one ulp high.
#[derive(Clone, Copy, Debug, Default)]
struct ExpOffByOneUlp;

impl BackendImpl for ExpOffByOneUlp {
    type Storage = Vec<f32>;
    exactgrad::core::host_views!();

    fn name(&self) -> String {
        "exp-off-by-one-ulp".into()
    }
    fn mode(&self) -> ComputeMode {
        ComputeMode::Exact
    }
    fn zeros(&self, len: usize) -> Result<Vec<f32>> {
        BackendImpl::zeros(&ScalarRefBackend, len)
    }
    fn storage_from_vec(&self, data: Vec<f32>) -> Result<Vec<f32>> {
        Ok(data)
    }
    fn copy_strided_impl(&self, args: Checked<CopyStridedArgs<'_>>) -> Result<()> {
        ScalarRefBackend.copy_strided_impl(args)
    }
    fn unary_impl(&self, args: Checked<UnaryArgs<'_>>) -> Result<()> {
        let UnaryArgs { op, x, out } = args.into_inner();
        ScalarRefBackend.unary(op, x, out)?;
        if op == UnaryOp::Exp {
            for v in out.iter_mut().filter(|v| v.is_finite() && **v > 0.0) {
                *v = f32::from_bits(v.to_bits() + 1);
            }
        }
        Ok(())
    }
    fn unary_backward_impl(&self, args: Checked<UnaryBackwardArgs<'_>>) -> Result<()> {
        ScalarRefBackend.unary_backward_impl(args)
    }
    fn binary_impl(&self, args: Checked<BinaryArgs<'_>>) -> Result<()> {
        ScalarRefBackend.binary_impl(args)
    }
    fn select_impl(&self, args: Checked<SelectArgs<'_>>) -> Result<()> {
        ScalarRefBackend.select_impl(args)
    }
    fn sum_impl(&self, args: Checked<SumArgs<'_>>) -> Result<()> {
        ScalarRefBackend.sum_impl(args)
    }
    fn matmul_impl(&self, args: Checked<MatmulArgs<'_>>) -> Result<()> {
        ScalarRefBackend.matmul_impl(args)
    }
    fn softmax_impl(&self, args: Checked<SoftmaxArgs<'_>>) -> Result<()> {
        ScalarRefBackend.softmax_impl(args)
    }
    fn softmax_backward_impl(&self, args: Checked<SoftmaxBackwardArgs<'_>>) -> Result<()> {
        ScalarRefBackend.softmax_backward_impl(args)
    }
}

/// The kernels the counting wrapper overrides.
const OVERRIDDEN: [Kernel; 9] = [
    Kernel::CopyStrided,
    Kernel::Unary,
    Kernel::UnaryBackward,
    Kernel::Binary,
    Kernel::Select,
    Kernel::Sum,
    Kernel::Matmul,
    Kernel::Softmax,
    Kernel::SoftmaxBackward,
];

fn config() -> Config {
    if cfg!(debug_assertions) {
        Config::quick()
    } else {
        Config::default()
    }
}

#[test]
fn a_conforming_backend_passes_and_every_kernel_is_exercised() {
    let backend = Counting::default();
    let report = conformance::check_backend(&backend, &ScalarRefBackend, &config())
        .unwrap_or_else(|m| panic!("{m}"));
    println!("{report}");
    for (kernel, cases) in &report.cases {
        assert!(*cases > 0, "no case of {kernel}");
        // The wrapper counts the kernels it overrides; the training kernels run the
        // trait's default bodies (the reference definitions) unchanged.
        if OVERRIDDEN.contains(kernel) {
            assert!(
                backend.count(*kernel) >= *cases,
                "{kernel}: {} calls for {cases} cases",
                backend.count(*kernel)
            );
        }
    }
    assert_eq!(report.cases.len(), Kernel::ALL.len());
}

#[test]
fn every_operator_of_the_table_is_run_with_every_sample() {
    let backend = Counting::default();
    for kernel in [Kernel::Unary, Kernel::UnaryBackward] {
        conformance::check_kernel(&backend, &ScalarRefBackend, kernel, &Config::quick())
            .unwrap_or_else(|m| panic!("{m}"));
        for &op in UnaryOp::SAMPLES {
            assert!(backend.has_seen(kernel, op), "{kernel} never ran {op:?}");
        }
    }
    // Every named operator has samples, and the kit's list is the table's.
    for name in UnaryOp::NAMES {
        assert!(
            UnaryOp::SAMPLES.iter().any(|op| op.name() == *name),
            "no sample of {name}"
        );
    }
    // (Compared as text: the samples include NaN parameters.)
    let text = |ops: &[UnaryOp]| ops.iter().map(|op| format!("{op:?}")).collect::<Vec<_>>();
    assert_eq!(text(&conformance::unary_ops()), text(UnaryOp::SAMPLES));
}

#[test]
fn a_broken_backend_is_caught_with_kernel_shape_and_element() {
    let err: Box<Mismatch> =
        conformance::check_backend(&ExpOffByOneUlp, &ScalarRefBackend, &config())
            .expect_err("the kit must catch an exp that is one ulp off");
    let msg = err.to_string();
    println!("{msg}");
    assert_eq!(err.kernel, "unary(Exp)");
    assert_eq!(err.backend, "exp-off-by-one-ulp");
    assert_eq!(err.reference, "scalar-ref");
    let (got, want) = (err.got.unwrap(), err.want.unwrap());
    assert_eq!(got.to_bits(), want.to_bits() + 1);
    assert!(msg.contains(&format!("0x{:08X}", got.to_bits())), "{msg}");
    assert!(msg.contains(&format!("element {}", err.index)), "{msg}");
    assert!(msg.contains("shape ["), "{msg}");
    // The mismatch reproduces from its case alone.
    assert!(conformance::check_case(&ExpOffByOneUlp, &ScalarRefBackend, &err.case).is_err());
    // The other kernels of the broken backend still pass.
    for k in Kernel::ALL.into_iter().filter(|&k| k != Kernel::Unary) {
        conformance::check_kernel(&ExpOffByOneUlp, &ScalarRefBackend, k, &Config::quick())
            .unwrap_or_else(|m| panic!("{m}"));
    }
}

#[test]
fn the_generated_tests_panic_on_a_broken_backend() {
    let r = std::panic::catch_unwind(|| {
        conformance::assert_conforms(&ExpOffByOneUlp, &ScalarRefBackend, &Config::quick())
    });
    let payload = r.expect_err("assert_conforms must panic");
    let msg = payload
        .downcast_ref::<String>()
        .expect("a formatted message");
    assert!(
        msg.contains("unary(Exp)") && msg.contains("exp-off-by-one-ulp"),
        "{msg}"
    );
}

// The macro form: one #[test] per kernel.
exactgrad::backends::conformance_tests!(
    counting_backend_conforms,
    Counting::default(),
    ScalarRefBackend,
    Config::quick()
);
