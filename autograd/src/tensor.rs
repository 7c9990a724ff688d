//! `Tensor<B>`: a strided view over shared, versioned storage, with autograd metadata.
//!
//! Invariant: the layout of every tensor has been checked against its storage when the
//! tensor was made ([`Layout::check_within`]: an element count of at most
//! [`exactgrad_core::MAX_ELEMENTS`], every index inside the buffer, in checked
//! arithmetic), so the index arithmetic of the operators cannot overflow or leave the
//! buffer.

use crate::engine::Node;
use crate::error::{Error, Result};
use crate::grad_mode::is_grad_enabled;
use crate::scope::{self, Release};
use exactgrad_core::shape::normalize_dim;
use exactgrad_core::{Backend, Layout, Philox, Shape, ViewMutOf, ViewOf};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard, Weak};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A process-unique id for records.
pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Shared storage with a version counter that every in-place change increments. The
/// buffer is `None` once it has been released (its memory returned); every access to a
/// released storage is an [`Error::Released`].
pub(crate) struct StorageCell<B: Backend> {
    data: RwLock<Option<B::Storage>>,
    /// Number of elements of the buffer (fixed for the cell's life).
    len: usize,
    version: AtomicU64,
    /// The [`ActivationScope`](crate::ActivationScope) that releases this storage when
    /// it ends (0: none).
    scope: AtomicU64,
}

impl<B: Backend> StorageCell<B> {
    fn new(data: B::Storage) -> Self {
        Self {
            len: B::storage_len(&data),
            data: RwLock::new(Some(data)),
            version: AtomicU64::new(0),
            scope: AtomicU64::new(0),
        }
    }
}

impl<B: Backend> Release for StorageCell<B> {
    fn release_from(&self, scope: u64) -> usize {
        if self.scope.load(Ordering::Acquire) != scope {
            return 0;
        }
        let taken = self.data.write().unwrap_or_else(|e| e.into_inner()).take();
        // The buffer returns to the backend here, after the lock is released.
        taken.map_or(0, |d| B::storage_len(&d))
    }
}

/// Read access to a tensor's storage (the whole buffer, not only the tensor's view).
pub(crate) struct StorageRead<'a, B: Backend>(RwLockReadGuard<'a, Option<B::Storage>>);

impl<B: Backend> StorageRead<'_, B> {
    /// A view of the whole buffer.
    pub(crate) fn as_ref(&self) -> ViewOf<'_, B> {
        match &*self.0 {
            Some(s) => B::view(s),
            // `Tensor::read` hands out a guard only over a present buffer.
            None => unreachable!("a read guard over a released storage"),
        }
    }
}

/// Write access to a tensor's storage.
pub(crate) struct StorageWrite<'a, B: Backend>(RwLockWriteGuard<'a, Option<B::Storage>>);

impl<B: Backend> StorageWrite<'_, B> {
    /// An exclusive view of the whole buffer.
    pub(crate) fn as_mut(&mut self) -> ViewMutOf<'_, B> {
        match &mut *self.0 {
            Some(s) => B::view_mut(s),
            // `Tensor::write` hands out a guard only over a present buffer.
            None => unreachable!("a write guard over a released storage"),
        }
    }
}

pub(crate) struct TensorImpl<B: Backend> {
    pub(crate) backend: B,
    pub(crate) storage: Arc<StorageCell<B>>,
    pub(crate) layout: Layout,
    /// Shared by every clone of the tensor, so that marking one marks them all.
    pub(crate) requires_grad: AtomicBool,
    pub(crate) grad_fn: Option<Arc<Node<B>>>,
    pub(crate) grad: Mutex<Option<Tensor<B>>>,
    /// The backward pass accumulating into this leaf's gradient right now (0: none);
    /// see [`crate::engine`] on concurrent backward passes.
    pub(crate) accumulating: AtomicU64,
    /// What an operation trace knows of these elements (their digest and the record that
    /// wrote them); touched only while a trace is recording ([`crate::trace`]).
    pub(crate) trace: Mutex<Option<crate::trace::Tag>>,
}

/// An n-dimensional array of f32 on backend `B`, with the autograd metadata needed to
/// differentiate through it.
///
/// Cloning a tensor is cheap and shares everything (storage, gradient, record). Views
/// (reshape, transpose, narrow, expand, …) share storage without copying.
///
/// A `Tensor` is `Send` and `Sync`: it may be read from several threads, and operators
/// may run on different threads at once. A leaf's gradient accepts one backward pass at
/// a time: a backward that would accumulate into a leaf while another thread's backward
/// is accumulating into it fails with [`Error::ConcurrentBackward`] before doing any
/// work (see `docs/threads.md`).
pub struct Tensor<B: Backend> {
    pub(crate) inner: Arc<TensorImpl<B>>,
}

impl<B: Backend> Clone for Tensor<B> {
    fn clone(&self) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
        }
    }
}

/// A tensor is a list of one: lets [`crate::hash_tensors`] take borrowed and owned tensors.
impl<B: Backend> AsRef<Tensor<B>> for Tensor<B> {
    fn as_ref(&self) -> &Tensor<B> {
        self
    }
}

impl<B: Backend> fmt::Debug for Tensor<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Tensor");
        d.field("shape", &self.shape())
            .field("backend", &self.inner.backend.name());
        if self.numel() <= 16 {
            match self.to_vec() {
                Ok(v) => d.field("data", &v),
                Err(_) => d.field("data", &"<released>"),
            };
        }
        if let Some(n) = &self.inner.grad_fn {
            d.field("grad_fn", &n.name);
        } else if self.is_requires_grad() {
            d.field("requires_grad", &true);
        }
        d.finish()
    }
}

impl<B: Backend> Tensor<B> {
    // ----- construction ------------------------------------------------------------

    /// An operator's result: a tensor of `shape` over a new buffer (which must hold the
    /// shape's elements), remembered by the open [`ActivationScope`](crate::ActivationScope)
    /// of this thread, if any (see [`crate::scope`]).
    pub(crate) fn from_storage(backend: &B, storage: B::Storage, shape: Shape) -> Result<Self> {
        let t = Self::leaf_from_storage(backend, storage, shape)?;
        if scope::is_remembering() {
            let cell: Weak<dyn Release> = Arc::downgrade(&t.inner.storage) as _;
            let id = scope::remember(cell);
            t.inner.storage.scope.store(id, Ordering::Release);
        }
        Ok(t)
    }

    /// A constructor's result: as [`Tensor::from_storage`], never tied to a scope.
    pub(crate) fn leaf_from_storage(
        backend: &B,
        storage: B::Storage,
        shape: Shape,
    ) -> Result<Self> {
        let layout = Layout::contiguous(shape);
        let len = B::storage_len(&storage);
        layout.check_within("tensor", "storage", len)?;
        Ok(Self::from_checked_parts(
            backend.clone(),
            Arc::new(StorageCell::new(storage)),
            layout,
            false,
            None,
        ))
    }

    /// An operator's result holding `data` (remembered by a scope as
    /// [`Tensor::from_storage`]); `data` must have the shape's element count.
    pub(crate) fn from_op_vec(
        backend: &B,
        data: Vec<f32>,
        shape: impl Into<Shape>,
    ) -> Result<Self> {
        Self::from_storage(backend, backend.storage_from_vec(data)?, shape.into())
    }

    /// An operator's rank-0 result holding `value` (remembered by a scope as
    /// [`Tensor::from_storage`]).
    pub(crate) fn op_scalar(backend: &B, value: f32) -> Result<Self> {
        let storage = backend.storage_from_vec(vec![value])?;
        Self::from_storage(backend, storage, Shape::scalar())
    }

    /// A tensor of `shape` over a new zero-filled buffer of the backend (not tied to a
    /// scope).
    pub(crate) fn zeros_of(backend: &B, op: &'static str, shape: Shape) -> Result<Self> {
        let n = shape.numel_for(op)?;
        Self::leaf_from_storage(backend, backend.zeros(n)?, shape)
    }

    /// A view of `storage` under `layout`, checked against the storage's length.
    pub(crate) fn from_parts(
        backend: B,
        storage: Arc<StorageCell<B>>,
        layout: Layout,
        requires_grad: bool,
        grad_fn: Option<Arc<Node<B>>>,
    ) -> Result<Self> {
        layout.check_within("view", "layout", storage.len)?;
        Ok(Self::from_checked_parts(
            backend,
            storage,
            layout,
            requires_grad,
            grad_fn,
        ))
    }

    /// A new handle over `storage` and a layout already known to fit it (the layout of
    /// an existing tensor of that storage).
    pub(crate) fn from_checked_parts(
        backend: B,
        storage: Arc<StorageCell<B>>,
        layout: Layout,
        requires_grad: bool,
        grad_fn: Option<Arc<Node<B>>>,
    ) -> Self {
        Self {
            inner: Arc::new(TensorImpl {
                backend,
                storage,
                layout,
                requires_grad: AtomicBool::new(requires_grad),
                grad_fn,
                grad: Mutex::new(None),
                accumulating: AtomicU64::new(0),
                trace: Mutex::new(None),
            }),
        }
    }

    /// A tensor holding `data` in row-major order with the given shape.
    ///
    /// Fails when `data.len()` differs from the shape's element count.
    pub fn from_vec(backend: &B, data: Vec<f32>, shape: impl Into<Shape>) -> Result<Self> {
        let shape = shape.into();
        shape.numel_for("from_vec")?;
        if data.len() != shape.numel() {
            return Err(Error::invalid(
                "from_vec",
                "data",
                format!(
                    "{} values given for shape {:?} ({} elements)",
                    data.len(),
                    shape,
                    shape.numel()
                ),
            ));
        }
        Self::leaf_from_storage(backend, backend.storage_from_vec(data)?, shape)
    }

    /// A tensor copying `data` (row-major) with the given shape.
    pub fn from_slice(backend: &B, data: &[f32], shape: impl Into<Shape>) -> Result<Self> {
        let mut copy = exactgrad_core::backend::try_vec_with_capacity("from_slice", data.len())?;
        copy.extend_from_slice(data);
        Self::from_vec(backend, copy, shape)
    }

    /// A zero-filled tensor.
    ///
    /// Fails with [`exactgrad_core::Error::TooLarge`] when the shape has more than
    /// [`exactgrad_core::MAX_ELEMENTS`] elements (or its count overflows) and with
    /// [`exactgrad_core::Error::Alloc`] when the memory cannot be obtained.
    pub fn zeros(backend: &B, shape: impl Into<Shape>) -> Result<Self> {
        Self::zeros_of(backend, "zeros", shape.into())
    }

    /// A tensor filled with `value` (errors as [`Tensor::zeros`]).
    pub fn full(backend: &B, shape: impl Into<Shape>, value: f32) -> Result<Self> {
        let shape = shape.into();
        let n = shape.numel_for("full")?;
        let mut storage = backend.uninit(n)?;
        B::with_host_mut(B::view_mut(&mut storage), |s| s.fill(value))?;
        Self::leaf_from_storage(backend, storage, shape)
    }

    /// A tensor filled with ones (errors as [`Tensor::zeros`]).
    pub fn ones(backend: &B, shape: impl Into<Shape>) -> Result<Self> {
        Self::full(backend, shape, 1.0)
    }

    /// A rank-0 tensor holding `value`.
    pub fn scalar(backend: &B, value: f32) -> Result<Self> {
        Self::full(backend, Shape::scalar(), value)
    }

    /// A tensor of `shape` whose elements are `f(i)` for row-major index `i`, produced
    /// in order (errors as [`Tensor::zeros`]).
    fn generate(
        backend: &B,
        op: &'static str,
        shape: Shape,
        mut f: impl FnMut() -> f32,
    ) -> Result<Self> {
        let n = shape.numel_for(op)?;
        let mut storage = backend.uninit(n)?;
        B::with_host_mut(B::view_mut(&mut storage), |s| {
            s.iter_mut().for_each(|v| *v = f())
        })?;
        Self::leaf_from_storage(backend, storage, shape)
    }

    /// A tensor of samples uniform in [low, high) drawn from `rng` in row-major order.
    pub fn rand_uniform(
        backend: &B,
        shape: impl Into<Shape>,
        low: f32,
        high: f32,
        rng: &mut Philox,
    ) -> Result<Self> {
        Self::generate(backend, "rand_uniform", shape.into(), || {
            rng.uniform(low, high)
        })
    }

    /// A tensor of standard-normal samples times `std` plus `mean`, drawn from `rng`.
    pub fn randn(
        backend: &B,
        shape: impl Into<Shape>,
        mean: f32,
        std: f32,
        rng: &mut Philox,
    ) -> Result<Self> {
        Self::generate(backend, "randn", shape.into(), || mean + std * rng.normal())
    }

    // ----- accessors ---------------------------------------------------------------

    /// The tensor's shape.
    pub fn shape(&self) -> &Shape {
        &self.inner.layout.shape
    }

    /// The tensor's dimensions as a slice.
    pub fn dims(&self) -> &[usize] {
        self.inner.layout.shape.dims()
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.inner.layout.rank()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.inner.layout.numel()
    }

    /// The extent of dimension `dim` (negative counts from the end).
    pub fn dim(&self, dim: isize) -> Result<usize> {
        Ok(self.dims()[normalize_dim("dim", dim, self.rank())?])
    }

    /// The layout (shape, strides, offset) over the storage.
    pub fn layout(&self) -> &Layout {
        &self.inner.layout
    }

    /// The backend this tensor lives on.
    pub fn backend(&self) -> &B {
        &self.inner.backend
    }

    /// Whether the elements are row-major without gaps.
    pub fn is_contiguous(&self) -> bool {
        self.inner.layout.is_contiguous()
    }

    /// The storage's version: incremented by every in-place change.
    pub fn version(&self) -> u64 {
        self.inner.storage.version.load(Ordering::Acquire)
    }

    /// Whether two tensors share storage.
    pub fn shares_storage(&self, other: &Tensor<B>) -> bool {
        Arc::ptr_eq(&self.inner.storage, &other.inner.storage)
    }

    /// Read access to the storage, or [`Error::Released`] when it was released.
    pub(crate) fn read(&self) -> Result<StorageRead<'_, B>> {
        let guard = self
            .inner
            .storage
            .data
            .read()
            .unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            return Err(Error::Released {
                shape: self.dims().to_vec(),
            });
        }
        Ok(StorageRead(guard))
    }

    /// Write access to the storage, or [`Error::Released`] when it was released.
    pub(crate) fn write(&self) -> Result<StorageWrite<'_, B>> {
        let guard = self
            .inner
            .storage
            .data
            .write()
            .unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            return Err(Error::Released {
                shape: self.dims().to_vec(),
            });
        }
        Ok(StorageWrite(guard))
    }

    pub(crate) fn bump_version(&self) {
        self.inner.storage.version.fetch_add(1, Ordering::AcqRel);
    }

    /// The elements in row-major order.
    ///
    /// Fails when the storage was released, or when the copy cannot be allocated.
    pub fn to_vec(&self) -> Result<Vec<f32>> {
        let data = self.read()?;
        let src = data.as_ref();
        let l = &self.inner.layout;
        let n = l.numel();
        if l.is_contiguous() {
            let host = B::to_host(B::slice(src, l.offset..l.offset + n))?;
            let mut out = Vec::new();
            out.try_reserve_exact(n).map_err(|_| {
                Error::Core(exactgrad_core::Error::Alloc {
                    op: "to_vec",
                    bytes: n.saturating_mul(4),
                    reason: "the allocator refused the request",
                })
            })?;
            out.extend_from_slice(&host);
            return Ok(out);
        }
        let b = &self.inner.backend;
        let mut out = b.uninit(n)?;
        b.copy_strided(src, l, B::view_mut(&mut out))?;
        Ok(B::storage_to_vec(&out)?)
    }

    /// The single element of a one-element tensor.
    pub fn item(&self) -> Result<f32> {
        if self.numel() != 1 {
            return Err(Error::invalid(
                "item",
                "self",
                format!(
                    "tensor of shape {:?} has {} elements, not 1",
                    self.shape(),
                    self.numel()
                ),
            ));
        }
        Ok(self.to_vec()?[0])
    }

    // ----- autograd metadata ---------------------------------------------------------

    /// Marks this leaf as requiring gradients and returns it (the builder form of
    /// [`Tensor::requires_grad_`]`(true)`).
    ///
    /// The flag lives on the tensor that every clone shares: a clone taken before this
    /// call requires gradients too, and `backward` fills the gradient they share.
    ///
    /// Fails on a tensor produced by a recorded operation: only leaves can be marked.
    pub fn requires_grad(self) -> Result<Self> {
        self.requires_grad_(true)?;
        Ok(self)
    }

    /// Sets in place whether gradients flow to this leaf (PyTorch's `requires_grad_()`);
    /// every clone of the tensor sees the change.
    ///
    /// Fails on a tensor produced by a recorded operation (not a leaf): its flag follows
    /// its inputs; `detach()` it first to get a leaf.
    pub fn requires_grad_(&self, requires_grad: bool) -> Result<&Self> {
        if self.inner.grad_fn.is_some() {
            return Err(Error::invalid(
                "requires_grad_",
                "self",
                format!(
                    "only leaf tensors can be marked; this tensor was produced by `{}` (detach() it first)",
                    self.grad_fn_name().unwrap_or("an operation")
                ),
            ));
        }
        self.inner
            .requires_grad
            .store(requires_grad, Ordering::Relaxed);
        Ok(self)
    }

    /// Whether gradients flow to this tensor (a marked leaf or a recorded result).
    pub fn is_requires_grad(&self) -> bool {
        self.inner.requires_grad.load(Ordering::Relaxed)
    }

    /// Whether this tensor is a leaf (not produced by a recorded operation).
    pub fn is_leaf(&self) -> bool {
        self.inner.grad_fn.is_none()
    }

    /// The name of the operation that produced this tensor, if it was recorded.
    pub fn grad_fn_name(&self) -> Option<&'static str> {
        self.inner.grad_fn.as_ref().map(|n| n.name)
    }

    /// Detaches this tensor's storage from the [`ActivationScope`](crate::ActivationScope)
    /// that would release it, so that it and every view of it stay usable after the scope
    /// ends; returns `self` for chaining. A tensor no scope holds is unchanged.
    pub fn keep(&self) -> &Self {
        self.inner.storage.scope.store(0, Ordering::Release);
        self
    }

    /// Whether this tensor's storage was released (by the end of its scope): every read
    /// or write of it is then an [`Error::Released`].
    pub fn is_released(&self) -> bool {
        self.inner
            .storage
            .data
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// A tensor sharing storage with `self` but cut from the graph (no gradient flows).
    pub fn detach(&self) -> Self {
        let t = Self::from_checked_parts(
            self.inner.backend.clone(),
            Arc::clone(&self.inner.storage),
            self.inner.layout.clone(),
            false,
            None,
        );
        if crate::trace::active() {
            // The same elements: what a trace knows of them holds for the detached handle.
            crate::trace::copy_tag(self, &t);
        }
        t
    }

    /// The accumulated gradient of this leaf, if any backward reached it.
    pub fn grad(&self) -> Option<Tensor<B>> {
        self.inner
            .grad
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Frees the gradient, as PyTorch's `zero_grad()` does by default
    /// (`set_to_none=True`): the next backward creates a new one. The same as
    /// [`Tensor::clear_grad`]; [`Tensor::fill_grad_zero`] keeps a gradient of zeros
    /// instead.
    pub fn zero_grad(&self) {
        self.clear_grad();
    }

    /// Sets the gradient to zeros of the tensor's shape, in place when one exists
    /// (PyTorch's `zero_grad(set_to_none=False)`).
    ///
    /// Fails when a new gradient buffer cannot be allocated.
    pub fn fill_grad_zero(&self) -> Result<()> {
        let mut g = self.inner.grad.lock().unwrap_or_else(|e| e.into_inner());
        match g.as_ref() {
            Some(t) => {
                B::with_host_mut(t.write()?.as_mut(), |s| s.fill(0.0))?;
                t.bump_version();
            }
            None => {
                *g = Some(Tensor::zeros_of(
                    &self.inner.backend,
                    "fill_grad_zero",
                    self.shape().clone(),
                )?)
            }
        }
        Ok(())
    }

    /// Frees the gradient (the next backward creates a new one); the same as
    /// [`Tensor::zero_grad`].
    pub fn clear_grad(&self) {
        *self.inner.grad.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// Replaces the gradient (used by optimizers and tests); `None` clears it.
    pub fn set_grad(&self, grad: Option<Tensor<B>>) -> Result<()> {
        if let Some(g) = &grad {
            if g.shape() != self.shape() {
                return Err(Error::mismatch(
                    "set_grad",
                    g.dims(),
                    self.dims(),
                    "gradient and tensor shapes",
                ));
            }
        }
        *self.inner.grad.lock().unwrap_or_else(|e| e.into_inner()) = grad;
        Ok(())
    }

    pub(crate) fn accumulate_grad(&self, g: &Tensor<B>) -> Result<()> {
        let mut slot = self.inner.grad.lock().unwrap_or_else(|e| e.into_inner());
        let next = match slot.as_ref() {
            None => g.copy_contiguous()?,
            Some(old) => old.add(g)?,
        };
        *slot = Some(next);
        Ok(())
    }

    /// Runs reverse-mode differentiation from this one-element tensor with the seed 1
    /// (PyTorch's `loss.backward()`; see [`crate::engine`]): every leaf on the way that
    /// requires gradients gets its gradient added to [`grad`](Self::grad), and the records
    /// on the way are released, so a second backward through them is an error.
    ///
    /// Fails when the tensor does not require gradients or has more than one element (use
    /// [`backward_with`](Self::backward_with) and a `gradient`).
    pub fn backward(&self) -> Result<()> {
        crate::engine::backward(self, None, false)
    }

    /// [`backward`](Self::backward) with options ([`BackwardOptions`](crate::BackwardOptions),
    /// PyTorch's `backward(gradient, retain_graph)`): a seed `gradient` of this tensor's
    /// shape, and `retain_graph` to keep the records for another pass.
    pub fn backward_with(&self, options: crate::BackwardOptions<'_, B>) -> Result<()> {
        crate::engine::backward(self, options.gradient, options.retain_graph)
    }

    // ----- in-place operations (not recorded) ------------------------------------------

    pub(crate) fn check_in_place(&self, op: &'static str) -> Result<()> {
        if self.is_requires_grad() && is_grad_enabled() {
            return Err(Error::InPlaceOnGrad { op });
        }
        Ok(())
    }

    /// Applies `f` to every element of this view in place and bumps the version.
    pub(crate) fn map_in_place(
        &self,
        op: &'static str,
        mut f: impl FnMut(usize, f32) -> f32,
    ) -> Result<()> {
        self.check_in_place(op)?;
        {
            let mut data = self.write()?;
            let layout = &self.inner.layout;
            B::with_host_mut(data.as_mut(), |slice| {
                let mut i = 0;
                layout.for_each_index(|s| {
                    slice[s] = f(i, slice[s]);
                    i += 1;
                });
            })?;
        }
        self.bump_version();
        Ok(())
    }

    /// Sets every element to `value` in place.
    pub fn fill_(&self, value: f32) -> Result<()> {
        self.map_in_place("fill_", |_, _| value)
    }

    /// Copies `src` (same shape) into this tensor in place.
    pub fn copy_(&self, src: &Tensor<B>) -> Result<()> {
        if src.shape() != self.shape() {
            return Err(Error::mismatch(
                "copy_",
                self.dims(),
                src.dims(),
                "source and destination shapes",
            ));
        }
        let values = src.to_vec()?;
        self.map_in_place("copy_", |i, _| values[i])
    }

    /// Adds `other` (broadcast to this shape) in place, with the backend's add kernel.
    pub fn add_(&self, other: &Tensor<B>) -> Result<()> {
        let other = other.expand(self.dims())?.detach();
        let sum = {
            let _g = crate::no_grad();
            self.detach().add(&other)?
        };
        self.copy_(&sum)
    }

    /// Multiplies every element by `c` in place.
    pub fn mul_scalar_(&self, c: f32) -> Result<()> {
        let prod = {
            let _g = crate::no_grad();
            self.detach().mul_scalar(c)?
        };
        self.copy_(&prod)
    }

    /// A contiguous copy with fresh storage (always copies).
    pub fn copy_contiguous(&self) -> Result<Tensor<B>> {
        let b = &self.inner.backend;
        let mut out = b.uninit(self.numel())?;
        {
            let data = self.read()?;
            b.copy_strided(data.as_ref(), &self.inner.layout, B::view_mut(&mut out))?;
        }
        Tensor::from_storage(b, out, self.shape().clone())
    }

    /// Runs `f` on a contiguous slice of this tensor's elements (copying only when the
    /// layout is not contiguous).
    pub(crate) fn with_contiguous<R>(&self, f: impl FnOnce(ViewOf<'_, B>) -> R) -> Result<R> {
        let l = &self.inner.layout;
        if l.is_contiguous() {
            let data = self.read()?;
            Ok(f(B::slice(data.as_ref(), l.offset..l.offset + l.numel())))
        } else {
            let c = self.copy_contiguous()?;
            let data = c.read()?;
            Ok(f(B::slice(data.as_ref(), 0..c.numel())))
        }
    }

    /// Runs `f` on this tensor's elements in row-major order as a host slice (a download
    /// on a device backend; copying only when the layout is not contiguous).
    pub(crate) fn with_host<R>(&self, f: impl FnOnce(&[f32]) -> R) -> Result<R> {
        self.with_contiguous(|v| B::to_host(v).map(|h| f(&h)))?
            .map_err(Error::from)
    }
}
