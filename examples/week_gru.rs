//! A first week with exactgrad: a GRU sequence classifier that reads each 8×8 digit as a
//! sequence of 8 rows and classifies it from the last hidden state, trained with Adam
//! and gradient clipping. The PyTorch program is `tools/first_week/week_gru.py`.
use exactgrad::prelude::*;

#[derive(Module)]
struct Classifier<B: Backend> {
    gru: Gru<B>,
    head: Linear<B>,
}

impl<B: Backend> Classifier<B> {
    fn forward(&self, x: &Tensor<B>) -> exactgrad::Result<Tensor<B>> {
        let h = self.gru.forward_with_state(x, None)?.h_n;
        self.head.forward(&h.squeeze(0)?)
    }
}

fn main() -> exactgrad::Result<()> {
    let (b, mut rng) = (ExactBackend::new(), Philox::new(0));
    let split = Digits::bundled().split()?;
    let train = TensorDataset::classification(&split.train, &[8, 8])?;
    let (test_x, test_y) = TensorDataset::classification(&split.test, &[8, 8])?.full_batch(&b)?;
    let loader = DataLoader::new(&b, &train, 32)?.shuffle(0);
    let mut config = RnnConfig::new(8, 32);
    config.batch_first = true;
    let model = Classifier {
        gru: Gru::new(&b, config, &mut rng)?,
        head: Linear::new(&b, 32, 10, &mut rng)?,
    };
    let mut opt = Adam::new(model.parameters(), AdamConfig::new(1e-2))?;
    for epoch in 1..=5 {
        for batch in &loader {
            let (x, y) = batch?;
            let loss = model.forward(&x)?.cross_entropy(&y, Default::default())?;
            opt.clear_grad();
            loss.backward()?;
            clip_grad_norm(&model.parameters(), 1.0)?;
            opt.step()?;
        }
        let acc = accuracy(&model.forward(&test_x)?, &test_y)?;
        println!("epoch {epoch}: test accuracy {acc:.4}");
    }
    Ok(())
}
