//! The reverse-mode engine: records, saved tensors and `backward`.
//!
//! `y.backward()` (PyTorch's `y.backward()`), or `y.backward_with(options)` with a seed
//! `gradient` and `retain_graph` ([`BackwardOptions`], PyTorch's arguments of the same
//! names):
//! 1. `y` must require gradients. Without `gradient`, `y` must have one element (the seed
//!    is 1); otherwise `gradient` must have `y`'s shape (it is copied).
//! 2. The records reachable from `y` are ordered by an iterative depth-first search over
//!    their input edges (inputs visited in input order), post-order, and processed in the
//!    reverse of that order, so a record runs after every record that consumes its output.
//! 3. Each record holds one pending gradient. Its backward rule runs with that gradient
//!    and emits one gradient per input that needs one; an emission into a record adds into
//!    its pending gradient in emission order, an emission into a leaf adds into the leaf's
//!    `grad` (created on the first emission).
//! 4. Backward runs with recording off; higher-order derivatives are not supported.
//! 5. Unless `retain_graph`, each record is released right after it ran: its backward
//!    rule and the tensors it saved are dropped then, so the memory a backward pass holds
//!    falls as it proceeds. A backward that would pass through a released record fails
//!    with [`Error::GraphReleased`] before any work.
//! 6. A saved tensor modified in place after the forward pass fails with
//!    [`Error::TensorVersion`] when its record runs.
//! 7. Before any work, the pass claims every leaf it will accumulate into; if another
//!    thread's backward pass holds one of them, this pass fails with
//!    [`Error::ConcurrentBackward`] (a sum over passes that run at the same time would
//!    depend on their arrival order). Passes that share leaves run one after the other;
//!    passes over disjoint leaves may run at the same time (`docs/threads.md`).

use crate::error::{Error, Result};
use crate::grad_mode::{is_grad_enabled, no_grad};
use crate::tensor::{next_id, Tensor};
use exactgrad_core::Backend;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// A backward rule: maps the output gradient to one optional gradient per input.
pub(crate) type BackwardFn<B> =
    Box<dyn Fn(&Tensor<B>) -> Result<Vec<Option<Tensor<B>>>> + Send + Sync>;

/// Where an input's gradient goes.
pub(crate) enum Edge<B: Backend> {
    /// The input needs no gradient.
    None,
    /// The input was produced by a recorded operation.
    Node(Arc<Node<B>>),
    /// The input is a leaf that requires gradients.
    Leaf(Tensor<B>),
}

/// One recorded operation.
pub(crate) struct Node<B: Backend> {
    pub(crate) id: u64,
    pub(crate) name: &'static str,
    /// The public operator the user called that made this record: `name` itself, or the
    /// outermost composite operator (`cross_entropy` for its inner `permute`), for
    /// messages ([`PublicOp`]).
    pub(crate) public: &'static str,
    pub(crate) edges: Vec<Edge<B>>,
    /// The inputs' shapes, for the debug check of the gradients' shapes (not kept in
    /// release builds: a record per operator is heap memory per step).
    #[cfg(debug_assertions)]
    pub(crate) input_shapes: Vec<Vec<usize>>,
    pub(crate) backward: Mutex<Option<BackwardFn<B>>>,
    /// The forward record of this operation in the trace recording it, if any.
    pub(crate) trace: Option<Box<crate::trace::NodeTrace>>,
}

impl<B: Backend> Drop for Node<B> {
    /// Drops the chain of records behind this one iteratively, so that releasing a very
    /// long graph cannot overflow the stack.
    fn drop(&mut self) {
        let mut stack: Vec<Arc<Node<B>>> = Vec::new();
        let take = |edges: &mut Vec<Edge<B>>, stack: &mut Vec<Arc<Node<B>>>| {
            for e in edges.drain(..) {
                if let Edge::Node(n) = e {
                    stack.push(n);
                }
            }
        };
        take(&mut self.edges, &mut stack);
        while let Some(n) = stack.pop() {
            if let Ok(mut node) = Arc::try_unwrap(n) {
                take(&mut node.edges, &mut stack);
            }
        }
    }
}

thread_local! {
    /// The outermost composite public operator running on this thread, if any.
    static PUBLIC_OP: std::cell::Cell<Option<&'static str>> = const { std::cell::Cell::new(None) };
}

/// While alive, records made on this thread belong to the public operator `name` (unless
/// an outer one is already open): a composite operator opens one so that an error about
/// its inner records (`permute` inside `cross_entropy`) names the call the user wrote.
pub(crate) struct PublicOp(Option<&'static str>);

impl PublicOp {
    /// Opens the operator `name` on this thread.
    pub(crate) fn new(name: &'static str) -> Self {
        PublicOp(PUBLIC_OP.with(|p| p.replace(Some(p.get().unwrap_or(name)))))
    }
}

impl Drop for PublicOp {
    fn drop(&mut self) {
        let prev = self.0;
        let _ = PUBLIC_OP.try_with(|p| p.set(prev));
    }
}

/// A tensor saved for a backward rule, with the storage version it had when saved.
pub(crate) struct Saved<B: Backend> {
    tensor: Tensor<B>,
    version: u64,
    op: &'static str,
}

impl<B: Backend> Saved<B> {
    /// Saves `t` (detached, sharing storage) for operator `op`.
    pub(crate) fn new(op: &'static str, t: &Tensor<B>) -> Self {
        Self {
            tensor: t.detach(),
            version: t.version(),
            op,
        }
    }

    /// The saved tensor, or [`Error::TensorVersion`] if it changed in place since.
    pub(crate) fn get(&self) -> Result<&Tensor<B>> {
        let now = self.tensor.version();
        if now != self.version {
            return Err(Error::TensorVersion {
                op: self.op,
                saved: self.version,
                now,
            });
        }
        Ok(&self.tensor)
    }
}

/// Whether an operation on `inputs` must be recorded.
pub(crate) fn needs_record<B: Backend>(inputs: &[&Tensor<B>]) -> bool {
    is_grad_enabled() && inputs.iter().any(|t| t.is_requires_grad())
}

/// Attaches a record to `out` when grad mode is on and an input requires gradients.
/// `make_backward` is only called when a record is made.
pub(crate) fn record<B: Backend, F>(
    name: &'static str,
    out: Tensor<B>,
    inputs: &[&Tensor<B>],
    make_backward: impl FnOnce() -> F,
) -> Tensor<B>
where
    F: Fn(&Tensor<B>) -> Result<Vec<Option<Tensor<B>>>> + Send + Sync + 'static,
{
    record_with(name, out, inputs, None, make_backward)
}

/// [`record`], with what a trace records of the operation besides its tensors (input
/// names, arguments, integer inputs): `info` comes from [`crate::trace::info`], which
/// makes it only while a trace records.
pub(crate) fn record_with<B: Backend, F>(
    name: &'static str,
    out: Tensor<B>,
    inputs: &[&Tensor<B>],
    info: Option<crate::trace::OpInfo<B>>,
    make_backward: impl FnOnce() -> F,
) -> Tensor<B>
where
    F: Fn(&Tensor<B>) -> Result<Vec<Option<Tensor<B>>>> + Send + Sync + 'static,
{
    let traced = if crate::trace::active() {
        crate::trace::forward(name, &out, inputs, info.unwrap_or_default())
    } else {
        None
    };
    if !needs_record(inputs) {
        return out;
    }
    let edges = inputs
        .iter()
        .map(|t| {
            if !t.is_requires_grad() {
                Edge::None
            } else if let Some(n) = &t.inner.grad_fn {
                Edge::Node(Arc::clone(n))
            } else {
                Edge::Leaf((*t).clone())
            }
        })
        .collect();
    let (trace, digest) = match traced {
        Some((t, d)) => (Some(Box::new(t)), d),
        None => (None, 0),
    };
    let node = Node {
        id: next_id(),
        name,
        public: PUBLIC_OP.with(|p| p.get()).unwrap_or(name),
        edges,
        #[cfg(debug_assertions)]
        input_shapes: inputs.iter().map(|t| t.dims().to_vec()).collect(),
        backward: Mutex::new(Some(Box::new(make_backward()))),
        trace,
    };
    let mut out = out;
    if let Some(inner) = Arc::get_mut(&mut out.inner) {
        // The operator's fresh result, held nowhere else: record in place instead of
        // making a second handle (no allocation).
        inner.grad_fn = Some(Arc::new(node));
        *inner.requires_grad.get_mut() = true;
        return out;
    }
    let node = Arc::new(node);
    let t = Tensor::from_checked_parts(
        out.inner.backend.clone(),
        Arc::clone(&out.inner.storage),
        out.inner.layout.clone(),
        true,
        Some(Arc::clone(&node)),
    );
    if let Some(nt) = &node.trace {
        crate::trace::tag_output(&t, nt, digest);
    }
    t
}

/// The leaves a backward pass accumulates into, claimed for the pass (see point 7 of the
/// module documentation); dropping the claim releases them.
struct LeafClaim<B: Backend> {
    pass: u64,
    leaves: Vec<Tensor<B>>,
}

impl<B: Backend> LeafClaim<B> {
    /// Claims every leaf in `leaves` (duplicates allowed) for a new pass, or fails with
    /// [`Error::ConcurrentBackward`] naming the first leaf another pass holds.
    fn new(leaves: Vec<Tensor<B>>) -> Result<Self> {
        let mut claim = LeafClaim {
            pass: next_id(),
            leaves: Vec::with_capacity(leaves.len()),
        };
        for leaf in leaves {
            let slot = &leaf.inner.accumulating;
            match slot.compare_exchange(0, claim.pass, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => claim.leaves.push(leaf),
                Err(owner) if owner == claim.pass => {}
                Err(_) => {
                    return Err(Error::ConcurrentBackward {
                        shape: leaf.dims().to_vec(),
                    })
                }
            }
        }
        Ok(claim)
    }
}

impl<B: Backend> Drop for LeafClaim<B> {
    fn drop(&mut self) {
        for leaf in &self.leaves {
            leaf.inner.accumulating.store(0, Ordering::Release);
        }
    }
}

fn topological_order<B: Backend>(root: &Arc<Node<B>>) -> Vec<Arc<Node<B>>> {
    let mut order = Vec::new();
    let mut visited = HashSet::new();
    // Stack of (node, next input edge to visit).
    let mut stack: Vec<(Arc<Node<B>>, usize)> = vec![(Arc::clone(root), 0)];
    visited.insert(root.id);
    while let Some((node, next)) = stack.pop() {
        let mut descend = None;
        for i in next..node.edges.len() {
            if let Edge::Node(child) = &node.edges[i] {
                if visited.insert(child.id) {
                    descend = Some((Arc::clone(child), i + 1));
                    break;
                }
            }
        }
        match descend {
            Some((child, resume)) => {
                stack.push((node, resume));
                stack.push((child, 0));
            }
            None => order.push(node),
        }
    }
    order
}

/// Options of [`Tensor::backward_with`] (PyTorch's `backward(gradient, retain_graph)`),
/// by default none: the seed 1 of a one-element tensor, the records released.
///
/// ```
/// use exactgrad_autograd::{BackwardOptions, Tensor};
/// use exactgrad_backends::ScalarRefBackend;
///
/// # fn main() -> exactgrad_autograd::Result<()> {
/// let b = ScalarRefBackend;
/// let x = Tensor::from_vec(&b, vec![1.0, 2.0], [2])?.requires_grad()?;
/// let y = x.mul_scalar(3.0)?;
/// let seed = Tensor::from_vec(&b, vec![1.0, 10.0], [2])?;
/// y.backward_with(BackwardOptions::default().gradient(&seed).retain_graph(true))?;
/// y.backward_with(BackwardOptions::default().gradient(&seed))?; // the records were kept
/// assert_eq!(x.grad().unwrap().to_vec()?, [6.0, 60.0]);
/// # Ok(())
/// # }
/// ```
pub struct BackwardOptions<'a, B: Backend> {
    /// The gradient of the output to start from (PyTorch's `gradient`), of the output's
    /// shape; `None` (the default) needs a one-element output and seeds it with 1.
    pub gradient: Option<&'a Tensor<B>>,
    /// Keeps the records after the pass, so that another backward can run through them
    /// (PyTorch's `retain_graph`; default false).
    pub retain_graph: bool,
}

impl<B: Backend> Default for BackwardOptions<'_, B> {
    fn default() -> Self {
        Self {
            gradient: None,
            retain_graph: false,
        }
    }
}

impl<B: Backend> Clone for BackwardOptions<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B: Backend> Copy for BackwardOptions<'_, B> {}

impl<B: Backend> std::fmt::Debug for BackwardOptions<'_, B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackwardOptions")
            .field("gradient", &self.gradient)
            .field("retain_graph", &self.retain_graph)
            .finish()
    }
}

impl<'a, B: Backend> BackwardOptions<'a, B> {
    /// These options with `gradient` as the seed.
    pub fn gradient(self, gradient: &'a Tensor<B>) -> Self {
        Self {
            gradient: Some(gradient),
            ..self
        }
    }

    /// These options with `retain_graph` set to `retain`.
    pub fn retain_graph(self, retain: bool) -> Self {
        Self {
            retain_graph: retain,
            ..self
        }
    }
}

pub(crate) fn backward<B: Backend>(
    root: &Tensor<B>,
    gradient: Option<&Tensor<B>>,
    retain_graph: bool,
) -> Result<()> {
    // The engine's allocations are never tied to an activation scope (crate::scope).
    let _unscoped = crate::scope::Unscoped::new();
    if !root.is_requires_grad() {
        return Err(Error::NoGrad {
            shape: root.dims().to_vec(),
        });
    }
    let seed = match gradient {
        None => {
            if root.numel() != 1 {
                return Err(Error::ImplicitSeed {
                    shape: root.dims().to_vec(),
                });
            }
            Tensor::ones(root.backend(), root.shape().clone())?
        }
        Some(g) => {
            if g.shape() != root.shape() {
                return Err(Error::SeedShape {
                    expected: root.dims().to_vec(),
                    got: g.dims().to_vec(),
                });
            }
            g.copy_contiguous()?
        }
    };
    let _guard = no_grad();
    let tracing = crate::trace::active();
    let Some(root_node) = &root.inner.grad_fn else {
        let _claim = LeafClaim::new(vec![root.clone()])?;
        if tracing {
            crate::trace::backward_start(root, &seed);
        }
        return accumulate_leaf(root, &seed, tracing);
    };
    let order = topological_order(root_node);
    let leaves = order
        .iter()
        .flat_map(|n| n.edges.iter())
        .filter_map(|e| match e {
            Edge::Leaf(t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    let _claim = LeafClaim::new(leaves)?;
    // From the root down: the released record nearest to the call that failed.
    for node in order.iter().rev() {
        if node
            .backward
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
        {
            return Err(Error::GraphReleased { op: node.public });
        }
    }
    if tracing {
        crate::trace::backward_start(root, &seed);
    }
    let mut pending: HashMap<u64, Tensor<B>> = HashMap::new();
    pending.insert(root_node.id, seed);
    for node in order.iter().rev() {
        let Some(g) = pending.remove(&node.id) else {
            // No gradient reached this record (every consumer emitted none).
            if !retain_graph {
                node.backward
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
            }
            continue;
        };
        let grads = {
            let slot = node.backward.lock().unwrap_or_else(|e| e.into_inner());
            let f = slot
                .as_ref()
                .ok_or(Error::GraphReleased { op: node.public })?;
            // The operations a rule is made of are part of its one record.
            let _quiet = tracing.then(crate::trace::suppress);
            f(&g)?
        };
        if tracing {
            if let Some(nt) = &node.trace {
                crate::trace::backward_rule(node.name, nt, &g, &grads);
            }
        }
        if !retain_graph {
            node.backward
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take();
        }
        debug_assert_eq!(
            grads.len(),
            node.edges.len(),
            "{}: backward arity",
            node.name
        );
        #[allow(clippy::unused_enumerate_index)]
        for (_i, (edge, grad)) in node.edges.iter().zip(grads).enumerate() {
            let Some(grad) = grad else { continue };
            #[cfg(debug_assertions)]
            debug_assert_eq!(
                grad.dims(),
                &node.input_shapes[_i][..],
                "{}: gradient shape of input {_i}",
                node.name
            );
            match edge {
                Edge::None => {}
                Edge::Leaf(t) => accumulate_leaf(t, &grad, tracing)?,
                Edge::Node(n) => {
                    let next = match pending.remove(&n.id) {
                        None => grad,
                        Some(old) => {
                            let sum = {
                                let _quiet = tracing.then(crate::trace::suppress);
                                old.add(&grad)?
                            };
                            if tracing {
                                crate::trace::grad_sum(
                                    "grad_sum",
                                    None,
                                    &[("pending", &old), ("grad", &grad)],
                                    &sum,
                                );
                            }
                            sum
                        }
                    };
                    pending.insert(n.id, next);
                }
            }
        }
    }
    Ok(())
}

/// Adds `grad` into the gradient of `leaf`, recorded as `accumulate_grad` by a trace.
fn accumulate_leaf<B: Backend>(leaf: &Tensor<B>, grad: &Tensor<B>, tracing: bool) -> Result<()> {
    if !tracing {
        return leaf.accumulate_grad(grad);
    }
    let old = leaf.grad();
    {
        let _quiet = crate::trace::suppress();
        leaf.accumulate_grad(grad)?;
    }
    if let Some(new) = leaf.grad() {
        match &old {
            Some(old) => crate::trace::grad_sum(
                "accumulate_grad",
                Some(leaf),
                &[("grad", old), ("emitted", grad)],
                &new,
            ),
            None => {
                crate::trace::grad_sum("accumulate_grad", Some(leaf), &[("emitted", grad)], &new)
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use exactgrad_backends::ScalarRefBackend;

    fn leaf(v: &[f32]) -> Tensor<ScalarRefBackend> {
        Tensor::from_slice(&ScalarRefBackend, v, [v.len()])
            .unwrap()
            .requires_grad()
            .unwrap()
    }

    #[test]
    fn a_leaf_held_by_another_pass_refuses_the_backward_before_any_work() {
        let w = leaf(&[1.0, 2.0]);
        let other = leaf(&[3.0]);
        // Another pass (on another thread, in a real program) holds `w`.
        let held = LeafClaim::new(vec![w.clone()]).unwrap();
        let loss = w.mul_scalar(2.0).unwrap().sum().unwrap();
        let loss2 = other.mul(&w.sum().unwrap()).unwrap().sum().unwrap();
        for l in [&loss, &loss2] {
            let e = l
                .backward_with(BackwardOptions::default().retain_graph(true))
                .unwrap_err();
            assert!(
                matches!(e, Error::ConcurrentBackward { ref shape } if shape == &[2]),
                "{e}"
            );
        }
        // Nothing was accumulated, not even into the leaf nobody held.
        assert!(w.grad().is_none() && other.grad().is_none());
        // The records were not released: the same call succeeds once the claim ends.
        drop(held);
        loss.backward_with(BackwardOptions::default().retain_graph(true))
            .unwrap();
        assert_eq!(w.grad().unwrap().to_vec().unwrap(), [2.0, 2.0]);
        loss2.backward().unwrap();
        assert_eq!(other.grad().unwrap().to_vec().unwrap(), [3.0]);
        assert_eq!(w.grad().unwrap().to_vec().unwrap(), [5.0, 5.0]);
    }

    /// A pass-through record whose backward rule logs the bytes the backend's pool has
    /// outstanding when it runs.
    fn probe<B: Backend>(x: &Tensor<B>, log: &Arc<Mutex<Vec<usize>>>) -> Tensor<B> {
        let (log, b) = (Arc::clone(log), x.backend().clone());
        record("probe", x.detach(), &[x], move || {
            move |g: &Tensor<B>| {
                let stats = b.memory().expect("a pool").stats();
                log.lock().unwrap().push(stats.outstanding_bytes);
                Ok(vec![Some(g.clone())])
            }
        })
    }

    /// The bytes outstanding at each probe of a chain of `exp` (each record saves its
    /// 256 KiB output), in the order backward reached them.
    fn outstanding_during_backward(retain_graph: bool) -> Vec<usize> {
        let b = exactgrad_backends::ExactBackend::new();
        let x = Tensor::full(&b, [1 << 16], 0.01)
            .unwrap()
            .requires_grad()
            .unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let mut h = x.clone();
        for _ in 0..6 {
            h = probe(&h.exp().unwrap().mul_scalar(0.5).unwrap(), &log);
        }
        let loss = h.sum().unwrap();
        drop(h);
        loss.backward_with(BackwardOptions::default().retain_graph(retain_graph))
            .unwrap();
        let v = log.lock().unwrap().clone();
        v
    }

    #[test]
    fn records_free_their_saved_tensors_as_backward_proceeds() {
        let released = outstanding_during_backward(false);
        let retained = outstanding_during_backward(true);
        assert_eq!(released.len(), 6);
        // Each layer's record (its saved 256 KiB output) is freed once it ran, so what
        // backward holds falls layer by layer (after the first, where the gradient of
        // the sum, a broadcast scalar, becomes a full buffer) ...
        for w in released[1..].windows(2) {
            assert!(w[1] + (1 << 18) <= w[0], "{released:?}");
        }
        // ... while a retained graph keeps every saved tensor to the end.
        assert!(retained.windows(2).all(|w| w[1] >= w[0]), "{retained:?}");
        assert!(released[5] + 5 * (1 << 18) <= retained[5]);
    }

    #[test]
    fn a_failed_claim_releases_what_it_took() {
        let (a, b) = (leaf(&[1.0]), leaf(&[2.0]));
        let held = LeafClaim::new(vec![b.clone()]).unwrap();
        assert!(LeafClaim::new(vec![a.clone(), b.clone()]).is_err());
        // `a` was claimed first and released when the second claim failed.
        let again = LeafClaim::new(vec![a.clone()]).unwrap();
        drop((held, again));
        // A leaf listed twice in one pass is claimed once.
        assert!(LeafClaim::new(vec![a.clone(), a]).is_ok());
    }

    #[test]
    fn backward_passes_from_several_threads_succeed_or_are_refused_never_mixed() {
        // Each pass adds exactly 1.0 to every element (sums of small integers are exact
        // in any order), so the final gradient counts the passes that succeeded.
        let w = leaf(&[0.5; 64]);
        let ok = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..50 {
                        let loss = w.sum().unwrap();
                        match loss.backward() {
                            Ok(()) => {
                                ok.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            Err(Error::ConcurrentBackward { .. }) => {}
                            Err(e) => panic!("unexpected error {e}"),
                        }
                    }
                });
            }
        });
        let n = ok.into_inner() as f32;
        assert!(n >= 1.0);
        assert!(w.grad().unwrap().to_vec().unwrap().iter().all(|&g| g == n));
    }
}
