//! A first week with exactgrad: a CNN on the shipped digits with AdamW, a step schedule
//! and a checkpoint every epoch. `cargo run --release --example week_cnn -- 2` stops after
//! epoch 2; run again without the argument, the second process resumes from the
//! checkpoint and ends with the bits (the parameter hash) of an uninterrupted run. The
//! PyTorch program is `tools/first_week/week_cnn.py`.
use exactgrad::prelude::*;

fn main() -> exactgrad::Result<()> {
    let stop: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    let (b, mut rng) = (ExactBackend::new(), Philox::new(0));
    let split = Digits::bundled().split()?;
    let train = TensorDataset::classification(&split.train, &[1, 8, 8])?;
    let (tx, ty) = TensorDataset::classification(&split.test, &[1, 8, 8])?.full_batch(&b)?;
    let loader = DataLoader::new(&b, &train, 32)?.shuffle(0);
    let mut conv = Conv2dConfig::new(1, 16, [3, 3]);
    conv.padding = [1, 1];
    let model = Sequential::new()
        .push(Conv2d::new(&b, conv, &mut rng)?)
        .push(Relu)
        .push(MaxPool2d::new([2, 2])?)
        .push(Flatten)
        .push(Linear::new(&b, 16 * 4 * 4, 10, &mut rng)?);
    let mut opt = AdamW::new(model.parameters(), AdamWConfig::new(3e-3))?;
    let mut step = StepLrConfig::new(2);
    step.gamma = 0.5;
    let mut sched = StepLr::new(&mut opt, step)?;
    let path = std::env::temp_dir().join("week_cnn.safetensors");
    if path.exists() {
        let state = TrainingState::new(&model, &mut opt).scheduler(&mut sched);
        state.loader(&loader).load(&path)?;
    }
    while loader.epoch() < stop.min(4) {
        for batch in &loader {
            let (x, y) = batch?;
            let loss = model.forward(&x)?.cross_entropy(&y, Default::default())?;
            opt.clear_grad();
            loss.backward()?;
            opt.step()?;
        }
        sched.step(&mut opt)?;
        let state = TrainingState::new(&model, &mut opt).scheduler(&mut sched);
        state.loader(&loader).save(&path)?;
        model.eval();
        let acc = accuracy(&model.forward(&tx)?, &ty)?;
        model.train();
        println!("epoch {}: test accuracy {acc:.4}", loader.epoch());
    }
    println!("parameter hash {:016x}", model.parameter_hash()?);
    Ok(())
}
