//! The connectionist temporal classification loss (Graves, Fernández, Gomez and
//! Schmidhuber 2006), PyTorch's `F.ctc_loss`, with its gradient.
//!
//! The forward (α) and backward (β) recursions run in **f64**, in log space, with a
//! fixed exponential and logarithm made of IEEE operations only ([`exp64`] and
//! `exactgrad_core::rng::ln_f64`), in the order written in `docs/ctc.md` (normative).
//! They are scalar code of this crate, the same for every backend, so the loss and its
//! gradient have the same bits in fast and exact mode, on every path and thread count.
//!
//! The gradient is the true partial derivative of the loss with respect to the
//! log-probabilities: `∂L/∂lp[t, c] = −w · exp(lcab(t, c) − lp[t, c] − log p)`, where
//! `lcab` is the log of `Σ α_t(s)·β_t(s)` over the positions `s` of the extended label
//! sequence that carry class `c`. PyTorch returns that plus `w·exp(lp[t, c])` (the part a
//! following `log_softmax` backward removes again); upstream of a `log_softmax` the two
//! agree (`docs/ctc.md` §4).

use super::{canon, Reduction};
use crate::engine::record_with;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::trace::{OpInfo, Value};
use exactgrad_core::backend::{try_collect, try_vec_filled, try_vec_with_capacity};
use exactgrad_core::check::checked_mul;
use exactgrad_core::rng::ln_f64;
use exactgrad_core::Backend;

// ----- arguments -----------------------------------------------------------------------------

/// The target label sequences of [`Tensor::ctc_loss`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtcTargets<'a> {
    /// Padded targets `[B, S]` in row-major order: row `b` holds its
    /// `target_lengths[b]` labels first; the rest of the row is ignored.
    Padded {
        /// The `B·S` entries.
        labels: &'a [i64],
        /// `[B, S]`.
        shape: [usize; 2],
    },
    /// Every target one after the other (`Σ target_lengths` labels).
    Concatenated(&'a [i64]),
}

/// The targets and lengths of a [`Tensor::ctc_loss`] batch (PyTorch's `targets`,
/// `input_lengths`, `target_lengths`), named so that the two lengths cannot be swapped
/// by position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtcBatch<'a> {
    /// The label sequences.
    pub targets: CtcTargets<'a>,
    /// The number of valid steps of each input (at most `T`).
    pub input_lengths: &'a [usize],
    /// The number of labels of each target.
    pub target_lengths: &'a [usize],
}

/// The options of [`Tensor::ctc_loss`], with PyTorch's defaults: blank 0, mean
/// reduction, infinite losses kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtcLossOptions {
    /// The class index of the blank (default 0).
    pub blank: usize,
    /// `None`: one loss per batch entry; `Mean` (default): each loss divided by
    /// `max(1, target length)`, then the mean over the batch; `Sum`: the sum.
    pub reduction: Reduction,
    /// Replace infinite losses (impossible alignments) by 0 (default false).
    pub zero_infinity: bool,
}

impl Default for CtcLossOptions {
    fn default() -> Self {
        Self {
            blank: 0,
            reduction: Reduction::Mean,
            zero_infinity: false,
        }
    }
}

// ----- the fixed f64 exponential and log-sum-exp ----------------------------------------------

/// `1/n!` for `n = 0 … 13`, each the correctly rounded quotient of exact integers.
const INV_FACTORIAL: [f64; 14] = {
    let mut c = [1.0f64; 14];
    let mut fact = 1.0f64;
    let mut n = 1;
    while n < 14 {
        fact *= n as f64; // exact: 13! < 2^53
        c[n] = 1.0 / fact;
        n += 1;
    }
    c
};

/// `e^x` in f64 with IEEE operations only (the same bits on every platform; within a few
/// ulp): `x = k·ln 2 + r` with `k` the nearest integer to `x·log2 e` and `r` reduced by
/// the two-part `ln 2` of Cody and Waite, `e^r` by its Taylor polynomial of degree 13
/// (Horner, `|r| ≤ 0.35`), then two exact or once-rounded scalings by powers of two.
/// Returns 0 below −745.14, +∞ above 709.79 and NaN for NaN.
pub fn exp64(x: f64) -> f64 {
    const LOG2E: f64 = core::f64::consts::LOG2_E;
    // ln 2 = LN2_HI + LN2_LO, LN2_HI with 32 trailing zero bits (k·LN2_HI is exact).
    const LN2_HI: f64 = f64::from_bits(0x3FE6_2E42_FEE0_0000);
    const LN2_LO: f64 = f64::from_bits(0x3DEA_39EF_3579_3C76);
    const ROUND: f64 = 6_755_399_441_055_744.0; // 1.5·2^52
    if x.is_nan() {
        return x;
    }
    if x > 709.79 {
        return f64::INFINITY;
    }
    if x < -745.14 {
        return 0.0;
    }
    let k = (x * LOG2E + ROUND) - ROUND;
    let r = (x - k * LN2_HI) - k * LN2_LO;
    let mut p = INV_FACTORIAL[13];
    for &c in INV_FACTORIAL[..13].iter().rev() {
        p = p * r + c;
    }
    let k = k as i64;
    let (k1, k2) = (k / 2, k - k / 2);
    let pow2 = |e: i64| f64::from_bits(((e + 1023) as u64) << 52);
    (p * pow2(k1)) * pow2(k2)
}

/// `log Σ e^{a_i}` over `terms` in their order: `m = max` (NaN if any is NaN, −∞ if all
/// are), `m + ln(Σ exp64(a_i − m))` with the sum from `+0` in order.
fn log_sum_exp(terms: impl Iterator<Item = f64> + Clone) -> f64 {
    let mut m = f64::NEG_INFINITY;
    for a in terms.clone() {
        if a.is_nan() {
            return a;
        }
        if a > m {
            m = a;
        }
    }
    if m == f64::NEG_INFINITY {
        return m;
    }
    let mut s = 0.0f64;
    for a in terms {
        // The maximum's term is exp64(0) = 1 exactly and a term more than 745.14 below
        // it is 0 (both checked by the tests), so neither needs the polynomial; a NaN
        // (∞ − ∞) still goes to exp64.
        let d = a - m;
        if d == 0.0 {
            s += 1.0;
        } else if d >= -745.14 || d.is_nan() {
            s += exp64(d);
        }
    }
    m + ln_f64(s)
}

// ----- the recursions ---------------------------------------------------------------------------

/// One batch entry: its valid steps, its extended label sequence (`blank, l_1, blank, …,
/// l_S, blank`) and where its log-probabilities are.
struct Entry {
    steps: usize,
    ext: Vec<usize>,
    target_len: usize,
}

/// The log-probabilities `[T, B, C]` in f32, indexed per step, entry and class.
struct LogProbs<'a> {
    v: &'a [f32],
    b: usize,
    c: usize,
}

impl LogProbs<'_> {
    fn at(&self, t: usize, b: usize, c: usize) -> f64 {
        f64::from(self.v[(t * self.b + b) * self.c + c])
    }
}

/// Whether position `s` of `ext` may be reached from `s − 2` (a label differing from the
/// label two positions back; never a blank).
fn skip_allowed(ext: &[usize], s: usize, blank: usize) -> bool {
    s >= 2 && ext[s] != blank && ext[s] != ext[s - 2]
}

/// A table of `steps × L′` f64 at −∞ for the recursions of entry `e`, obtained fallibly:
/// its size is the product of an input length and a target length, so a long input
/// with a long target is an error naming `ctc_loss`, never an abort.
fn table(e: &Entry) -> Result<Vec<f64>> {
    let op = "ctc_loss";
    let n = checked_mul(op, "input_lengths", e.steps, e.ext.len())?;
    Ok(try_vec_filled(op, n, f64::NEG_INFINITY)?)
}

/// α of entry `b`: `[steps × L′]` (row-major), log space.
fn alphas(lp: &LogProbs<'_>, b: usize, e: &Entry, blank: usize) -> Result<Vec<f64>> {
    let l = e.ext.len();
    let mut a = table(e)?;
    if e.steps == 0 {
        return Ok(a);
    }
    a[0] = lp.at(0, b, e.ext[0]);
    if l > 1 {
        a[1] = lp.at(0, b, e.ext[1]);
    }
    for t in 1..e.steps {
        let (prev, cur) = a.split_at_mut(t * l);
        let prev = &prev[(t - 1) * l..];
        for s in 0..l {
            let skip = skip_allowed(&e.ext, s, blank);
            let terms = [
                prev[s],
                if s >= 1 {
                    prev[s - 1]
                } else {
                    f64::NEG_INFINITY
                },
                if skip { prev[s - 2] } else { f64::NEG_INFINITY },
            ];
            let n = if skip {
                3
            } else if s >= 1 {
                2
            } else {
                1
            };
            cur[s] = lp.at(t, b, e.ext[s]) + log_sum_exp(terms[..n].iter().copied());
        }
    }
    Ok(a)
}

/// β of entry `b` (the emission at `t` included), `[steps × L′]`, log space.
fn betas(lp: &LogProbs<'_>, b: usize, e: &Entry, blank: usize) -> Result<Vec<f64>> {
    let l = e.ext.len();
    let mut be = table(e)?;
    if e.steps == 0 {
        return Ok(be);
    }
    let last = (e.steps - 1) * l;
    be[last + l - 1] = lp.at(e.steps - 1, b, e.ext[l - 1]);
    if l > 1 {
        be[last + l - 2] = lp.at(e.steps - 1, b, e.ext[l - 2]);
    }
    for t in (0..e.steps - 1).rev() {
        let (cur, next) = be.split_at_mut((t + 1) * l);
        let cur = &mut cur[t * l..];
        for s in 0..l {
            let skip = s + 2 < l && skip_allowed(&e.ext, s + 2, blank);
            let terms = [
                next[s],
                if s + 1 < l {
                    next[s + 1]
                } else {
                    f64::NEG_INFINITY
                },
                if skip { next[s + 2] } else { f64::NEG_INFINITY },
            ];
            let n = if skip {
                3
            } else if s + 1 < l {
                2
            } else {
                1
            };
            cur[s] = lp.at(t, b, e.ext[s]) + log_sum_exp(terms[..n].iter().copied());
        }
    }
    Ok(be)
}

/// `−log p` of entry `b`: `0` for an empty input with an empty target, `+∞` for an empty
/// input otherwise, else `−log_sum_exp(α_{T−1}(L′−1), α_{T−1}(L′−2))`.
fn nll(alpha: &[f64], e: &Entry) -> f64 {
    let l = e.ext.len();
    if e.steps == 0 {
        return if e.target_len == 0 {
            0.0
        } else {
            f64::INFINITY
        };
    }
    let last = &alpha[(e.steps - 1) * l..];
    let lp = if l > 1 {
        log_sum_exp([last[l - 1], last[l - 2]].into_iter())
    } else {
        last[0]
    };
    -lp
}

// ----- the operator ----------------------------------------------------------------------------

/// Checks the arguments; returns the entries of the batch.
fn entries(dims: (usize, usize, usize), batch: &CtcBatch<'_>, blank: usize) -> Result<Vec<Entry>> {
    let op = "ctc_loss";
    let (t, b, c) = dims;
    if blank >= c {
        return Err(Error::invalid(
            op,
            "blank",
            format!("blank = {blank} must be a class index below C = {c}"),
        ));
    }
    for (arg, len) in [
        ("input_lengths", batch.input_lengths.len()),
        ("target_lengths", batch.target_lengths.len()),
    ] {
        if len != b {
            return Err(Error::invalid(
                op,
                arg,
                format!("{len} lengths given for a batch of {b}"),
            ));
        }
    }
    for (i, &n) in batch.input_lengths.iter().enumerate() {
        if n > t {
            return Err(Error::invalid(
                op,
                "input_lengths",
                format!("input_lengths[{i}] = {n} is longer than the input's {t} steps"),
            ));
        }
    }
    let mut out = try_vec_with_capacity(op, b)?;
    let mut start = 0usize;
    match batch.targets {
        CtcTargets::Padded { labels, shape } => {
            if shape[0] != b || Some(labels.len()) != shape[0].checked_mul(shape[1]) {
                return Err(Error::invalid(
                    op,
                    "targets",
                    format!(
                        "padded targets of shape {shape:?} with {} labels do not fit a batch of {b} ([B, S] with B·S labels)",
                        labels.len()
                    ),
                ));
            }
            for (i, &n) in batch.target_lengths.iter().enumerate() {
                if n > shape[1] {
                    return Err(Error::invalid(
                        op,
                        "target_lengths",
                        format!(
                            "target_lengths[{i}] = {n} is longer than the padded targets' {} columns",
                            shape[1]
                        ),
                    ));
                }
            }
        }
        CtcTargets::Concatenated(labels) => {
            let total = batch
                .target_lengths
                .iter()
                .try_fold(0usize, |a, &n| a.checked_add(n));
            if total != Some(labels.len()) {
                return Err(Error::invalid(
                    op,
                    "target_lengths",
                    format!(
                        "concatenated targets hold {} labels but the target lengths add up to {}",
                        labels.len(),
                        total.map_or_else(|| "more than usize::MAX".to_string(), |n| n.to_string())
                    ),
                ));
            }
        }
    }
    for i in 0..b {
        let n = batch.target_lengths[i];
        let (labels, offset) = match batch.targets {
            CtcTargets::Padded { labels, shape } => (labels, i * shape[1]),
            CtcTargets::Concatenated(labels) => (labels, start),
        };
        start += n;
        // n ≤ the labels held in memory, so 2n + 1 does not overflow.
        let mut ext = try_vec_with_capacity(op, 2 * n + 1)?;
        ext.push(blank);
        for (j, &label) in labels[offset..offset + n].iter().enumerate() {
            if label < 0 || label as u64 >= c as u64 {
                return Err(Error::invalid(
                    op,
                    "targets",
                    format!("label {label} (entry {i}, position {j}) is out of range for C = {c} classes"),
                ));
            }
            if label as usize == blank {
                return Err(Error::invalid(
                    op,
                    "targets",
                    format!("label {label} (entry {i}, position {j}) is the blank index; targets must not contain blanks"),
                ));
            }
            ext.push(label as usize);
            ext.push(blank);
        }
        out.push(Entry {
            steps: batch.input_lengths[i],
            ext,
            target_len: n,
        });
    }
    Ok(out)
}

impl<B: Backend> Tensor<B> {
    /// The CTC loss of the log-probabilities `self` (`[T, B, C]`, or unbatched `[T, C]`;
    /// usually the output of `log_softmax` over `C`) against `batch.targets`
    /// (PyTorch's `F.ctc_loss`).
    ///
    /// For entry `b`, the loss is `−log p(target_b | steps 0 … input_lengths[b] − 1)`,
    /// summed over every alignment of the target with blanks and repeats, computed in f64
    /// (`docs/ctc.md`). An impossible alignment (too few steps for the labels and their
    /// repeats) gives `+∞`, or `0` with `zero_infinity`; its gradient is 0 either way.
    /// The reductions follow PyTorch: `None` gives `[B]` (a scalar unbatched), `Sum`
    /// the sum, `Mean` the mean over the batch of each loss divided by
    /// `max(1, target_length)`; each is rounded once to f32.
    ///
    /// The gradient is the exact partial derivative with respect to `self` (see the
    /// module documentation for how it differs from PyTorch's); steps at or past an
    /// entry's input length get 0.
    ///
    /// Fails (naming `ctc_loss` and the argument) when `self` is not 2-D or 3-D, `blank`
    /// is not below `C`, a list of lengths does not have `B` entries, an input length
    /// exceeds `T`, a target length exceeds the padded width (or the concatenated
    /// lengths do not add up), or a label is out of range or is the blank. The
    /// recursions keep a table of `input_length · (2·target_length + 1)` f64 per entry
    /// (two in the backward pass); a table the allocator refuses is an error naming
    /// `ctc_loss` (never an abort).
    ///
    /// ```
    /// use exactgrad_autograd::{CtcBatch, CtcLossOptions, CtcTargets, Reduction, Tensor};
    /// use exactgrad_backends::ScalarRefBackend;
    /// use exactgrad_core::Philox;
    ///
    /// # fn main() -> exactgrad_autograd::Result<()> {
    /// let b = ScalarRefBackend;
    /// let logits = Tensor::randn(&b, [6, 2, 4], 0.0, 1.0, &mut Philox::new(3))?.requires_grad()?;
    /// let lp = logits.log_softmax(-1)?;
    /// let batch = CtcBatch {
    ///     targets: CtcTargets::Padded { labels: &[1, 1, 2, 3, 0, 0], shape: [2, 3] },
    ///     input_lengths: &[6, 4],
    ///     target_lengths: &[3, 1],
    /// };
    /// let per_entry = lp.ctc_loss(batch, CtcLossOptions { reduction: Reduction::None, ..Default::default() })?;
    /// assert_eq!(per_entry.dims(), [2]);
    /// let loss = lp.ctc_loss(batch, CtcLossOptions::default())?;
    /// loss.backward()?;
    /// assert_eq!(logits.grad().unwrap().dims(), [6, 2, 4]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn ctc_loss(&self, batch: CtcBatch<'_>, options: CtcLossOptions) -> Result<Tensor<B>> {
        let _public = crate::engine::PublicOp::new("ctc_loss");
        let op = "ctc_loss";
        let unbatched = match self.rank() {
            2 => true,
            3 => false,
            _ => {
                return Err(Error::invalid(
                    op,
                    "log_probs",
                    format!(
                        "expects [T, B, C] or unbatched [T, C], got shape {:?}",
                        self.dims()
                    ),
                ))
            }
        };
        let (t, b, c) = if unbatched {
            (self.dims()[0], 1, self.dims()[1])
        } else {
            (self.dims()[0], self.dims()[1], self.dims()[2])
        };
        let blank = options.blank;
        let items = entries((t, b, c), &batch, blank)?;
        let be = self.backend();
        let mode = be.mode();
        let lpv = self.to_vec()?;
        let lp = LogProbs { v: &lpv, b, c };
        let mut losses: Vec<f64> = try_vec_with_capacity(op, b)?;
        for (i, e) in items.iter().enumerate() {
            let l = nll(&alphas(&lp, i, e, blank)?, e);
            losses.push(if options.zero_infinity && l == f64::INFINITY {
                0.0
            } else {
                l
            });
        }
        let out = match options.reduction {
            Reduction::None => {
                let v = try_collect(op, losses.iter().map(|&l| canon(mode, l as f32)))?;
                if unbatched {
                    Tensor::op_scalar(be, v[0])?
                } else {
                    Tensor::from_op_vec(be, v, [b])?
                }
            }
            Reduction::Sum => {
                let s: f64 = losses.iter().fold(0.0, |a, &l| a + l);
                Tensor::op_scalar(be, canon(mode, s as f32))?
            }
            Reduction::Mean => {
                let s: f64 = losses
                    .iter()
                    .zip(&items)
                    .fold(0.0, |a, (&l, e)| a + l / e.target_len.max(1) as f64);
                Tensor::op_scalar(be, canon(mode, (s / b as f64) as f32))?
            }
        };
        let shape = self.dims().to_vec();
        let reduction = options.reduction;
        let info = crate::trace::info(|| {
            let as_i64 = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<i64>>();
            let mut info = OpInfo::new()
                .attr("blank", Value::Int(blank as i64))
                .attr(
                    "reduction",
                    Value::Str(format!("{reduction:?}").to_lowercase()),
                )
                .attr("zero_infinity", Value::Bool(options.zero_infinity))
                .ints(
                    "input_lengths",
                    vec![batch.input_lengths.len()],
                    as_i64(batch.input_lengths),
                )
                .ints(
                    "target_lengths",
                    vec![batch.target_lengths.len()],
                    as_i64(batch.target_lengths),
                );
            info = match batch.targets {
                CtcTargets::Padded { labels, shape } => info
                    .attr("targets", Value::Str("padded".into()))
                    .ints("labels", shape.to_vec(), labels.to_vec()),
                CtcTargets::Concatenated(labels) => info
                    .attr("targets", Value::Str("concatenated".into()))
                    .ints("labels", vec![labels.len()], labels.to_vec()),
            };
            info
        });
        Ok(record_with(op, out, &[self], info, move || {
            move |g: &Tensor<B>| {
                let gv = g.to_vec()?;
                let be = g.backend();
                let mode = be.mode();
                let lp = LogProbs { v: &lpv, b, c };
                let mut grad = super::zeroed_vec(op, t * b * c)?;
                for (i, e) in items.iter().enumerate() {
                    let w = match reduction {
                        Reduction::None => f64::from(gv[i]),
                        Reduction::Sum => f64::from(gv[0]),
                        Reduction::Mean => {
                            (f64::from(gv[0]) / e.target_len.max(1) as f64) / b as f64
                        }
                    };
                    entry_gradient(&lp, i, e, blank, w, mode, &mut grad)?;
                }
                Ok(vec![Some(Tensor::from_vec(be, grad, shape.clone())?)])
            }
        }))
    }
}

/// Writes `∂L/∂lp[t, i, c]` (times the upstream weight `w`) of entry `i` into `grad`
/// (`[T, B, C]`, zero elsewhere): 0 for an infinite loss and past the input length.
fn entry_gradient(
    lp: &LogProbs<'_>,
    i: usize,
    e: &Entry,
    blank: usize,
    w: f64,
    mode: exactgrad_core::ComputeMode,
    grad: &mut [f32],
) -> Result<()> {
    let alpha = alphas(lp, i, e, blank)?;
    let loss = nll(&alpha, e);
    if loss == f64::INFINITY || e.steps == 0 {
        return Ok(());
    }
    let beta = betas(lp, i, e, blank)?;
    let l = e.ext.len();
    // The positions of each class present in l′, in increasing order.
    let mut classes: Vec<(usize, Vec<usize>)> = Vec::new();
    for (s, &cls) in e.ext.iter().enumerate() {
        match classes.iter_mut().find(|(c, _)| *c == cls) {
            Some((_, at)) => at.push(s),
            None => classes.push((cls, vec![s])),
        }
    }
    for t in 0..e.steps {
        let (a, bt) = (&alpha[t * l..(t + 1) * l], &beta[t * l..(t + 1) * l]);
        for (cls, at) in &classes {
            let lcab = log_sum_exp(at.iter().map(|&s| a[s] + bt[s]));
            let v = if lcab == f64::NEG_INFINITY {
                0.0
            } else {
                -exp64((lcab - lp.at(t, i, *cls)) + loss) * w
            };
            grad[(t * lp.b + i) * lp.c + cls] = canon(mode, v as f32);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp64_is_close_to_the_platform_exponential() {
        let mut worst = 0.0f64;
        let mut x = -745.0f64;
        while x < 709.0 {
            let (a, b) = (exp64(x), x.exp());
            if b > 1e-300 {
                worst = worst.max(((a - b) / b).abs());
            }
            x += 0.137;
        }
        assert!(worst < 8.0 * f64::EPSILON, "worst relative error {worst:e}");
        assert_eq!(exp64(0.0), 1.0);
        assert_eq!(exp64(-800.0), 0.0);
        assert_eq!(exp64(800.0), f64::INFINITY);
        assert_eq!(exp64(f64::NEG_INFINITY), 0.0);
        assert!(exp64(f64::NAN).is_nan());
        // Subnormal results.
        let tiny = exp64(-740.0);
        assert!(tiny > 0.0 && ((tiny - (-740.0f64).exp()) / (-740.0f64).exp()).abs() < 1e-10);
    }

    #[test]
    fn the_shortcuts_of_log_sum_exp_give_exp64s_values() {
        // log_sum_exp adds 1 for the maximum's term and nothing for a term 745.14 or more
        // below it, instead of calling exp64: the same bits only if exp64 gives exactly
        // these values there.
        assert_eq!(exp64(0.0).to_bits(), 1.0f64.to_bits());
        assert_eq!(exp64(-0.0).to_bits(), 1.0f64.to_bits());
        for d in [-745.1400000000001, -746.0, -1e300, f64::NEG_INFINITY] {
            assert_eq!(exp64(d).to_bits(), 0.0f64.to_bits(), "{d}");
        }
        assert!(log_sum_exp([f64::INFINITY, 0.0].into_iter()).is_nan());
    }

    #[test]
    fn log_sum_exp_handles_infinities() {
        let n = f64::NEG_INFINITY;
        assert_eq!(log_sum_exp([n, n].into_iter()), n);
        assert_eq!(log_sum_exp([0.0, n].into_iter()), 0.0);
        let v = log_sum_exp([0.0, 0.0].into_iter());
        assert!((v - 2f64.ln()).abs() < 1e-15);
        assert!(log_sum_exp([f64::NAN, 0.0].into_iter()).is_nan());
    }
}
