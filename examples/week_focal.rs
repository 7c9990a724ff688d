//! A first week with exactgrad: a custom loss (the focal loss of Lin et al., 2017) written
//! with tensor operators and `gather`, checked against central differences, then used to
//! train an MLP on the shipped digits. The PyTorch program is
//! `tools/first_week/week_focal.py`.
use exactgrad::prelude::*;

/// The mean over the batch of `−(1 − p_t)^γ · log p_t`, `p_t` the probability of label `y`.
fn focal_loss<B: Backend>(z: &Tensor<B>, y: &[i64], gamma: f32) -> exactgrad::Result<Tensor<B>> {
    let logp = z.log_softmax(1)?.gather(1, &(y, [y.len(), 1]))?;
    let weight = (1.0 - &logp.exp()?)?.pow(gamma)?;
    (&weight * &logp)?.mean()?.neg()
}

fn main() -> exactgrad::Result<()> {
    let (b, mut rng) = (ExactBackend::new(), Philox::new(0));
    let (z, y) = (Tensor::randn(&b, [4, 5], 0.0, 1.0, &mut rng)?, [0, 3, 1, 4]);
    let check = GradCheck::default().run("focal", &[z], |v| focal_loss(&v[0], &y, 2.0));
    check?.assert_passed();
    let split = Digits::bundled().split()?;
    let train = TensorDataset::classification(&split.train, &[64])?;
    let (test_x, test_y) = TensorDataset::classification(&split.test, &[64])?.full_batch(&b)?;
    let loader = DataLoader::new(&b, &train, 32)?.shuffle(0);
    let model = Sequential::new()
        .push(Linear::new(&b, 64, 64, &mut rng)?)
        .push(Relu)
        .push(Linear::new(&b, 64, 10, &mut rng)?);
    let mut opt = AdamW::new(model.parameters(), AdamWConfig::new(3e-3))?;
    for epoch in 1..=5 {
        for batch in &loader {
            let (x, y) = batch?;
            let loss = focal_loss(&model.forward(&x)?, &y, 2.0)?;
            opt.clear_grad();
            loss.backward()?;
            opt.step()?;
        }
        let acc = accuracy(&model.forward(&test_x)?, &test_y)?;
        println!("epoch {epoch}: test accuracy {acc:.4}");
    }
    Ok(())
}
