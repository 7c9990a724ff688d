//! Data-parallel training whose result does not depend on the number of processes.

use crate::comm::Comm;
use crate::error::{Error, Result};
use crate::plan::{DdpConfig, ReductionPlan, Shard, ShardResults, StepReport};
use crate::tree::{self, Node};
use exactgrad::nn::{Module, ModuleExt};
use exactgrad::prelude::*;
use exactgrad::trace::{self, Kind, Value};
use mpi::datatype::{Partition, PartitionMut};
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::{CommunicatorCollectives, Root};
use mpi::Count;
use std::fmt;
use std::ops::Range;
use std::time::Instant;

/// Data-parallel training of one module across the ranks of a [`Comm`], with gradients
/// that have the same bits for every world size and every assignment of shards to
/// ranks (`docs/distributed.md`).
///
/// Construction checks that every rank has the same configuration and copies rank 0's
/// parameters and buffers to all ranks. Each [`DataParallel::step`] computes this rank's
/// shards, combines every shard's gradients by the fixed tree of [`crate::tree`], and
/// installs the mean gradient over the global batch in every parameter (and the
/// combined buffers), ready for the optimizer's `step`, which then runs identically on
/// every rank.
pub struct DataParallel<B: Backend> {
    comm: SimpleCommunicator,
    rank: usize,
    params: Vec<(String, Tensor<B>)>,
    buffers: Vec<(String, Tensor<B>)>,
    config: DdpConfig,
    plan: ReductionPlan,
    grad_len: usize,
    buffer_len: usize,
    step: u64,
    /// Buffers kept from step to step, so that a step allocates no large buffer.
    scratch: Scratch,
}

/// Reused storage of the exchange.
#[derive(Default)]
struct Scratch {
    send: Vec<u8>,
    recv: Vec<u8>,
    reduced: Vec<f32>,
    gathered: Vec<f32>,
    tree: Vec<Vec<f64>>,
    block: Vec<f64>,
    leaves: Vec<Vec<f32>>,
}

impl<B: Backend> fmt::Debug for DataParallel<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataParallel")
            .field("rank", &self.rank)
            .field("ranks", &self.plan.ranks)
            .field("config", &self.config)
            .field("parameters", &self.params.len())
            .field("buffers", &self.buffers.len())
            .field("step", &self.step)
            .finish()
    }
}

/// The configuration of one rank as text lines, compared across ranks.
fn describe<B: Backend>(
    backend_mode: ComputeMode,
    backend_name: &str,
    config: &DdpConfig,
    owner: &[usize],
    params: &[(String, Tensor<B>)],
    buffers: &[(String, Tensor<B>)],
) -> Vec<String> {
    let mut lines = vec![
        format!("shards {}", config.shards),
        format!("assignment {owner:?}"),
        format!("compute mode {backend_mode:?}"),
    ];
    if backend_mode != ComputeMode::Exact {
        // Fast mode is deterministic for one ISA path only.
        lines.push(format!("backend {backend_name}"));
    }
    lines.push(format!("{} parameters", params.len()));
    for (name, t) in params {
        lines.push(format!("parameter `{name}` of shape {:?}", t.dims()));
    }
    lines.push(format!("{} buffers", buffers.len()));
    for (name, t) in buffers {
        lines.push(format!("buffer `{name}` of shape {:?}", t.dims()));
    }
    lines
}

fn flat_values<B: Backend>(tensors: &[(String, Tensor<B>)]) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    for (_, t) in tensors {
        out.extend(t.to_vec()?);
    }
    Ok(out)
}

/// Writes `values` into the tensors, in order, under `no_grad`.
fn install<B: Backend>(tensors: &[(String, Tensor<B>)], values: &[f32]) -> Result<()> {
    let _guard = no_grad();
    let mut at = 0;
    for (_, t) in tensors {
        let n = t.numel();
        t.copy_(&Tensor::from_slice(
            t.backend(),
            &values[at..at + n],
            t.dims(),
        )?)?;
        at += n;
    }
    Ok(())
}

fn counts(v: &[usize], op: &'static str) -> Result<Vec<Count>> {
    v.iter()
        .map(|&n| {
            Count::try_from(n).map_err(|_| {
                Error::invalid(
                    op,
                    "model",
                    format!("{n} bytes in one MPI buffer exceed MPI's limit of 2^31 - 1"),
                )
            })
        })
        .collect()
}

fn displacements(counts: &[Count]) -> Vec<Count> {
    let mut at = 0;
    counts
        .iter()
        .map(|&c| {
            let d = at;
            at += c;
            d
        })
        .collect()
}

impl<B: Backend> DataParallel<B> {
    /// Sets up data-parallel training of `module` over the ranks of `comm`: checks that
    /// every rank has the same shard count, assignment, compute mode (and, in fast mode,
    /// the same backend path) and the same parameter and buffer names and shapes, then
    /// broadcasts rank 0's parameter and buffer values to every rank.
    ///
    /// Collective. Every rank gets the same [`Error::Inconsistent`] naming the first
    /// difference when the configurations differ, before any value is changed.
    pub fn new<M: Module<B> + ?Sized>(comm: &Comm, module: &M, config: DdpConfig) -> Result<Self> {
        let op = "DataParallel::new";
        let world = comm.mpi().duplicate();
        let (rank, ranks) = (comm.rank(), comm.size());
        let params = module.named_parameters();
        let buffers = module.named_buffers();
        let backend = params
            .first()
            .or(buffers.first())
            .map(|(_, t)| t.backend().clone());

        // A configuration that is invalid on its own still takes part in the comparison
        // (as an error line), so that no rank is left waiting.
        let mut local_error = None;
        let owner = if config.shards == 0 {
            local_error = Some(Error::invalid(op, "shards", "must be at least 1"));
            Vec::new()
        } else {
            match config.assignment.resolve(config.shards, ranks) {
                Ok(o) => o,
                Err(e) => {
                    local_error = Some(e);
                    Vec::new()
                }
            }
        };
        let (mode, name) = match &backend {
            Some(b) => (b.mode(), b.name()),
            None => {
                local_error.get_or_insert(Error::invalid(
                    op,
                    "module",
                    "has no parameters or buffers to train",
                ));
                (ComputeMode::Exact, String::new())
            }
        };
        let mut lines = describe(mode, &name, &config, &owner, &params, &buffers);
        if let Some(e) = &local_error {
            lines.push(format!("invalid configuration: {e}"));
        }
        let text = lines.join("\n").into_bytes();

        // Every rank gathers every description and compares it with rank 0's.
        let mut lengths = vec![0u64; ranks];
        world.all_gather_into(&(text.len() as u64), &mut lengths[..]);
        let lens: Vec<usize> = lengths.iter().map(|&n| n as usize).collect();
        let c = counts(&lens, op)?;
        let d = displacements(&c);
        let mut all = vec![0u8; lens.iter().sum()];
        {
            let mut part = PartitionMut::new(&mut all[..], &c[..], &d[..]);
            world.all_gather_varcount_into(&text[..], &mut part);
        }
        let texts: Vec<String> = (0..ranks)
            .map(|r| {
                let at = d[r] as usize;
                String::from_utf8_lossy(&all[at..at + lens[r]]).into_owned()
            })
            .collect();
        if let Some(detail) = first_difference(&texts) {
            return Err(Error::Inconsistent { op, detail });
        }
        if let Some(e) = local_error {
            // The same invalid configuration on every rank.
            return Err(e);
        }

        // Rank 0's values everywhere.
        let root = world.process_at_rank(0);
        let mut values = flat_values(&params)?;
        values.extend(flat_values(&buffers)?);
        root.broadcast_into(&mut values[..]);
        let grad_len: usize = params.iter().map(|(_, t)| t.numel()).sum();
        install(&params, &values[..grad_len])?;
        install(&buffers, &values[grad_len..])?;
        let buffer_len = values.len() - grad_len;

        let plan = ReductionPlan::new(owner, ranks, grad_len + buffer_len + 2)?;
        // Every rank's send and receive buffers must be addressable with MPI's int
        // counts and displacements (the same check on every rank).
        let all_widths: usize = (0..ranks).map(|r| plan.piece_width(r)).sum();
        for r in 0..ranks {
            let too_big =
                || Error::invalid(op, "model", "the exchange buffers' sizes overflow usize");
            let send = plan
                .len
                .checked_mul(plan.piece_width(r))
                .ok_or_else(too_big)?;
            let recv = plan
                .chunk(r)
                .len()
                .checked_mul(all_widths)
                .ok_or_else(too_big)?;
            counts(&[send], op)?;
            counts(&[recv], op)?;
        }
        Ok(Self {
            comm: world,
            rank,
            params,
            buffers,
            config,
            plan,
            grad_len,
            buffer_len,
            step: 0,
            scratch: Scratch::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &DdpConfig {
        &self.config
    }

    /// The communication plan.
    pub fn plan(&self) -> &ReductionPlan {
        &self.plan
    }

    /// The shards this rank computes, in increasing order.
    pub fn local_shards(&self) -> Vec<usize> {
        (0..self.config.shards)
            .filter(|&s| self.plan.owner[s] == self.rank)
            .collect()
    }

    /// Steps done so far.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// The examples of shard `index` in a global batch of `batch` examples.
    pub fn shard_range(&self, index: usize, batch: usize) -> Range<usize> {
        // In u128, so that `index · batch` cannot wrap (as the tree's plan computes it).
        let s = self.config.shards as u128;
        let at = |i: usize| (i as u128 * batch as u128 / s) as usize;
        at(index)..at(index.saturating_add(1))
    }

    /// One data-parallel step over a global batch of `batch` examples: computes this
    /// rank's shards, combines all shards, and leaves in every parameter's gradient the
    /// mean gradient over the global batch (and in every buffer the combined value),
    /// with the same bits on every rank and for every world size. Call the optimizer's
    /// `step` afterwards. The same as [`DataParallel::compute_shards`] followed by
    /// [`DataParallel::combine`].
    ///
    /// `shard_loss` gets each local shard in increasing order and returns the loss of
    /// every example of the shard: a tensor of shape `[shard.range.len()]` (cross
    /// entropy with `Reduction::None`, for instance). Every shard's forward pass starts
    /// from the buffer values of the step's start, so batch normalisation uses each
    /// shard's own statistics.
    ///
    /// Collective: every rank calls it with the same `batch`. Fails when `batch` is
    /// smaller than the number of shards, when a loss has the wrong shape, when the
    /// ranks disagree on `batch`, or with the closure's error (the other ranks are then
    /// blocked in the exchange: return the error from the closure of
    /// [`crate::run`], which ends every rank).
    pub fn step<E>(
        &mut self,
        batch: usize,
        shard_loss: impl FnMut(&Shard) -> std::result::Result<Tensor<B>, E>,
    ) -> Result<StepReport>
    where
        Error: From<E>,
    {
        let local = self.compute_shards(batch, shard_loss)?;
        self.combine(local)
    }

    /// The first half of [`DataParallel::step`], local to this rank: runs the forward
    /// and backward pass of each of this rank's shards and keeps their gradients,
    /// buffer changes and losses. The parameters' gradients are cleared afterwards and
    /// the buffers are left as the last shard changed them, until
    /// [`DataParallel::combine`].
    pub fn compute_shards<E>(
        &mut self,
        batch: usize,
        mut shard_loss: impl FnMut(&Shard) -> std::result::Result<Tensor<B>, E>,
    ) -> Result<ShardResults>
    where
        Error: From<E>,
    {
        let op = "DataParallel::compute_shards";
        let shards = self.config.shards;
        if batch < shards {
            return Err(Error::invalid(
                op,
                "batch",
                format!("a global batch of {batch} examples cannot fill {shards} shards"),
            ));
        }
        if batch > 1 << 24 {
            return Err(Error::invalid(
                op,
                "batch",
                format!("{batch} examples exceed 2^24, the largest count exact in f32"),
            ));
        }
        let start = Instant::now();
        let buffers0 = flat_values(&self.buffers)?;
        let mut leaves: Vec<Option<Vec<f32>>> = vec![None; shards];
        let local = self.local_shards();
        for (k, &s) in local.iter().enumerate() {
            if k > 0 && !self.buffers.is_empty() {
                install(&self.buffers, &buffers0)?;
            }
            for (_, p) in &self.params {
                p.clear_grad();
            }
            let shard = Shard {
                index: s,
                range: self.shard_range(s, batch),
                step: self.step,
            };
            // The shard's records form a section of the step of their own, so that the
            // traces of every world size merge into one sequence (docs/debugging.md).
            let _section = trace::shard(s);
            let losses = shard_loss(&shard)?;
            if losses.dims() != [shard.range.len()] {
                return Err(Error::invalid(
                    op,
                    "shard_loss",
                    format!(
                        "shard {s} returned a loss of shape {:?}; expected one loss per example, [{}] (use Reduction::None)",
                        losses.dims(),
                        shard.range.len()
                    ),
                ));
            }
            let total = losses.sum()?;
            total.backward()?;
            let mut leaf = self.scratch.leaves.pop().unwrap_or_default();
            leaf.clear();
            leaf.reserve(self.plan.len);
            for (_, p) in &self.params {
                match p.grad() {
                    Some(g) => leaf.extend(g.to_vec()?),
                    None => leaf.extend(std::iter::repeat_n(0.0, p.numel())),
                }
            }
            // Buffers travel as this shard's change, so an untouched buffer stays exact.
            let now = flat_values(&self.buffers)?;
            leaf.extend(now.iter().zip(&buffers0).map(|(&b, &b0)| b - b0));
            leaf.push(total.item()?);
            leaf.push(shard.range.len() as f32);
            // What this shard sends: its gradients, buffer changes, loss and count.
            let mut rec = trace::record(Kind::Reduction, "shard_contribution")
                .attr("shard", Value::Int(s as i64));
            rec.host("contribution", &[leaf.len()], &leaf, true);
            rec.write();
            leaves[s] = Some(leaf);
        }
        for (_, p) in &self.params {
            p.clear_grad();
        }
        Ok(ShardResults {
            step: self.step,
            batch,
            leaves,
            buffers0,
            local: local.len(),
            compute: start.elapsed(),
        })
    }

    /// The second half of [`DataParallel::step`], collective: combines every rank's
    /// [`ShardResults`] of this step and installs the mean gradients and the combined
    /// buffers.
    ///
    /// Fails when `local` was computed for another step or the ranks disagree on the
    /// batch.
    pub fn combine(&mut self, local: ShardResults) -> Result<StepReport> {
        let op = "DataParallel::combine";
        if local.step != self.step || local.leaves.len() != self.config.shards {
            return Err(Error::invalid(
                op,
                "local",
                format!(
                    "computed for step {} of a {}-shard run; this is step {} of a {}-shard run",
                    local.step,
                    local.leaves.len(),
                    self.step,
                    self.config.shards
                ),
            ));
        }
        let batch = local.batch;
        let start = Instant::now();
        self.exchange(&local.leaves, batch, &local.buffers0)?;
        // The leaf vectors serve the next step.
        self.scratch
            .leaves
            .extend(local.leaves.into_iter().flatten());
        let reduced = std::mem::take(&mut self.scratch.gathered);
        let g = self.grad_len;
        let nb = self.buffer_len;
        let examples = reduced[g + nb + 1];
        if examples != batch as f32 {
            return Err(Error::invalid(
                op,
                "batch",
                format!(
                    "this rank was given a batch of {batch} examples but the shards of all ranks hold {examples}; every rank must pass the same batch"
                ),
            ));
        }
        let mut at = 0;
        for (_, p) in &self.params {
            let n = p.numel();
            p.set_grad(Some(Tensor::from_slice(
                p.backend(),
                &reduced[at..at + n],
                p.dims(),
            )?))?;
            at += n;
        }
        install(&self.buffers, &reduced[g..g + nb])?;
        if trace::is_recording() {
            // The combination: the same on every rank and every world size, with the
            // installed gradients and buffers as outputs (the optimizer's records read
            // them from here).
            let mut rec = trace::record(Kind::Reduction, "combine")
                .attr("shards", Value::Int(self.config.shards as i64))
                .attr("batch", Value::Int(batch as i64));
            rec.host("combined", &[reduced.len()], &reduced, true);
            for (name, p) in &self.params {
                if let Some(g) = p.grad() {
                    rec.output(&format!("grad {name}"), &g);
                }
            }
            for (name, t) in &self.buffers {
                rec.output(&format!("buffer {name}"), t);
            }
            rec.write();
        }
        let loss = reduced[g + nb] / batch as f32;
        self.scratch.gathered = reduced;
        let exchange = start.elapsed();
        self.step += 1;
        Ok(StepReport {
            loss,
            examples: batch,
            local_shards: local.local,
            bytes_sent: self.plan.bytes_sent(self.rank),
            compute: local.compute,
            exchange,
        })
    }

    /// Combines the shards' vectors: pieces to the chunk owners, the tree above them at
    /// each owner, then the final values gathered everywhere, into
    /// `self.scratch.gathered`.
    fn exchange(
        &mut self,
        leaves: &[Option<Vec<f32>>],
        batch: usize,
        buffers0: &[f32],
    ) -> Result<()> {
        let op = "DataParallel::combine";
        let plan = &self.plan;
        let ranks = plan.ranks;
        let me = self.rank;
        let sc = &mut self.scratch;
        let leaf = |s: usize| -> &[f32] { leaves[s].as_deref().expect("a local shard") };
        let mine: Vec<Node> = plan
            .pieces
            .iter()
            .filter(|p| p.rank == me)
            .map(|p| p.node)
            .collect();

        // Reduce-scatter: for every destination, this rank's pieces over its chunk, a leaf
        // as f32 bits, an inner node as f64, little-endian.
        sc.send.clear();
        // An empty Vec<u8> points at address 1, which Open MPI reads as MPI_IN_PLACE: every
        // buffer handed to MPI owns an allocation, even when nothing is sent.
        sc.send.reserve(1);
        let mut send_lens = Vec::with_capacity(ranks);
        for d in 0..ranks {
            let c = plan.chunk(d);
            let before = sc.send.len();
            for &node in &mine {
                if node.is_leaf() {
                    for x in &leaf(node.lo)[c.clone()] {
                        sc.send.extend_from_slice(&x.to_le_bytes());
                    }
                } else {
                    let send = &mut sc.send;
                    tree::evaluate_leaves(node, c.clone(), &leaf, &mut |_, v| {
                        for x in v {
                            send.extend_from_slice(&x.to_le_bytes());
                        }
                    });
                }
            }
            send_lens.push(sc.send.len() - before);
        }
        let chunk = plan.chunk(me);
        let m = chunk.len();
        let recv_lens: Vec<usize> = (0..ranks).map(|s| m * plan.piece_width(s)).collect();
        let scount = counts(&send_lens, op)?;
        let rcount = counts(&recv_lens, op)?;
        let (sdispl, rdispl) = (displacements(&scount), displacements(&rcount));
        sc.recv.resize(recv_lens.iter().sum(), 0);
        sc.recv.reserve(1);
        {
            let sp = Partition::new(&sc.send[..], &scount[..], &sdispl[..]);
            let mut rp = PartitionMut::new(&mut sc.recv[..], &rcount[..], &rdispl[..]);
            self.comm.all_to_all_varcount_into(&sp, &mut rp);
        }

        // Where each piece's slice of this chunk starts in the received bytes.
        let mut at: Vec<usize> = rdispl.iter().map(|&x| x as usize).collect();
        let located: Vec<(Node, usize)> = plan
            .pieces
            .iter()
            .map(|p| {
                let start = at[p.rank];
                at[p.rank] += m * p.node.width();
                (p.node, start)
            })
            .collect();

        // The owner's tree above the pieces and the final arithmetic, block by block.
        let (g, nb) = (self.grad_len, self.buffer_len);
        let n = batch as f32;
        let s = self.config.shards as f32;
        let root = Node::root(self.config.shards);
        sc.tree
            .resize_with(tree::depth(self.config.shards), || vec![0.0; tree::BLOCK]);
        sc.block.resize(tree::BLOCK, 0.0);
        sc.reduced.clear();
        sc.reduced.reserve(1);
        let recv = &sc.recv;
        let mut start = 0;
        while start < m {
            let end = (start + tree::BLOCK).min(m);
            let out = &mut sc.block[..end - start];
            tree::evaluate_into(root, out, &mut sc.tree, &mut |node, dst| {
                let Some(&(_, base)) = located.iter().find(|(p, _)| *p == node) else {
                    return false;
                };
                if node.is_leaf() {
                    let bytes = &recv[base + 4 * start..base + 4 * end];
                    for (d, b) in dst.iter_mut().zip(bytes.chunks_exact(4)) {
                        *d = f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                    }
                } else {
                    let bytes = &recv[base + 8 * start..base + 8 * end];
                    for (d, b) in dst.iter_mut().zip(bytes.chunks_exact(8)) {
                        *d = f64::from_le_bytes(b.try_into().expect("8 bytes"));
                    }
                }
                true
            });
            for (k, &t) in out.iter().enumerate() {
                let i = chunk.start + start + k;
                let t = t as f32;
                sc.reduced.push(if i < g {
                    t / n
                } else if i < g + nb {
                    buffers0[i - g] + t / s
                } else {
                    t
                });
            }
            start = end;
        }

        // All-gather the chunks.
        let chunk_lens: Vec<usize> = (0..ranks).map(|r| plan.chunk(r).len()).collect();
        let ccount = counts(&chunk_lens, op)?;
        let cdispl = displacements(&ccount);
        sc.gathered.resize(plan.len, 0.0);
        {
            let mut part = PartitionMut::new(&mut sc.gathered[..], &ccount[..], &cdispl[..]);
            self.comm
                .all_gather_varcount_into(&sc.reduced[..], &mut part);
        }
        Ok(())
    }
}

/// The first line in which a rank's description differs from rank 0's, as a message.
pub(crate) fn first_difference(texts: &[String]) -> Option<String> {
    let base: Vec<&str> = texts[0].lines().collect();
    let differing: Vec<usize> = (1..texts.len()).filter(|&r| texts[r] != texts[0]).collect();
    let &r = differing.first()?;
    let other: Vec<&str> = texts[r].lines().collect();
    let i = (0..base.len().max(other.len()))
        .find(|&i| base.get(i) != other.get(i))
        .unwrap_or(0);
    let show = |l: Option<&&str>| l.map_or_else(|| "nothing".to_string(), |s| s.to_string());
    let more = if differing.len() > 1 {
        format!(" (ranks {differing:?} differ from rank 0)")
    } else {
        String::new()
    };
    Some(format!(
        "rank 0 has {}, rank {r} has {}{more}",
        show(base.get(i)),
        show(other.get(i))
    ))
}
