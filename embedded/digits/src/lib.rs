//! One training program for the arena tape, the same source on a desktop and on a
//! microcontroller: an MLP 64 → 32 → 10 (tanh, cross entropy) trained by mini-batch SGD
//! on a subset of the 8×8 digits, in an arena of exactly [`ARENA_BYTES`] bytes.
//!
//! The crate is `no_std` and never allocates: the data are `static` arrays cut out of
//! the digits file at compile time ([`data`]), the parameters and activations are arrays
//! on the stack of [`train`], and everything the tape stores lives in its [`Arena`].
//! Every number it computes goes through the tape's `f32` arithmetic (the exact
//! `ScalarRefBackend` kernels, `docs/arithmetic.md`) or through integer operations, so
//! the final parameters, and [`Report::hash`], are the same bits on every target:
//! [`PINNED_HASH`]. The host binary (`tape-digits-host`) and the device binary
//! (`tape-digits-device`) print the same lines, made here.
#![no_std]
#![warn(missing_docs)]

pub mod data;

use core::fmt;
use data::{CLASSES, PIXELS, TEST, TRAIN};
use exactgrad_core::GradHasher;
use exactgrad_tape::operators::{cross_entropy, linear, tanh, CrossEntropy, Linear, Tanh};
use exactgrad_tape::{
    record_size, Arena, BufferView, Parameter, RecordingScope, Status, Tape, ALIGN,
};

/// Width of the hidden layer.
pub const HIDDEN: usize = 32;
/// Images per SGD step.
pub const BATCH: usize = 16;
/// Passes over the training images.
pub const EPOCHS: usize = 8;
/// SGD steps in the whole run.
pub const STEPS: usize = EPOCHS * TRAIN / BATCH;
/// The SGD learning rate (applied to the gradient summed over a batch, divided by
/// [`BATCH`]).
pub const LEARNING_RATE: f32 = 0.5;
/// Seed of the xorshift32 generator of the initial weights and the shuffles.
pub const SEED: u32 = 0x2545_F491;

/// The hash (`docs/arithmetic.md` §2) of the trained parameters `W1, b1, W2, b2`: the same
/// on x86-64, aarch64, a Cortex-M4F and a Cortex-M3 with software floating point, and
/// reproduced by the eager engine on `ScalarRefBackend` (`host/tests/eager.rs`).
pub const PINNED_HASH: u64 = 0xc635_c9db_7e4f_ccea;

const _: () = assert!(TRAIN.is_multiple_of(BATCH) && TRAIN <= u16::MAX as usize);

const fn gradient(len: usize) -> usize {
    (len * core::mem::size_of::<f32>()).div_ceil(ALIGN) * ALIGN
}

/// Arena bytes taken by gradients: the parameters' and the intermediates' (`h`, `a`,
/// `logits`, `loss`), each array rounded up to [`ALIGN`].
pub const GRADIENT_BYTES: usize = gradient(HIDDEN * PIXELS)
    + gradient(HIDDEN)
    + gradient(CLASSES * HIDDEN)
    + gradient(CLASSES)
    + 2 * gradient(HIDDEN)
    + gradient(CLASSES)
    + gradient(1);
/// Arena bytes taken by the records of one sample: two `linear`, one `tanh`, one
/// `cross_entropy` (their sizes depend on the target's pointer width).
pub const RECORD_BYTES: usize = 2 * record_size::<f32, Linear<f32>>()
    + record_size::<f32, Tanh<f32>>()
    + record_size::<f32, CrossEntropy<f32>>();
/// The arena: exactly what one training step needs.
pub const ARENA_BYTES: usize = GRADIENT_BYTES + RECORD_BYTES;

/// Hooks into a training run (timing, progress output); all default to nothing.
pub trait Observer {
    /// Before the first sample of an SGD step.
    fn step_begin(&mut self) {}
    /// After the step's parameter update.
    fn step_end(&mut self) {}
    /// After each epoch.
    fn epoch(&mut self, _epoch: &Epoch) {}
}

/// An observer that does nothing.
impl Observer for () {}

/// The summary of one epoch; its `Display` is the line both binaries print.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Epoch {
    /// 1-based epoch number.
    pub number: usize,
    /// Mean cross entropy of the epoch's samples, each taken before its step's update
    /// (summed in `f32`, in sample order, divided by [`TRAIN`]).
    pub mean_loss: f32,
}

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "epoch {:2}  mean loss {:.6} (bits 0x{:08x})",
            self.number,
            self.mean_loss,
            self.mean_loss.to_bits()
        )
    }
}

/// The first line both binaries print: what is trained.
pub struct Banner;

impl fmt::Display for Banner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "digits MLP {PIXELS}-{HIDDEN}-{CLASSES} (tanh) on the arena tape: \
             {TRAIN} training and {TEST} held-out images, SGD batch {BATCH}, \
             {EPOCHS} epochs = {STEPS} steps"
        )
    }
}

/// What a training run reached.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Report {
    /// Training images classified correctly after training.
    pub train_correct: usize,
    /// Held-out images classified correctly.
    pub test_correct: usize,
    /// The mean loss of the last epoch.
    pub last_loss: f32,
    /// Hash of the trained parameters `W1, b1, W2, b2` (`docs/arithmetic.md` §2).
    pub hash: u64,
    /// The tape's largest arena use in bytes.
    pub peak_bytes: usize,
    /// The first error any step or evaluation left on the tape ([`Status::Ok`] if none).
    pub status: Status,
    /// SGD steps taken.
    pub steps: usize,
}

impl Report {
    /// `Ok` when the run kept the tape's status `Ok`, filled its arena exactly and gave
    /// [`PINNED_HASH`]; otherwise what went wrong.
    pub fn check(&self) -> Result<(), &'static str> {
        if !self.status.is_ok() {
            Err("the tape reported an error")
        } else if self.steps != STEPS {
            Err("wrong number of steps")
        } else if self.peak_bytes != ARENA_BYTES {
            Err("the arena's peak use differs from its computed size")
        } else if self.hash != PINNED_HASH {
            Err("the parameter hash differs from the pinned hash")
        } else {
            Ok(())
        }
    }

    /// The arena line (its numbers depend on the target's pointer width).
    pub fn memory(&self) -> impl fmt::Display + '_ {
        MemoryLine(self)
    }
}

/// The target-independent result lines.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "training accuracy {}/{TRAIN}", self.train_correct)?;
        writeln!(f, "held-out accuracy {}/{TEST}", self.test_correct)?;
        write!(f, "parameter hash 0x{:016x}", self.hash)
    }
}

struct MemoryLine<'r>(&'r Report);

impl fmt::Display for MemoryLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "arena {ARENA_BYTES} bytes ({GRADIENT_BYTES} gradients + {RECORD_BYTES} records \
             of one sample), peak use {} bytes, status {}",
            self.0.peak_bytes, self.0.status
        )
    }
}

/// A tiny deterministic generator (xorshift32): integer operations only.
struct Rng(u32);

impl Rng {
    fn next_u32(&mut self) -> u32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        self.0
    }

    /// Uniform in `[-a, a)`: 24 random bits scaled exactly, then one IEEE operation each.
    fn symmetric(&mut self, a: f32) -> f32 {
        let u = (self.next_u32() >> 8) as f32 / (1u32 << 24) as f32;
        a * (2.0 * u - 1.0)
    }

    /// Uniform in `0..n` (a modulo: its small bias does not matter here).
    fn below(&mut self, n: usize) -> usize {
        self.next_u32() as usize % n
    }
}

/// One SGD step on a parameter, then its gradient is zeroed.
fn sgd(p: &mut BufferView<'_, f32, Parameter>, rate: f32) {
    let (values, grad) = p.values_and_grad_mut();
    for (v, g) in values.iter_mut().zip(grad.iter_mut()) {
        *v -= rate * *g;
        *g = 0.0;
    }
}

fn argmax(z: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in z.iter().enumerate() {
        if v > z[best] {
            best = i;
        }
    }
    best
}

/// The initial parameters `(W1, b1, W2, b2)`: weights uniform in `±1/√fan_in` from
/// [`SEED`], biases zero. Public so that a reference implementation can start from the
/// same bits.
#[allow(clippy::type_complexity)]
pub fn initial_parameters() -> (
    [f32; HIDDEN * PIXELS],
    [f32; HIDDEN],
    [f32; CLASSES * HIDDEN],
    [f32; CLASSES],
) {
    let mut rng = Rng(SEED);
    let mut w1 = [0.0f32; HIDDEN * PIXELS];
    let mut w2 = [0.0f32; CLASSES * HIDDEN];
    for w in w1.iter_mut() {
        *w = rng.symmetric(0.125); // 1/√64
    }
    for w in w2.iter_mut() {
        *w = rng.symmetric(0.176_776_7); // 1/√32
    }
    (w1, [0.0; HIDDEN], w2, [0.0; CLASSES])
}

/// The order of the training images in each epoch: a Fisher–Yates shuffle of the previous
/// epoch's order (starting from `0, 1, …`) by a generator seeded with `!SEED`.
pub struct Shuffle {
    rng: Rng,
    order: [u16; TRAIN],
}

impl Default for Shuffle {
    fn default() -> Self {
        Self::new()
    }
}

impl Shuffle {
    /// The generator before the first epoch.
    pub fn new() -> Self {
        let mut order = [0u16; TRAIN];
        for (i, o) in order.iter_mut().enumerate() {
            *o = i as u16;
        }
        Self {
            rng: Rng(!SEED),
            order,
        }
    }

    /// The next epoch's order.
    pub fn next_epoch(&mut self) -> &[u16; TRAIN] {
        for i in (1..TRAIN).rev() {
            let j = self.rng.below(i + 1);
            self.order.swap(i, j);
        }
        &self.order
    }
}

/// Hash of the parameters in the order `W1, b1, W2, b2`.
pub fn parameter_hash(w1: &[f32], b1: &[f32], w2: &[f32], b2: &[f32]) -> u64 {
    GradHasher::of([w1, b1, w2, b2])
}

/// Trains the network and evaluates it; allocates nothing.
pub fn train(observer: &mut impl Observer) -> Report {
    let (mut w1, mut b1, mut w2, mut b2) = initial_parameters();

    let mut arena = Arena::<ARENA_BYTES>::new();
    let tape: Tape<f32> = Tape::new(&mut arena);
    tape.register_operator::<Linear<f32>>();
    tape.register_operator::<Tanh<f32>>();
    tape.register_operator::<CrossEntropy<f32>>();

    let mut w1 = tape.parameter_matrix(&mut w1, HIDDEN, PIXELS);
    let mut b1 = tape.parameter(&mut b1);
    let mut w2 = tape.parameter_matrix(&mut w2, CLASSES, HIDDEN);
    let mut b2 = tape.parameter(&mut b2);
    let (mut h, mut a) = ([0.0f32; HIDDEN], [0.0f32; HIDDEN]);
    let (mut logits, mut loss) = ([0.0f32; CLASSES], [0.0f32; 1]);
    let mut h = tape.output(&mut h);
    let mut a = tape.output(&mut a);
    let mut logits = tape.output(&mut logits);
    let mut loss = tape.output(&mut loss);

    let mut status = tape.status();
    let mut x = [0.0f32; PIXELS];
    let mut shuffle = Shuffle::new();
    let rate = LEARNING_RATE / BATCH as f32;
    let mut steps = 0;
    let mut last_loss = 0.0;

    // Everything above stays; the records of each sample are rewound.
    tape.begin_graph();
    for number in 1..=EPOCHS {
        let order = shuffle.next_epoch();
        let mut epoch_loss = 0.0f32;
        for batch in order.chunks(BATCH) {
            observer.step_begin();
            for &i in batch {
                let i = usize::from(i);
                tape.rewind_graph();
                data::features(&data::TRAIN_IMAGES[i], &mut x);
                let xv = tape.input(&x);
                let mut g = tape.graph();
                let hv = linear(&mut g, &w1, &xv, &b1, &mut h);
                let av = tanh(&mut g, hv, &mut a);
                let z = linear(&mut g, &w2, av, &b2, &mut logits);
                let l = cross_entropy(&mut g, z, usize::from(data::TRAIN_LABELS[i]), &mut loss);
                epoch_loss += l.values()[0];
                if !g.backward(l) && status.is_ok() {
                    status = tape.status();
                }
            }
            for p in [&mut *w1, &mut b1, &mut *w2, &mut b2] {
                sgd(p, rate);
            }
            steps += 1;
            observer.step_end();
        }
        last_loss = epoch_loss / TRAIN as f32;
        observer.epoch(&Epoch {
            number,
            mean_loss: last_loss,
        });
    }

    // Evaluation: the same forward pass with recording off (no records, no arena use).
    let mut correct = |images: &[[u8; PIXELS]], labels: &[u8]| {
        let mut n = 0;
        for (image, &label) in images.iter().zip(labels) {
            tape.rewind_graph();
            data::features(image, &mut x);
            let xv = tape.input(&x);
            let _inference = RecordingScope::new(&tape, false);
            let mut g = tape.graph();
            let hv = linear(&mut g, &w1, &xv, &b1, &mut h);
            let av = tanh(&mut g, hv, &mut a);
            let z = linear(&mut g, &w2, av, &b2, &mut logits);
            n += usize::from(argmax(z.values()) == usize::from(label));
            if !tape.good() && status.is_ok() {
                status = tape.status();
            }
        }
        n
    };
    let train_correct = correct(&data::TRAIN_IMAGES, &data::TRAIN_LABELS);
    let test_correct = correct(&data::TEST_IMAGES, &data::TEST_LABELS);
    Report {
        train_correct,
        test_correct,
        last_loss,
        hash: parameter_hash(w1.values(), b1.values(), w2.values(), b2.values()),
        peak_bytes: tape.peak(),
        status,
        steps,
    }
}
