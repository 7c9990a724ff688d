//! Trains a small network on a fixed arena: no heap, one graph per sample.
//!
//! The task: two interleaved spirals in the plane, one per class. The model: a multilayer
//! perceptron 2 → 16 → 16 → 2 with tanh activations and a cross-entropy loss, trained by
//! stochastic gradient descent on mini-batches of 8 samples.
//!
//! Everything the tape needs lives in one `Arena` of `ARENA_BYTES` bytes: the gradients of
//! the parameters and intermediates (made once, before `begin_graph`) and the records of
//! one forward pass (made again for every sample, after `rewind_graph`). The application
//! owns every value buffer: they are plain arrays on the stack.
//!
//! Run it with `cargo run --release -p exactgrad-tape --example tape_train`.

use exactgrad_tape::operators::{cross_entropy, linear, tanh, CrossEntropy, Linear, Tanh};
use exactgrad_tape::{Arena, BufferView, Parameter, RecordingScope, Tape};

/// The arena's size in bytes: exactly the tape's peak use (`main` prints it), made of
/// 1688 bytes of gradients (1416 for the 354 parameters, 272 for the intermediates, each
/// array rounded up to 8 bytes) and 376 bytes of records for one sample (three `linear`
/// of 80 bytes, two `tanh` of 40, one `cross_entropy` of 56) on a 64-bit target.
pub const ARENA_BYTES: usize = 2064;
const IN: usize = 2;
const HIDDEN: usize = 16;
const CLASSES: usize = 2;
/// Training and test points (half of each per class).
pub const POINTS: usize = 256;
const EPOCHS: usize = 200;
const BATCH: usize = 8;
const LEARNING_RATE: f32 = 0.3;

/// What a training run reached.
#[derive(Debug, Clone, Copy)]
pub struct Report {
    /// Fraction of training points classified correctly after training.
    pub train_accuracy: f32,
    /// Fraction of held-out points classified correctly.
    pub test_accuracy: f32,
    /// Mean training loss of the last epoch.
    pub last_loss: f32,
    /// The tape's largest arena use in bytes.
    pub peak_bytes: usize,
    /// Whether every step kept the tape's status `Ok`.
    pub all_good: bool,
}

/// A tiny deterministic generator (xorshift32) for data and initial weights.
struct Rng(u32);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 17;
        self.0 ^= self.0 << 5;
        (self.0 >> 8) as f32 / (1u32 << 24) as f32
    }
    fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.next()
    }
}

/// Point `i` of a two-spiral data set: one and a half turns per arm, a little noise.
fn spiral(i: usize, rng: &mut Rng) -> ([f32; IN], usize) {
    let class = i % 2;
    let t = (i / 2) as f32 / (POINTS / 2) as f32; // 0 … 1 along the arm
    let angle = t * 3.0 * core::f32::consts::PI + class as f32 * core::f32::consts::PI;
    let radius = 0.1 + 0.9 * t;
    let noise = 0.03;
    let x = radius * libm::cosf(angle) + rng.uniform(-noise, noise);
    let y = radius * libm::sinf(angle) + rng.uniform(-noise, noise);
    ([x, y], class)
}

/// One SGD step on a parameter (gradient summed over the batch), then its gradient is zeroed.
fn sgd(p: &mut BufferView<'_, f32, Parameter>, rate: f32) {
    let (values, grad) = p.values_and_grad_mut();
    for (v, g) in values.iter_mut().zip(grad.iter_mut()) {
        *v -= rate * *g;
        *g = 0.0;
    }
}

/// Trains the network and reports its accuracy; allocates nothing on the heap.
pub fn train() -> Report {
    // The data set and the initial weights.
    let mut rng = Rng(0x2545_F491);
    let mut train_x = [[0.0f32; IN]; POINTS];
    let mut train_y = [0usize; POINTS];
    let mut test_x = [[0.0f32; IN]; POINTS];
    let mut test_y = [0usize; POINTS];
    for i in 0..POINTS {
        (train_x[i], train_y[i]) = spiral(i, &mut rng);
        (test_x[i], test_y[i]) = spiral(i, &mut rng);
    }
    let mut w1 = [0.0f32; HIDDEN * IN];
    let mut b1 = [0.0f32; HIDDEN];
    let mut w2 = [0.0f32; HIDDEN * HIDDEN];
    let mut b2 = [0.0f32; HIDDEN];
    let mut w3 = [0.0f32; CLASSES * HIDDEN];
    let mut b3 = [0.0f32; CLASSES];
    for w in w1.iter_mut() {
        *w = rng.uniform(-2.0, 2.0);
    }
    for w in w2.iter_mut().chain(w3.iter_mut()) {
        *w = rng.uniform(-0.4, 0.4);
    }

    // The tape, its operators, and the views it keeps across iterations.
    let mut arena = Arena::<ARENA_BYTES>::new();
    let tape: Tape<f32> = Tape::new(&mut arena);
    tape.register_operator::<Linear<f32>>();
    tape.register_operator::<Tanh<f32>>();
    tape.register_operator::<CrossEntropy<f32>>();

    let mut w1 = tape.parameter_matrix(&mut w1, HIDDEN, IN);
    let mut b1 = tape.parameter(&mut b1);
    let mut w2 = tape.parameter_matrix(&mut w2, HIDDEN, HIDDEN);
    let mut b2 = tape.parameter(&mut b2);
    let mut w3 = tape.parameter_matrix(&mut w3, CLASSES, HIDDEN);
    let mut b3 = tape.parameter(&mut b3);
    let (mut h1, mut a1, mut h2, mut a2) = (
        [0.0f32; HIDDEN],
        [0.0f32; HIDDEN],
        [0.0f32; HIDDEN],
        [0.0f32; HIDDEN],
    );
    let (mut logits, mut loss) = ([0.0f32; CLASSES], [0.0f32; 1]);
    let mut h1 = tape.output(&mut h1);
    let mut a1 = tape.output(&mut a1);
    let mut h2 = tape.output(&mut h2);
    let mut a2 = tape.output(&mut a2);
    let mut logits = tape.output(&mut logits);
    let mut loss = tape.output(&mut loss);

    // Everything above stays; everything recorded below is rewound for each sample.
    tape.begin_graph();
    let mut all_good = true;
    let mut last_loss = 0.0;
    let mut order = [0usize; POINTS];
    for (i, o) in order.iter_mut().enumerate() {
        *o = i;
    }
    for _epoch in 0..EPOCHS {
        // A fresh random order each epoch (Fisher–Yates).
        for i in (1..POINTS).rev() {
            let j = (rng.next() * (i + 1) as f32) as usize % (i + 1);
            order.swap(i, j);
        }
        let mut epoch_loss = 0.0;
        for batch in order.chunks(BATCH) {
            for &i in batch {
                tape.rewind_graph();
                let x = tape.input(&train_x[i]);
                let mut g = tape.graph();
                let h = linear(&mut g, &w1, &x, &b1, &mut h1);
                let a = tanh(&mut g, h, &mut a1);
                let h = linear(&mut g, &w2, a, &b2, &mut h2);
                let a = tanh(&mut g, h, &mut a2);
                let z = linear(&mut g, &w3, a, &b3, &mut logits);
                let l = cross_entropy(&mut g, z, train_y[i], &mut loss);
                epoch_loss += l.values()[0];
                all_good &= g.backward(l);
            }
            let rate = LEARNING_RATE / batch.len() as f32;
            for p in [&mut *w1, &mut b1, &mut *w2, &mut b2, &mut *w3, &mut b3] {
                sgd(p, rate);
            }
        }
        last_loss = epoch_loss / POINTS as f32;
    }

    // Evaluation: the same forward pass with recording off (no records, no arena use).
    let mut accuracy = |xs: &[[f32; IN]; POINTS], ys: &[usize; POINTS]| {
        let mut correct = 0;
        for i in 0..POINTS {
            tape.rewind_graph();
            let x = tape.input(&xs[i]);
            let _inference = RecordingScope::new(&tape, false);
            let mut g = tape.graph();
            let h = linear(&mut g, &w1, &x, &b1, &mut h1);
            let a = tanh(&mut g, h, &mut a1);
            let h = linear(&mut g, &w2, a, &b2, &mut h2);
            let a = tanh(&mut g, h, &mut a2);
            let z = linear(&mut g, &w3, a, &b3, &mut logits).values();
            let predicted = if z[1] > z[0] { 1 } else { 0 };
            correct += usize::from(predicted == ys[i]);
            all_good &= tape.good();
        }
        correct as f32 / POINTS as f32
    };
    let train_accuracy = accuracy(&train_x, &train_y);
    let test_accuracy = accuracy(&test_x, &test_y);
    Report {
        train_accuracy,
        test_accuracy,
        last_loss,
        peak_bytes: tape.peak(),
        all_good,
    }
}

#[allow(dead_code)]
fn main() {
    let r = train();
    println!("two spirals, MLP 2-{HIDDEN}-{HIDDEN}-{CLASSES}, {EPOCHS} epochs of {POINTS} points");
    println!("last epoch's mean loss   {:.4}", r.last_loss);
    println!("training accuracy        {:.1}%", 100.0 * r.train_accuracy);
    println!("held-out accuracy        {:.1}%", 100.0 * r.test_accuracy);
    println!(
        "arena                    {ARENA_BYTES} bytes, peak use {} bytes",
        r.peak_bytes
    );
    println!("status always ok         {}", r.all_good);
}
