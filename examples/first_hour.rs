//! A first hour with exactgrad (docs/first-hour.md): a conv net on the shipped digits.
use exactgrad::prelude::*;

/// Twice Conv2d–BatchNorm2d–ReLU–MaxPool2d, then Linear: 10 logits per 8×8 image.
fn conv_net<B: Backend>(b: &B, seed: u64) -> exactgrad::Result<Sequential<B>> {
    let (mut rng, mut net) = (Philox::new(seed), Sequential::new());
    for (i, o) in [(1, 8), (8, 16)] {
        let mut conv = Conv2dConfig::new(i, o, [3, 3]);
        conv.padding = [1, 1];
        net = net.push(Conv2d::new(b, conv, &mut rng)?);
        net = net.push(BatchNorm2d::new(b, o)?).push(Relu);
        net = net.push(MaxPool2d::new([2, 2])?);
    }
    Ok(net.push(Flatten).push(Linear::new(b, 64, 10, &mut rng)?))
}

/// Trains with AdamW and a cosine schedule, saves, loads: the loaded model's accuracy.
pub fn run(epochs: u64) -> exactgrad::Result<f64> {
    let b = ExactBackend::new();
    let split = Digits::bundled().split()?;
    let train = TensorDataset::classification(&split.train, &[1, 8, 8])?;
    let loader = DataLoader::new(&b, &train, 32)?.shuffle(0);
    let model = conv_net(&b, 0)?;
    let mut opt = AdamW::new(model.parameters(), AdamWConfig::new(5e-3))?;
    let cosine = CosineAnnealingLrConfig::new(epochs * loader.num_batches() as u64);
    let mut sched = CosineAnnealingLr::new(&mut opt, cosine)?;
    for batch in (0..epochs).flat_map(|_| &loader) {
        let (images, labels) = batch?;
        let logits = model.forward(&images)?;
        let loss = logits.cross_entropy(&labels, Default::default())?;
        opt.clear_grad();
        loss.backward()?;
        opt.step()?;
        sched.step(&mut opt)?;
    }
    let path = std::env::temp_dir().join("first-hour.safetensors");
    model.state_dict()?.save(&path)?;
    let loaded = conv_net(&b, 1)?;
    loaded.load_state_dict(&TensorFile::load(&path)?, LoadOptions::default())?;
    loaded.eval();
    let test = TensorDataset::classification(&split.test, &[1, 8, 8])?;
    let (images, labels) = test.full_batch(&b)?;
    let _no_grad = no_grad();
    accuracy(&loaded.forward(&images)?, &labels)
}

fn main() -> exactgrad::Result<()> {
    println!("test accuracy after saving and loading: {:.4}", run(3)?);
    Ok(())
}
