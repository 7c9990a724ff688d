//! A Vulkan compute backend for exactgrad: [`WgpuBackend`] runs the kernels of
//! [`exactgrad_core::BackendImpl`] as WGSL compute shaders through wgpu, on any Vulkan
//! device (Mesa's lavapipe included). Tensors live in device buffers ([`WgpuStorage`]);
//! kernels take views of them and run without a copy to the host, and only explicit
//! reads wait for the device (`docs/gpu.md` §6).
//!
//! Fast mode gives the bits of `FastScalarRefBackend` and exact mode those of
//! `ScalarRefBackend` (NaN equal to any NaN in fast mode). Before a backend is built its
//! device's arithmetic is probed ([`Findings`]); a device that cannot give the bits of
//! the mode asked for is refused with a [`WgpuError`] naming what is missing. The kernels
//! listed in [`DEVICE_KERNELS`] run on the device, every operator of `unary` and
//! `unary_backward` included, the optimizer updates `sgd_step` and `adam_step`, and
//! `im2col` and `col2im` (each image element of `col2im` a sum in the reference's
//! order). Where the device's division, square root or f64 fail the probes (or the
//! environment asks for it: [`SOFT_DIV_SQRT_ENV`], [`INT_F64_ENV`]), the kernels use
//! correctly rounded integer algorithms instead (`docs/gpu.md` §5). The defaulted
//! kernels keep core's reference definitions (the recurrent cells, written with the
//! backend's element-wise kernels, so their steps run on the device), so the backend
//! is complete.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// Calls kernel `method` of the scalar reference of `mode` (`ScalarRefBackend` or
/// `FastScalarRefBackend`) on host slices: the host path of a kernel whose device form
/// needs what this device lacks (f64, 32-bit sizes).
macro_rules! reference {
    ($mode:expr, $method:ident($($arg:expr),* $(,)?)) => {
        match $mode {
            ::exactgrad_core::ComputeMode::Exact => {
                ::exactgrad_backends::ScalarRefBackend.$method($($arg),*)
            }
            ::exactgrad_core::ComputeMode::Fast => {
                ::exactgrad_backends::FastScalarRefBackend.$method($($arg),*)
            }
        }
    };
}

mod attention;
mod device;
mod norm;
mod params;
mod pool;
mod probe;
mod storage;

pub use device::{adapters, AdapterSummary, WgpuError, ADAPTER_ENV, IDLE_BYTES};
pub use probe::{double_rounding_cases, Findings};
pub use storage::{WgpuStorage, WgpuView, WgpuViewMut, WgpuViews};

use device::{BufView, Dispatch, Gpu, Kernel};

/// Invocations per workgroup, as a host size.
const WG: usize = device::WG as usize;
use exactgrad_backends::scalar_ref::split_reduce;
use exactgrad_core::backend::MatmulAccArgs;
use exactgrad_core::backend::{
    AdamStepArgs, BinaryArgs, Checked, CopyStridedArgs, MatmulArgs, SelectArgs, SgdStepArgs,
    SoftmaxArgs, SoftmaxBackwardArgs, SumArgs, UnaryArgs, UnaryBackwardArgs,
};
use exactgrad_core::backend::{
    AdaptiveAvgPool2dArgs, AdaptiveAvgPool2dBackwardArgs, AvgPool2dArgs, AvgPool2dBackwardArgs,
    MaxPool2dArgs, MaxPool2dBackwardArgs,
};
use exactgrad_core::backend::{AttentionScoresArgs, DropoutMaskArgs};
use exactgrad_core::backend::{Col2imArgs, Im2colArgs};
use exactgrad_core::backend::{NormBackwardArgs, NormForwardArgs, NormStatsArgs};
use exactgrad_core::{
    Backend, BackendImpl, ComputeMode, Error, MemoryPool, Result, ViewFamily, ViewLen, MAX_ELEMENTS,
};
use params::{
    chunked, chunks, col2im_params, push_layout, tap_groups, unary_backward_code, unary_code, word,
    LOOP_BUDGET,
};
use std::sync::{Arc, OnceLock};

/// The kernels that run on the device (in both modes); the others run on the host.
/// `sum`, `softmax`, `softmax_backward`, `avg_pool2d` and `adaptive_avg_pool2d` sum in
/// binary64, the device's f64 or the integer one (`docs/gpu.md` §5.2); `sgd_step` and `adam_step` update
/// their parameter and state buffers in place, one invocation per element; `col2im`
/// gathers each image element's sum in the reference's order (a padded size beyond 32
/// bits runs on the host); the pooling backward rules gather each input element's sum
/// in the reference's order; `norm_stats` and `norm_backward` sum in binary64 like
/// `sum`, `norm_forward` does not; `attention_scores`
/// updates the scores in place and `dropout_mask` computes its Philox words on the
/// device (any 64-bit key and start).
pub const DEVICE_KERNELS: &[&str] = &[
    "matmul",
    "matmul_acc",
    "binary",
    "unary",
    "unary_backward",
    "copy_strided",
    "select",
    "sum",
    "softmax",
    "softmax_backward",
    "sgd_step",
    "adam_step",
    "avg_pool2d",
    "avg_pool2d_backward",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool2d_backward",
    "max_pool2d",
    "max_pool2d_backward",
    "norm_stats",
    "norm_forward",
    "norm_backward",
    "im2col",
    "col2im",
    "attention_scores",
    "dropout_mask",
];

/// The environment variable that makes the tests fail, rather than skip, without a
/// Vulkan adapter (set by `.ci/gpu`).
pub const REQUIRE_GPU_ENV: &str = "EXACTGRAD_REQUIRE_GPU";

/// The environment variable that, set to `1`, makes the kernels divide and take square
/// roots with the integer algorithms even where the device's own pass the probes.
pub const SOFT_DIV_SQRT_ENV: &str = "EXACTGRAD_GPU_SOFT_DIV_SQRT";

/// The environment variable that, set to `1`, makes the f64 sums use the integer
/// binary64 even where the device's f64 passes the probes.
pub const INT_F64_ENV: &str = "EXACTGRAD_GPU_INT_F64";

/// The environment variable that, set to `1`, makes `matmul` stage its operands in
/// workgroup memory (8 × 8 output blocks; the same order of operations, so the same
/// bits).
pub const TILED_MATMUL_ENV: &str = "EXACTGRAD_GPU_TILED_MATMUL";

/// The environment variable that chooses how `softmax` takes its row maximum: `1` splits
/// each row across the invocations of a workgroup, `0` takes it with one invocation per
/// row; unset or empty, the adapter decides (split on a GPU, one invocation per row on a
/// CPU adapter such as lavapipe). The same bits either way (`docs/gpu.md` §5.5);
/// [`WgpuBackend::with_split_row_max`] chooses per backend.
pub const SPLIT_ROW_MAX_ENV: &str = "EXACTGRAD_GPU_SPLIT_ROW_MAX";

/// An environment variable with three states: unset or empty is `None`, `0` is
/// `Some(false)`, `1` is `Some(true)`, anything else an error naming it.
fn env_choice(name: &str) -> std::result::Result<Option<bool>, WgpuError> {
    match std::env::var(name) {
        Err(std::env::VarError::NotPresent) => Ok(None),
        Ok(v) if v.is_empty() => Ok(None),
        Ok(v) if v == "0" => Ok(Some(false)),
        Ok(v) if v == "1" => Ok(Some(true)),
        Ok(v) => Err(WgpuError::Setting(format!(
            "{name}={v:?}: expected 1 (on) or 0 (off)"
        ))),
        Err(std::env::VarError::NotUnicode(v)) => Err(WgpuError::Setting(format!(
            "{name}={v:?}: expected 1 (on) or 0 (off)"
        ))),
    }
}

/// An on/off environment variable: unset, empty or `0` is off, `1` is on, anything else
/// an error naming it.
fn env_switch(name: &str) -> std::result::Result<bool, WgpuError> {
    Ok(env_choice(name)?.unwrap_or(false))
}

/// An operation of the integer arithmetic that the portable paths use, evaluated on the
/// device by [`WgpuBackend::eval_portable`] (for tests and device checks). Each takes
/// and returns 32-bit words: f32 bit patterns, or doubles as (low word, high word).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortableOp {
    /// `a / b` by the integer long division (two words in, one out per element).
    SoftDiv,
    /// `sqrt(a)` by the integer square root (one word in, one out).
    SoftSqrt,
    /// The device's own `a / b` (two in, one out).
    DeviceDiv,
    /// The device's own `sqrt(a)` (one in, one out).
    DeviceSqrt,
    /// The integer binary64 `a + b`: `a` as (low, high), `b` as (low, high) (four in,
    /// two out: low, high).
    F64Add,
    /// The exact double product of two f32 values (two in, two out).
    F64MulF32,
    /// The double of an f32 value (one in, two out).
    F64FromF32,
    /// The f32 nearest a double given as (low, high) (two in, one out).
    F64ToF32,
    /// The integer fused multiply-add `a·b + c`, rounded once (three in, one out).
    FmaF32,
}

impl PortableOp {
    /// The probe kernel's code, the words in and the words out per element.
    fn code(self) -> (u32, usize, usize) {
        match self {
            PortableOp::SoftDiv => (0, 2, 1),
            PortableOp::SoftSqrt => (1, 1, 1),
            PortableOp::DeviceDiv => (2, 2, 1),
            PortableOp::DeviceSqrt => (3, 1, 1),
            PortableOp::F64Add => (4, 4, 2),
            PortableOp::F64MulF32 => (5, 2, 2),
            PortableOp::F64FromF32 => (6, 1, 2),
            PortableOp::F64ToF32 => (7, 2, 1),
            PortableOp::FmaF32 => (9, 3, 1),
        }
    }
}

pub(crate) struct Shared {
    pub(crate) gpu: Gpu,
    findings: Findings,
    /// Whether `matmul` uses the tiled kernel ([`TILED_MATMUL_ENV`]).
    tiled_matmul: bool,
    /// Whether `softmax` splits its row maximum across a workgroup by default: as
    /// [`SPLIT_ROW_MAX_ENV`] says, else on every adapter but a CPU one.
    split_row_max: bool,
    /// Whether [`SPLIT_ROW_MAX_ENV`] chose `split_row_max` (not the adapter).
    split_row_max_forced: bool,
}

/// The device, opened and probed once per process.
fn shared() -> std::result::Result<Arc<Shared>, WgpuError> {
    static SHARED: OnceLock<std::result::Result<Arc<Shared>, WgpuError>> = OnceLock::new();
    SHARED
        .get_or_init(|| {
            let over = probe::Overrides {
                soft_div_sqrt: env_switch(SOFT_DIV_SQRT_ENV)?,
                int_f64: env_switch(INT_F64_ENV)?,
            };
            let gpu = Gpu::open()?;
            let findings = probe::run(&gpu, over).map_err(|e| WgpuError::Kernel(e.to_string()))?;
            let tiled_matmul = env_switch(TILED_MATMUL_ENV)?;
            let forced = env_choice(SPLIT_ROW_MAX_ENV)?;
            Ok(Arc::new(Shared {
                split_row_max: forced.unwrap_or(!gpu.cpu),
                split_row_max_forced: forced.is_some(),
                gpu,
                findings,
                tiled_matmul,
            }))
        })
        .clone()
}

/// A compute backend on a Vulkan device (see the crate documentation).
#[derive(Clone)]
pub struct WgpuBackend {
    shared: Arc<Shared>,
    mode: ComputeMode,
    /// Whether `softmax` splits its row maximum across a workgroup
    /// ([`Self::with_split_row_max`]).
    split_row_max: bool,
}

impl std::fmt::Debug for WgpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WgpuBackend")
            .field("adapter", &self.shared.gpu.summary.name)
            .field("mode", &self.mode)
            .field("split_row_max", &self.split_row_max)
            .finish()
    }
}

impl WgpuBackend {
    /// A backend in `mode` on the adapter `EXACTGRAD_WGPU_ADAPTER` names (default: the
    /// first of [`adapters`]); refused when there is no adapter or when the device's
    /// arithmetic cannot give the mode's bits.
    pub fn new(mode: ComputeMode) -> std::result::Result<Self, WgpuError> {
        let shared = shared()?;
        let missing = shared.findings.missing(mode);
        if !missing.is_empty() {
            let msg = format!("{}: needs {}", shared.gpu.summary.name, missing.join(", "));
            return Err(match mode {
                ComputeMode::Exact => WgpuError::ExactUnsupported(msg),
                ComputeMode::Fast => WgpuError::FastUnsupported(msg),
            });
        }
        let split_row_max = shared.split_row_max;
        Ok(Self {
            shared,
            mode,
            split_row_max,
        })
    }

    /// The adapter that [`Self::new`] would use and what the probes measured on it,
    /// whether or not a mode is available there.
    pub fn probe_device() -> std::result::Result<(AdapterSummary, Findings), WgpuError> {
        let s = shared()?;
        Ok((s.gpu.summary.clone(), s.findings.clone()))
    }

    /// [`Self::new`] in fast mode.
    pub fn fast() -> std::result::Result<Self, WgpuError> {
        Self::new(ComputeMode::Fast)
    }

    /// [`Self::new`] in exact mode.
    pub fn exact() -> std::result::Result<Self, WgpuError> {
        Self::new(ComputeMode::Exact)
    }

    /// The adapter this backend runs on.
    pub fn adapter(&self) -> &AdapterSummary {
        &self.shared.gpu.summary
    }

    /// What the probes measured on the device.
    pub fn findings(&self) -> &Findings {
        &self.shared.findings
    }

    /// The device's buffer pool counters (`docs/gpu.md` §6.1): `native_allocations` is
    /// the number of device buffers created so far, every other request having reused one.
    pub fn pool_stats(&self) -> exactgrad_core::PoolStats {
        self.shared.gpu.pool.stats()
    }

    /// Whether `matmul` uses the tiled kernel (set by [`TILED_MATMUL_ENV`]).
    pub fn tiled_matmul(&self) -> bool {
        self.shared.tiled_matmul
    }

    /// Whether `softmax` splits each row's maximum across the invocations of a workgroup
    /// (`true`) or takes it with one invocation per row (`false`): by default as
    /// [`SPLIT_ROW_MAX_ENV`] says, else split on a GPU and one invocation per row on a CPU
    /// adapter such as lavapipe. The same bits either way (`docs/gpu.md` §5.5).
    pub fn split_row_max(&self) -> bool {
        self.split_row_max
    }

    /// This backend with `softmax`'s row maximum split across a workgroup (`true`) or one
    /// invocation per row (`false`), whatever the adapter and [`SPLIT_ROW_MAX_ENV`] say
    /// (for tests and measurements; clones made from it keep the choice).
    pub fn with_split_row_max(mut self, split: bool) -> Self {
        self.split_row_max = split;
        self
    }

    /// Which row maximum `softmax` uses by default on the device and why, in words (as
    /// the `probe_device` example prints it).
    pub fn row_max_path() -> std::result::Result<String, WgpuError> {
        let s = shared()?;
        let path = if s.split_row_max {
            "split across a workgroup"
        } else {
            "one invocation per row"
        };
        let why = if s.split_row_max_forced {
            format!("{SPLIT_ROW_MAX_ENV}={}", u8::from(s.split_row_max))
        } else if s.gpu.cpu {
            "a CPU adapter".to_string()
        } else {
            "not a CPU adapter".to_string()
        };
        Ok(format!("{path} ({why})"))
    }

    /// Whether the kernels with f64 sums (`sum`, `softmax`, `softmax_backward`, the
    /// average poolings' forward, `norm_stats`, `norm_backward`) run on the device: with
    /// its own f64 where that gave the host's bits, else with the integer binary64
    /// ([`Findings::sums_on_device`]).
    pub fn f64_on_device(&self) -> bool {
        self.shared.findings.sums_on_device()
    }

    /// Evaluates `op` of the portable paths' integer arithmetic on the device for each
    /// element: `args` holds the operands' words, one slice per operand of `op` (all of
    /// one length); the result holds one or two words per element ([`PortableOp`]).
    pub fn eval_portable(&self, op: PortableOp, args: &[&[u32]]) -> Result<Vec<u32>> {
        let (code, ins, outs) = op.code();
        if args.len() != ins {
            return Err(Error::invalid(
                "eval_portable",
                "args",
                format!("{op:?} takes {ins} operands, got {}", args.len()),
            ));
        }
        let n = args[0].len();
        if args.iter().any(|a| a.len() != n) {
            return Err(Error::invalid(
                "eval_portable",
                "args",
                "the operands differ in length",
            ));
        }
        let zeros = vec![0u32; n];
        let mut bound: Vec<&[u32]> = args.to_vec();
        bound.resize(4, &zeros);
        self.portable_call(code, 0, n, outs, &bound)
    }

    /// The integer square root of the `n` consecutive bit patterns from `start` (wrapping
    /// past `0xffffffff`), computed on the device without uploading them: the exhaustive
    /// check of all 2^32 inputs runs this in blocks.
    pub fn soft_sqrt_range(&self, start: u32, n: usize) -> Result<Vec<u32>> {
        let none: &[u32] = &[0];
        self.portable_call(8, start, n, 1, &[none, none, none, none])
    }

    fn portable_call(
        &self,
        code: u32,
        start: u32,
        n: usize,
        outs: usize,
        args: &[&[u32]],
    ) -> Result<Vec<u32>> {
        if n > u32::MAX as usize {
            return Err(Error::invalid(
                "eval_portable",
                "args",
                "more than 2^32 - 1 elements",
            ));
        }
        let mut out = vec![0u32; n * outs];
        self.shared.gpu.run(
            Kernel::Portable,
            false,
            &[Dispatch::new(vec![0, n as u32, code, start], n)],
            args,
            0,
            &mut out,
        )?;
        Ok(out)
    }

    fn is_exact(&self) -> bool {
        self.mode == ComputeMode::Exact
    }

    /// One dispatch of `kernel` over `threads` invocations.
    fn run(
        &self,
        kernel: Kernel,
        params: Vec<u32>,
        inputs: &[WgpuView<'_>],
        out: WgpuViewMut<'_>,
        threads: usize,
    ) -> Result<()> {
        self.run_all(kernel, &[Dispatch::new(params, threads)], inputs, 0, out)
    }

    /// Several dispatches of `kernel` on shared buffers (`scratch` words of scratch).
    fn run_all(
        &self,
        kernel: Kernel,
        dispatches: &[Dispatch],
        inputs: &[WgpuView<'_>],
        scratch: usize,
        out: WgpuViewMut<'_>,
    ) -> Result<()> {
        let views: Vec<BufView<'_>> = inputs.iter().map(WgpuView::buf_view).collect();
        self.shared.gpu.dispatch(
            kernel,
            self.is_exact(),
            dispatches,
            &views,
            scratch,
            &[out.buf_view()],
        )
    }

    /// One dispatch of `kernel` over `threads` invocations with several outputs (bound
    /// in order after the inputs; the kernel may read them: updates in place).
    fn run_outs(
        &self,
        kernel: Kernel,
        params: Vec<u32>,
        inputs: &[WgpuView<'_>],
        outs: &[WgpuViewMut<'_>],
        threads: usize,
    ) -> Result<()> {
        let views: Vec<BufView<'_>> = inputs.iter().map(WgpuView::buf_view).collect();
        let outs: Vec<BufView<'_>> = outs.iter().map(WgpuViewMut::buf_view).collect();
        self.shared.gpu.dispatch(
            kernel,
            self.is_exact(),
            &[Dispatch::new(params, threads)],
            &views,
            0,
            &outs,
        )
    }
}

/// Runs the reference kernel of the backend's mode on host copies: the views `inputs`
/// downloaded, `out` downloaded and written back (the kernels that need f64, on a device
/// without it). The kernel's arguments are the inputs, then `args`, then the output.
macro_rules! on_host {
    ($self:ident, [$($v:ident),*], $out:ident, $method:ident($($arg:expr),*)) => {{
        $(let $v = WgpuViews::to_host($v)?;)*
        WgpuViews::with_host_mut($out, |o| {
            reference!($self.mode, $method($(&$v,)* $($arg,)* o))
        })?
    }};
}

mod backend_impl;
