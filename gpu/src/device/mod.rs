//! The Vulkan device: adapter choice, the compiled kernels and one blocking call (upload,
//! dispatch, read back). Every wgpu error becomes an [`exactgrad_core::Error`] or a
//! [`WgpuError`]; none is a panic.

use exactgrad_core::{Error, Result};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};

/// Invocations per workgroup of every kernel.
pub(crate) const WG: u32 = 64;

/// The environment variable that picks an adapter other than the default: its index in
/// the list [`adapters`] returns, or a part of its name (case-insensitive).
pub const ADAPTER_ENV: &str = "EXACTGRAD_WGPU_ADAPTER";

/// Why a [`crate::WgpuBackend`] could not be built (more reasons may come: match with a
/// wildcard arm).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum WgpuError {
    /// No Vulkan adapter was found (no driver, no device), or none matched
    /// `EXACTGRAD_WGPU_ADAPTER`.
    NoAdapter(String),
    /// The adapter refused to open a device.
    Device(String),
    /// Exact mode was asked for on a device that cannot give its bits; the message names
    /// what is missing.
    ExactUnsupported(String),
    /// The device's arithmetic failed a check that fast mode needs as well.
    FastUnsupported(String),
    /// A kernel or probe failed on the device while the backend was being built.
    Kernel(String),
    /// An environment variable of the backend holds a value it does not accept.
    Setting(String),
}

impl fmt::Display for WgpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WgpuError::NoAdapter(m) => write!(f, "no Vulkan adapter: {m}"),
            WgpuError::Device(m) => write!(f, "the Vulkan device could not be opened: {m}"),
            WgpuError::ExactUnsupported(m) => {
                write!(f, "exact mode is not available on this device: {m}")
            }
            WgpuError::FastUnsupported(m) => {
                write!(f, "fast mode is not available on this device: {m}")
            }
            WgpuError::Kernel(m) => write!(f, "a kernel failed on the device: {m}"),
            WgpuError::Setting(m) => write!(f, "invalid setting: {m}"),
        }
    }
}

impl std::error::Error for WgpuError {}

/// `?` on a [`WgpuError`] in a function returning `exactgrad::Result`: the facade's one
/// error type carries it as [`exactgrad_autograd::Error::Backend`] (backend `wgpu`), from
/// which `downcast_ref::<WgpuError>()` on its source recovers it.
impl From<WgpuError> for exactgrad_autograd::Error {
    fn from(e: WgpuError) -> Self {
        exactgrad_autograd::Error::Backend {
            backend: "wgpu",
            source: Box::new(e),
        }
    }
}

/// One adapter as the Vulkan driver reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdapterSummary {
    /// Position in the deterministic order of [`adapters`].
    pub index: usize,
    /// The device name (`llvmpipe (LLVM …)` for lavapipe).
    pub name: String,
    /// Discrete, integrated, virtual, CPU or other.
    pub device_type: String,
    /// The driver's name and version.
    pub driver: String,
    /// Whether the device offers f64 in shaders (`shaderFloat64`).
    pub shader_f64: bool,
}

/// The Vulkan adapters in the order the backend chooses from: discrete GPUs first, then
/// integrated, virtual, CPU and other devices, by name within a kind, ties in the
/// driver's order.
pub fn adapters() -> Vec<AdapterSummary> {
    ordered_adapters(&instance())
        .iter()
        .enumerate()
        .map(|(index, a)| summary(index, a))
        .collect()
}

fn instance() -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = wgpu::Backends::VULKAN;
    desc.flags = wgpu::InstanceFlags::empty();
    wgpu::Instance::new(desc)
}

fn kind_rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    }
}

fn ordered_adapters(instance: &wgpu::Instance) -> Vec<wgpu::Adapter> {
    let mut list: Vec<(usize, wgpu::Adapter)> =
        pollster::block_on(instance.enumerate_adapters(wgpu::Backends::VULKAN))
            .into_iter()
            .enumerate()
            .collect();
    list.sort_by(|(i, a), (j, b)| {
        let (ia, ib) = (a.get_info(), b.get_info());
        (kind_rank(ia.device_type), ia.name, *i).cmp(&(kind_rank(ib.device_type), ib.name, *j))
    });
    list.into_iter().map(|(_, a)| a).collect()
}

fn summary(index: usize, a: &wgpu::Adapter) -> AdapterSummary {
    let info = a.get_info();
    AdapterSummary {
        index,
        name: info.name,
        device_type: format!("{:?}", info.device_type),
        driver: format!("{} {}", info.driver, info.driver_info),
        shader_f64: a.features().contains(wgpu::Features::SHADER_F64),
    }
}

/// The compute kernels, each one WGSL module with entry point `main`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Kernel {
    Copy,
    Select,
    Binary,
    Unary,
    UnaryBackward,
    Matmul,
    MatmulTiled,
    Sum,
    /// `softmax`, its row maximum with one invocation per row.
    Softmax,
    /// `softmax`, its row maximum split across a workgroup.
    SoftmaxSplit,
    SoftmaxBackward,
    SgdStep,
    AdamStep,
    Accumulate,
    Im2col,
    Col2im,
    AvgPool,
    PoolBackward,
    MaxPool,
    MaxPoolBackward,
    NormStats,
    NormForward,
    NormBackward,
    NormParamGrad,
    AttentionScores,
    DropoutMask,
    Probe,
    /// The integer arithmetic of the portable paths on its own (tests, device checks).
    Portable,
}

impl Kernel {
    fn source(self) -> &'static str {
        match self {
            Kernel::Copy => include_str!("../shaders/copy.wgsl"),
            Kernel::Select => include_str!("../shaders/select.wgsl"),
            Kernel::Binary => include_str!("../shaders/binary.wgsl"),
            Kernel::Unary => include_str!("../shaders/unary.wgsl"),
            Kernel::UnaryBackward => include_str!("../shaders/unary_backward.wgsl"),
            Kernel::Matmul => include_str!("../shaders/matmul.wgsl"),
            Kernel::MatmulTiled => include_str!("../shaders/matmul_tiled.wgsl"),
            Kernel::Sum => include_str!("../shaders/sum.wgsl"),
            Kernel::Softmax => concat!(
                include_str!("../shaders/softmax.wgsl"),
                include_str!("../shaders/softmax_rows.wgsl")
            ),
            Kernel::SoftmaxSplit => concat!(
                include_str!("../shaders/softmax.wgsl"),
                include_str!("../shaders/softmax_split.wgsl")
            ),
            Kernel::SoftmaxBackward => include_str!("../shaders/softmax_backward.wgsl"),
            Kernel::SgdStep => include_str!("../shaders/sgd.wgsl"),
            Kernel::AdamStep => include_str!("../shaders/adam.wgsl"),
            Kernel::Accumulate => include_str!("../shaders/accumulate.wgsl"),
            Kernel::Im2col => include_str!("../shaders/im2col.wgsl"),
            Kernel::Col2im => include_str!("../shaders/col2im.wgsl"),
            Kernel::AvgPool => include_str!("../shaders/avg_pool.wgsl"),
            Kernel::PoolBackward => include_str!("../shaders/pool_backward.wgsl"),
            Kernel::MaxPool => include_str!("../shaders/max_pool.wgsl"),
            Kernel::MaxPoolBackward => include_str!("../shaders/max_pool_backward.wgsl"),
            Kernel::NormStats => include_str!("../shaders/norm_stats.wgsl"),
            Kernel::NormForward => include_str!("../shaders/norm_forward.wgsl"),
            Kernel::NormBackward => include_str!("../shaders/norm_backward.wgsl"),
            Kernel::NormParamGrad => include_str!("../shaders/norm_param_grad.wgsl"),
            Kernel::AttentionScores => include_str!("../shaders/attention_scores.wgsl"),
            Kernel::DropoutMask => include_str!("../shaders/dropout.wgsl"),
            Kernel::Probe => include_str!("../shaders/probe.wgsl"),
            Kernel::Portable => include_str!("../shaders/portable_check.wgsl"),
        }
    }

    /// Whether the kernel accumulates the f64 sums of rule 3 (`F64`, `d_add`, …).
    pub(crate) fn needs_sums(self) -> bool {
        matches!(
            self,
            Kernel::Sum
                | Kernel::Softmax
                | Kernel::SoftmaxSplit
                | Kernel::SoftmaxBackward
                | Kernel::AvgPool
                | Kernel::NormStats
                | Kernel::NormBackward
                | Kernel::NormParamGrad
        )
    }

    fn needs_pow(self) -> bool {
        matches!(self, Kernel::Unary | Kernel::UnaryBackward)
    }

    fn needs_transcendentals(self) -> bool {
        matches!(
            self,
            Kernel::Unary
                | Kernel::UnaryBackward
                | Kernel::Softmax
                | Kernel::SoftmaxSplit
                | Kernel::SoftmaxBackward
        )
    }

    fn needs_fma(self) -> bool {
        self == Kernel::Matmul
            || self == Kernel::MatmulTiled
            || self == Kernel::Probe
            || self.needs_transcendentals()
    }
}

/// An open device, its queue and the pipelines compiled so far (per kernel and mode).
pub(crate) struct Gpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    pub(crate) summary: AdapterSummary,
    /// Whether the adapter is a CPU device (`DeviceType::Cpu`, such as lavapipe): its
    /// workgroups run on one CPU thread each.
    pub(crate) cpu: bool,
    max_binding: u64,
    lost: Arc<AtomicBool>,
    /// Whether the device's own `fma` is correctly rounded (set by the probes before any
    /// kernel but the probe is compiled).
    pub(crate) fma_native: AtomicBool,
    /// Whether the kernels divide and take square roots with the integer algorithms of
    /// `shaders/portable.wgsl` (set by the probes, like `fma_native`).
    pub(crate) soft_div_sqrt: AtomicBool,
    /// Whether the f64 sums use the integer binary64 of `shaders/f64_int.wgsl` (set by
    /// the probes).
    pub(crate) int_f64: AtomicBool,
    pipelines: Mutex<HashMap<(Kernel, bool), Arc<wgpu::ComputePipeline>>>,
    /// The buffers of tensors and of device calls, recycled (`buffers.rs`).
    pub(crate) pool: BufferPool,
    /// Held by one call from upload to read-back: the device has one queue, and a call's
    /// error scopes and mapping callback must not be taken by another thread's poll.
    calls: Mutex<()>,
}

impl fmt::Debug for Gpu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gpu")
            .field("adapter", &self.summary)
            .finish()
    }
}

/// What a device call reads: a slice of 32-bit words.
pub(crate) type Words<'a> = &'a [u32];

/// One dispatch of a kernel: its parameter words (binding 0) and its invocations.
pub(crate) struct Dispatch {
    pub(crate) params: Vec<u32>,
    pub(crate) threads: usize,
}

impl Dispatch {
    pub(crate) fn new(params: Vec<u32>, threads: usize) -> Self {
        Self { params, threads }
    }
}

mod buffers;
mod gpu;

pub use buffers::IDLE_BYTES;
pub(crate) use buffers::{BufferPool, Lease, Use};

/// Words `start .. start + len` of a device buffer that holds `cap` words.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BufView<'a> {
    pub(crate) buf: &'a wgpu::Buffer,
    pub(crate) start: usize,
    pub(crate) len: usize,
    pub(crate) cap: usize,
}

impl<'a> BufView<'a> {
    /// All `cap` words of `buf`.
    pub(crate) fn whole(buf: &'a wgpu::Buffer, cap: usize) -> Self {
        Self {
            buf,
            start: 0,
            len: cap,
            cap,
        }
    }

    /// Whether the view is its whole buffer (bound directly, without a copy).
    fn is_whole(&self) -> bool {
        self.start == 0 && self.len == self.cap && self.cap > 0
    }
}

fn words_as_bytes(w: &[u32]) -> &[u8] {
    bytemuck::cast_slice(w)
}

/// The error every failure of the device (lost, refused, invalid) becomes.
pub(crate) fn device_error(msg: impl Into<String>) -> Error {
    Error::invalid("wgpu", "device", msg)
}

fn log_uncaptured(e: &wgpu::Error) {
    eprintln!("exactgrad-wgpu: uncaptured device error: {e}");
}
