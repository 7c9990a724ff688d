//! The pinned hash is reproduced by the eager engine on `ScalarRefBackend`: the same
//! initial parameters, sample order, per-sample forward and backward passes (the gradients
//! of a step accumulate in the leaves over its samples, as on the tape) and SGD updates
//! give the same loss bits every epoch and the same final parameters.

use exactgrad_autograd::{CrossEntropyOptions, Tensor};
use exactgrad_backends::ScalarRefBackend;
use tape_digits::data::{self, CLASSES, PIXELS, TRAIN};
use tape_digits::{
    initial_parameters, parameter_hash, train, Epoch, Observer, Shuffle, BATCH, EPOCHS, HIDDEN,
    LEARNING_RATE, PINNED_HASH,
};

const B: ScalarRefBackend = ScalarRefBackend;

fn leaf(values: &[f32], shape: &[usize]) -> Tensor<ScalarRefBackend> {
    Tensor::from_slice(&B, values, shape.to_vec())
        .unwrap()
        .requires_grad()
        .unwrap()
}

fn step(values: &mut [f32], t: &Tensor<ScalarRefBackend>, rate: f32) {
    let grad = t.grad().expect("a gradient").to_vec().unwrap();
    assert_eq!(grad.len(), values.len());
    for (v, g) in values.iter_mut().zip(grad) {
        *v -= rate * g;
    }
}

struct Losses(Vec<u32>);

impl Observer for Losses {
    fn epoch(&mut self, epoch: &Epoch) {
        self.0.push(epoch.mean_loss.to_bits());
    }
}

#[test]
fn the_eager_engine_reproduces_the_training_bit_for_bit() {
    let (w1, b1, w2, b2) = initial_parameters();
    let (mut w1, mut b1, mut w2, mut b2) = (w1.to_vec(), b1.to_vec(), w2.to_vec(), b2.to_vec());
    let rate = LEARNING_RATE / BATCH as f32;
    let mut shuffle = Shuffle::new();
    let mut losses = Vec::new();
    let mut x = [0.0f32; PIXELS];
    for _ in 0..EPOCHS {
        let order = *shuffle.next_epoch();
        let mut epoch_loss = 0.0f32;
        for batch in order.chunks(BATCH) {
            let ew1 = leaf(&w1, &[HIDDEN, PIXELS]);
            let eb1 = leaf(&b1, &[HIDDEN]);
            let ew2 = leaf(&w2, &[CLASSES, HIDDEN]);
            let eb2 = leaf(&b2, &[CLASSES]);
            for &i in batch {
                let i = usize::from(i);
                data::features(&data::TRAIN_IMAGES[i], &mut x);
                let xt = Tensor::from_slice(&B, &x, [PIXELS]).unwrap();
                let h = xt.linear(&ew1, Some(&eb1)).unwrap().tanh().unwrap();
                let z = h.linear(&ew2, Some(&eb2)).unwrap();
                let target = [i64::from(data::TRAIN_LABELS[i])];
                let loss = z
                    .cross_entropy(&target, CrossEntropyOptions::default())
                    .unwrap();
                epoch_loss += loss.to_vec().unwrap()[0];
                loss.backward().unwrap();
            }
            step(&mut w1, &ew1, rate);
            step(&mut b1, &eb1, rate);
            step(&mut w2, &ew2, rate);
            step(&mut b2, &eb2, rate);
        }
        losses.push((epoch_loss / TRAIN as f32).to_bits());
    }

    let mut tape = Losses(Vec::new());
    let report = train(&mut tape);
    assert_eq!(tape.0, losses, "mean loss bits per epoch");
    assert_eq!(parameter_hash(&w1, &b1, &w2, &b2), PINNED_HASH);
    assert_eq!(report.hash, PINNED_HASH);
    assert_eq!(report.check(), Ok(()));
}
