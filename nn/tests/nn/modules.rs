//! Modules, initialisation, optimizer behaviour and validation, clipping and metrics.

use exactgrad_autograd::{no_grad, GeluApproximation, Tensor};
use exactgrad_backends::ScalarRefBackend;
use exactgrad_core::Philox;
use exactgrad_nn::metrics::{accuracy, argmax_rows};
use exactgrad_nn::optim::{
    clip_grad_norm, clip_grad_value, grad_norm, Adam, AdamConfig, AdamW, AdamWConfig, Optimizer,
    Sgd, SgdConfig,
};
use exactgrad_nn::{
    Error, Flatten, Gelu, LeakyRelu, Linear, Module, ModuleExt, Relu, Sequential, Sigmoid, Tanh,
};

type B = ScalarRefBackend;
const BE: B = ScalarRefBackend;

fn names<M: Module<B>>(m: &M) -> Vec<String> {
    m.named_parameters().into_iter().map(|(n, _)| n).collect()
}

#[test]
fn parameter_names_follow_state_dict() {
    let mut rng = Philox::new(1);
    let inner = Sequential::new()
        .push(Linear::new(&BE, 3, 4, &mut rng).unwrap())
        .push(Tanh)
        .push(Linear::without_bias(&BE, 4, 2, &mut rng).unwrap());
    let model = Sequential::new()
        .push(Linear::new(&BE, 5, 3, &mut rng).unwrap())
        .push(inner)
        .push(Relu);
    assert_eq!(
        names(&model),
        ["0.weight", "0.bias", "1.0.weight", "1.0.bias", "1.2.weight"]
    );
    assert_eq!(model.num_parameters(), 5 * 3 + 3 + 3 * 4 + 4 + 4 * 2);
    assert_eq!(model.len(), 3);
    let dbg = format!("{model:?}");
    assert!(
        dbg.contains("(0): Linear(in_features=5, out_features=3, bias=true)"),
        "{dbg}"
    );
    let x = Tensor::ones(&BE, [2, 5]).unwrap();
    assert_eq!(model.forward(&x).unwrap().dims(), [2, 2]);
    // Shapes are checked by the operators; their errors are the one error type.
    let err = model
        .forward(&Tensor::ones(&BE, [2, 4]).unwrap())
        .unwrap_err();
    assert!(matches!(err, Error::Core(_)), "{err}");
    assert!(err.to_string().contains("linear"), "{err}");
}

#[test]
fn linear_init_is_pytorch_bounded_and_seeded() {
    let l = Linear::new(&BE, 16, 5, &mut Philox::new(42)).unwrap();
    let bound = 0.25f32;
    let (w, b) = (
        l.weight().to_vec().unwrap(),
        l.bias().unwrap().to_vec().unwrap(),
    );
    assert!(w.iter().chain(&b).all(|v| v.abs() <= bound));
    assert!(w.iter().any(|v| v.abs() > 0.2), "spread over the bound");
    // Weight first, then bias, each row-major from the same stream.
    let mut rng = Philox::new(42);
    let want: Vec<f32> = (0..16 * 5 + 5)
        .map(|_| rng.uniform(-bound, bound))
        .collect();
    assert_eq!([w.clone(), b].concat(), want);
    assert_eq!(
        Linear::new(&BE, 16, 5, &mut Philox::new(42))
            .unwrap()
            .weight()
            .to_vec()
            .unwrap(),
        w
    );
    assert!(l.weight().is_requires_grad() && l.weight().is_leaf());
    assert_eq!((l.in_features(), l.out_features()), (16, 5));
    assert_eq!(
        exactgrad_nn::init::default_uniform_bound(3),
        (1.0 / 3f64.sqrt()) as f32
    );
    assert_eq!(exactgrad_nn::init::default_uniform_bound(0), 0.0);
}

#[test]
fn linear_from_tensors_validates() {
    let w = Tensor::ones(&BE, [3, 2]).unwrap();
    assert!(Linear::from_tensors(&Tensor::ones(&BE, [3]).unwrap(), None).is_err());
    let err = Linear::from_tensors(&w, Some(&Tensor::ones(&BE, [2]).unwrap())).unwrap_err();
    assert!(err.to_string().contains("bias"), "{err}");
    let l = Linear::from_tensors(&w, None).unwrap();
    assert!(l.bias().is_none());
    // The layer owns a copy.
    assert!(!l.weight().shares_storage(&w));
}

#[test]
fn activations_match_tensor_ops() {
    let x = Tensor::from_vec(&BE, vec![-2.0, -0.5, 0.0, 0.5, 1.0, 3.0], [2, 3]).unwrap();
    let same = |m: &dyn Module<B>, want: Tensor<B>| {
        assert_eq!(
            m.forward(&x).unwrap().to_vec().unwrap(),
            want.to_vec().unwrap()
        )
    };
    same(&Relu, x.relu().unwrap());
    same(&Tanh, x.tanh().unwrap());
    same(&Sigmoid, x.sigmoid().unwrap());
    same(&Gelu::default(), x.gelu(GeluApproximation::None).unwrap());
    same(
        &Gelu {
            approximate: GeluApproximation::Tanh,
        },
        x.gelu(GeluApproximation::Tanh).unwrap(),
    );
    same(&LeakyRelu::default(), x.leaky_relu(0.01).unwrap());
    let x3 = Tensor::ones(&BE, [2, 3, 4]).unwrap();
    assert_eq!(Module::<B>::forward(&Flatten, &x3).unwrap().dims(), [2, 12]);
    assert!(names(&Relu).is_empty());
}

#[test]
fn optimizer_updates_the_module_in_place() {
    let mut rng = Philox::new(3);
    let model = Sequential::new().push(Linear::new(&BE, 4, 2, &mut rng).unwrap());
    let mut opt = Sgd::new(model.parameters(), SgdConfig::new(0.5)).unwrap();
    let x = Tensor::rand_uniform(&BE, [3, 4], -1.0, 1.0, &mut rng).unwrap();
    let before = model.parameters()[0].to_vec().unwrap();
    model
        .forward(&x)
        .unwrap()
        .sum()
        .unwrap()
        .backward()
        .unwrap();
    let g = model.parameters()[0].grad().unwrap().to_vec().unwrap();
    opt.step().unwrap();
    let after = model.parameters()[0].to_vec().unwrap();
    for ((a, b), g) in after.iter().zip(&before).zip(&g) {
        assert_eq!(*a, b + (-0.5f32) * g);
    }
    // The module's own tensor saw the update.
    let first = model.get(0).unwrap().named_parameters()[0]
        .1
        .to_vec()
        .unwrap();
    assert_eq!(first, after);
    // Outside no_grad, parameters still refuse unrecorded in-place changes.
    assert!(model.parameters()[0].fill_(0.0).is_err());
    let _g = no_grad();
    assert!(model.parameters()[0].fill_(0.0).is_ok());
}

#[test]
fn parameters_without_gradient_are_skipped() {
    let p = Tensor::ones(&BE, [2]).unwrap().requires_grad().unwrap();
    let q = Tensor::ones(&BE, [2]).unwrap().requires_grad().unwrap();
    let mut adam = Adam::new(vec![p.clone(), q.clone()], AdamConfig::new(0.1)).unwrap();
    p.set_grad(Some(Tensor::full(&BE, [2], 1.0).unwrap()))
        .unwrap();
    adam.step().unwrap();
    adam.step().unwrap();
    assert_eq!((adam.step_count(0), adam.step_count(1)), (2, 0));
    assert_eq!(q.to_vec().unwrap(), [1.0, 1.0]);
    assert!(p.to_vec().unwrap()[0] < 1.0);
    assert!(adam.moments(1).is_none());
    // fill_grad_zero keeps a zero gradient, which still counts as a step (as PyTorch's
    // zero_grad(set_to_none=False)).
    adam.fill_grad_zero().unwrap();
    assert_eq!(p.grad().unwrap().to_vec().unwrap(), [0.0, 0.0]);
    adam.step().unwrap();
    assert_eq!(adam.step_count(0), 3);
    adam.clear_grad();
    assert!(p.grad().is_none());
    // zero_grad is PyTorch's default (set_to_none=True): no gradient, no step.
    adam.fill_grad_zero().unwrap();
    adam.zero_grad();
    assert!(p.grad().is_none() && q.grad().is_none());
    adam.step().unwrap();
    assert_eq!(adam.step_count(0), 3);
}

#[test]
fn module_zero_grad_frees_and_fill_grad_zero_fills() {
    let l = Linear::new(&BE, 3, 2, &mut Philox::new(7)).unwrap();
    let x = Tensor::ones(&BE, [4, 3]).unwrap();
    l.forward(&x).unwrap().sum().unwrap().backward().unwrap();
    assert!(l.parameters().iter().all(|p| p.grad().is_some()));
    l.fill_grad_zero().unwrap();
    for p in l.parameters() {
        assert!(p
            .grad()
            .unwrap()
            .to_vec()
            .unwrap()
            .iter()
            .all(|&g| g == 0.0));
    }
    l.zero_grad();
    assert!(l.parameters().iter().all(|p| p.grad().is_none()));
}

#[test]
fn sgd_momentum_buffer_starts_as_the_gradient() {
    let p = Tensor::zeros(&BE, [3]).unwrap().requires_grad().unwrap();
    let cfg = SgdConfig {
        momentum: 0.9,
        dampening: 0.5,
        ..SgdConfig::new(1.0)
    };
    let mut sgd = Sgd::new(vec![p.clone()], cfg).unwrap();
    p.set_grad(Some(
        Tensor::from_vec(&BE, vec![1.0, 2.0, 4.0], [3]).unwrap(),
    ))
    .unwrap();
    sgd.step().unwrap();
    // First step: no dampening on the initial buffer.
    assert_eq!(
        sgd.momentum_buffer(0).unwrap().to_vec().unwrap(),
        [1.0, 2.0, 4.0]
    );
    assert_eq!(p.to_vec().unwrap(), [-1.0, -2.0, -4.0]);
    sgd.step().unwrap();
    assert_eq!(
        sgd.momentum_buffer(0).unwrap().to_vec().unwrap(),
        [1.4, 2.8, 5.6]
    );
}

#[test]
fn hyper_parameters_are_validated() {
    let p = || vec![Tensor::ones(&BE, [1]).unwrap().requires_grad().unwrap()];
    let msg = |r: Result<(), Error>| r.unwrap_err().to_string();
    let sgd = |c: SgdConfig| Sgd::new(p(), c).map(|_| ());
    assert!(msg(sgd(SgdConfig::new(-1.0))).contains("lr"));
    assert!(msg(sgd(SgdConfig::new(f64::NAN))).contains("lr"));
    let nesterov = SgdConfig {
        nesterov: true,
        ..SgdConfig::new(0.1)
    };
    assert!(msg(sgd(nesterov)).contains("Nesterov"));
    let damp = SgdConfig {
        nesterov: true,
        momentum: 0.9,
        dampening: 0.1,
        ..SgdConfig::new(0.1)
    };
    assert!(sgd(damp).is_err());
    let adam = |c: AdamConfig| Adam::new(p(), c).map(|_| ());
    let beta = AdamConfig {
        betas: (0.9, 1.0),
        ..AdamConfig::default()
    };
    assert!(msg(adam(beta)).contains("betas.1"));
    let eps = AdamConfig {
        eps: -1.0,
        ..AdamConfig::default()
    };
    assert!(msg(adam(eps)).contains("eps"));
    let wd = AdamWConfig {
        weight_decay: -0.1,
        ..AdamWConfig::default()
    };
    assert!(AdamW::new(p(), wd).is_err());
    // Parameters must be leaves that require grad.
    let plain = Tensor::ones(&BE, [1]).unwrap();
    assert!(Sgd::new(vec![plain], SgdConfig::default()).is_err());
    let leaf = Tensor::ones(&BE, [1]).unwrap().requires_grad().unwrap();
    let derived = leaf.mul_scalar(2.0).unwrap();
    let err = Adam::new(vec![derived], AdamConfig::default()).unwrap_err();
    assert!(err.to_string().contains("parameter 0"), "{err}");
    // Learning-rate changes are validated too.
    let mut o = Sgd::new(p(), SgdConfig::default()).unwrap();
    assert!(o.set_lr(-0.5).is_err());
    o.set_lr(0.5).unwrap();
    assert_eq!(o.lr(), 0.5);
    assert_eq!(AdamWConfig::default().weight_decay, 1e-2);
    assert!(
        AdamW::new(p(), AdamWConfig::default())
            .unwrap()
            .config()
            .decoupled_weight_decay
    );
}

#[test]
fn clipping_scales_all_gradients_jointly() {
    let p = Tensor::zeros(&BE, [2]).unwrap().requires_grad().unwrap();
    let q = Tensor::zeros(&BE, [1]).unwrap().requires_grad().unwrap();
    let none = Tensor::zeros(&BE, [1]).unwrap().requires_grad().unwrap();
    p.set_grad(Some(Tensor::from_vec(&BE, vec![3.0, 0.0], [2]).unwrap()))
        .unwrap();
    q.set_grad(Some(Tensor::from_vec(&BE, vec![4.0], [1]).unwrap()))
        .unwrap();
    let params = [p.clone(), none, q.clone()];
    assert_eq!(grad_norm(&params).unwrap(), 5.0);
    assert_eq!(clip_grad_norm(&params, 10.0).unwrap(), 5.0);
    assert_eq!(p.grad().unwrap().to_vec().unwrap(), [3.0, 0.0]);
    assert_eq!(clip_grad_norm(&params, 1.0).unwrap(), 5.0);
    let coef = 1.0f32 / (5.0 + 1e-6);
    assert_eq!(p.grad().unwrap().to_vec().unwrap(), [3.0 * coef, 0.0]);
    assert_eq!(q.grad().unwrap().to_vec().unwrap(), [4.0 * coef]);
    assert!(clip_grad_norm(&params, -1.0).is_err());
    clip_grad_value(&params, 0.5).unwrap();
    assert!(p
        .grad()
        .unwrap()
        .to_vec()
        .unwrap()
        .iter()
        .all(|v| v.abs() <= 0.5));
    assert!(clip_grad_value(&params, f64::NAN).is_err());
}

#[test]
fn argmax_and_accuracy() {
    let logits = Tensor::from_vec(
        &BE,
        vec![1.0, 3.0, 3.0, 0.0, f32::NAN, 2.0, 5.0, 1.0, 0.0],
        [3, 3],
    )
    .unwrap();
    assert_eq!(argmax_rows(&logits).unwrap(), [1, 1, 0]);
    assert_eq!(accuracy(&logits, &[1, 0, 0]).unwrap(), 2.0 / 3.0);
    assert!(accuracy(&logits, &[1]).is_err());
    assert!(argmax_rows(&Tensor::ones(&BE, [3]).unwrap()).is_err());
    // The tensor operator agrees with the metric (first maximum, NaN as the maximum),
    // and its index tensor is accepted as targets, as any `Indices`.
    let am = logits.argmax(1, false).unwrap();
    assert_eq!(am.to_indices().unwrap(), [1, 1, 0]);
    assert_eq!(accuracy(&logits, &am).unwrap(), 1.0);
    let labels = Tensor::from_indices(&BE, &[1, 0, 0], [3]).unwrap();
    assert_eq!(accuracy(&logits, &labels).unwrap(), 2.0 / 3.0);
    assert_eq!(accuracy(&logits, &vec![1i64, 0, 0]).unwrap(), 2.0 / 3.0);
}

#[test]
fn sizes_whose_products_overflow_are_errors() {
    use exactgrad_nn::data::Digits;
    use exactgrad_nn::{Conv1d, Conv1dConfig, Gru, Lstm, RnnConfig};
    let b = ScalarRefBackend;
    let err = Lstm::new(&b, RnnConfig::new(3, 1 << 62), &mut Philox::new(1))
        .unwrap_err()
        .to_string();
    assert!(err.contains("overflows"), "{err}");
    let huge = RnnConfig {
        bidirectional: true,
        ..RnnConfig::new(3, usize::MAX / 2 + 1)
    };
    assert!(Gru::new(&b, huge, &mut Philox::new(1)).is_err());
    let err = Conv1d::new(
        &b,
        Conv1dConfig::new(1 << 40, 1, 1 << 40),
        &mut Philox::new(1),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("overflows"), "{err}");
    let d = Digits::bundled();
    assert!(d.image(1 << 58).is_none());
    assert!(d.image(d.len()).is_none());
    assert!(d.to_data(&[1 << 58]).is_err());
}

/// Two entries with one name: the state dict held one of them (the other's values were
/// lost) and a load copied one value into both. Now both refuse, naming the key: a
/// derived module whose field is renamed onto a child's entry, and a hand-written
/// `visit` that reports one name twice.
#[test]
fn entries_with_one_name_are_refused_by_state_dict_and_load() {
    use exactgrad_nn::checkpoint::LoadOptions;
    use exactgrad_nn::{Dropout, Visitor};

    #[derive(Module)]
    struct Nested<B: exactgrad_core::Backend> {
        a: Linear<B>,
        #[module(rename = "a.bias", param)]
        extra: Tensor<B>,
    }
    impl<B: exactgrad_core::Backend> Nested<B> {
        fn forward(&self, x: &Tensor<B>) -> exactgrad_nn::Result<Tensor<B>> {
            self.a.forward(x)
        }
    }
    let mut rng = Philox::new(3);
    let nested = Nested {
        a: Linear::new(&BE, 2, 2, &mut rng).unwrap(),
        extra: Tensor::from_vec(&BE, vec![7.0, 8.0], [2])
            .unwrap()
            .requires_grad()
            .unwrap(),
    };
    let err = nested.state_dict().unwrap_err().to_string();
    assert!(err.contains("\"a.bias\""), "{err}");
    let mut file = exactgrad_nn::checkpoint::TensorFile::new();
    file.insert_floats("a.weight", &[2, 2], vec![0.0; 4])
        .unwrap();
    file.insert_floats("a.bias", &[2], vec![1.0, 2.0]).unwrap();
    let before = nested.extra.to_vec().unwrap();
    let err = nested
        .load_state_dict(&file, LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("\"a.bias\""), "{err}");
    assert_eq!(nested.extra.to_vec().unwrap(), before, "nothing changed");

    // Two streams of one name would be restored from one checkpoint entry.
    struct Twice {
        one: Dropout,
        two: Dropout,
    }
    impl Module<B> for Twice {
        fn forward(&self, x: &Tensor<B>) -> exactgrad_nn::Result<Tensor<B>> {
            self.two.forward(&self.one.forward(x)?)
        }
        fn visit(&self, v: &mut Visitor<'_, B>) {
            v.child("drop", &self.one);
            v.child("drop", &self.two);
        }
    }
    let twice = Twice {
        one: Dropout::new(0.5).unwrap(),
        two: Dropout::new(0.5).unwrap(),
    };
    let err = twice.state_dict().unwrap_err().to_string();
    assert!(err.contains("stream drop.rng"), "{err}");
}
