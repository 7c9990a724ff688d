//! Parameter groups: per-group learning rate, weight decay, momentum and betas, checked
//! against PyTorch's documented update rules worked by hand for two steps on tiny
//! tensors; `add_param_group`, the refusals, and the groups in the optimizer's state.

use exactgrad_autograd::Tensor;
use exactgrad_backends::ScalarRefBackend;
use exactgrad_nn::checkpoint::TensorFile;
use exactgrad_nn::optim::{
    Adam, AdamConfig, AdamW, AdamWConfig, CosineAnnealingLr, CosineAnnealingLrConfig, LinearLr,
    LinearLrConfig, LrScheduler, OneCycleLr, OneCycleLrConfig, Optimizer, ParamGroup, SequentialLr,
    Sgd, SgdConfig, StepLr, StepLrConfig,
};

type B = ScalarRefBackend;
const BE: B = ScalarRefBackend;

fn param(v: &[f32]) -> Tensor<B> {
    Tensor::from_vec(&BE, v.to_vec(), [v.len()])
        .unwrap()
        .requires_grad()
        .unwrap()
}

fn set_grad(p: &Tensor<B>, g: &[f32]) {
    p.set_grad(Some(Tensor::from_vec(&BE, g.to_vec(), [g.len()]).unwrap()))
        .unwrap();
}

fn assert_close(p: &Tensor<B>, want: &[f64]) {
    let got = p.to_vec().unwrap();
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        assert!(
            (f64::from(*g) - w).abs() <= 2e-6 * w.abs().max(1.0),
            "got {got:?}, PyTorch's rule gives {want:?}"
        );
    }
}

#[test]
fn sgd_groups_step_with_their_own_lr_weight_decay_and_momentum() {
    // Group 0: the defaults (lr 0.1, momentum 0.9, no decay).
    // Group 1: lr 0.01, weight_decay 0.5, momentum 0.
    let (a, b) = (param(&[1.0, 2.0]), param(&[3.0]));
    let mut opt = Sgd::with_groups(
        vec![
            ParamGroup::new(vec![a.clone()]),
            ParamGroup::new(vec![b.clone()])
                .lr(0.01)
                .weight_decay(0.5)
                .momentum(0.0),
        ],
        SgdConfig {
            momentum: 0.9,
            ..SgdConfig::new(0.1)
        },
    )
    .unwrap();
    assert_eq!(opt.num_param_groups(), 2);
    assert_eq!(opt.group_lrs(), [0.1, 0.01]);
    assert_eq!(opt.param_groups()[1].params, 1..2);
    for _ in 0..2 {
        set_grad(&a, &[1.0, -1.0]);
        set_grad(&b, &[2.0]);
        opt.step().unwrap();
    }
    // a: buf = d = [1, −1]; p = [0.9, 2.1]; buf = 0.9·buf + d = [1.9, −1.9]; p −= 0.1·buf.
    assert_close(&a, &[0.71, 2.29]);
    // b: d = 2 + 0.5·3 = 3.5, p = 2.965; d = 2 + 0.5·2.965 = 3.4825, p = 2.930175.
    assert_close(&b, &[2.930175]);
}

#[test]
fn adam_groups_step_with_their_own_betas_and_lr() {
    let (a, b) = (param(&[1.0]), param(&[2.0]));
    let mut opt = Adam::with_groups(
        vec![
            ParamGroup::new(vec![a.clone()]),
            ParamGroup::new(vec![b.clone()]).lr(0.01).betas((0.5, 0.9)),
        ],
        AdamConfig::new(0.1),
    )
    .unwrap();
    for (ga, gb) in [(1.0, -2.0), (0.5, 3.0)] {
        set_grad(&a, &[ga]);
        set_grad(&b, &[gb]);
        opt.step().unwrap();
    }
    // m_t = β1·m + (1 − β1)·g, v_t = β2·v + (1 − β2)·g², p −= lr·(m/(1 − β1^t)) /
    // (sqrt(v/(1 − β2^t)) + eps), worked in f64:
    // a (0.9, 0.999, lr 0.1): 0.9, then 0.806782038…; b (0.5, 0.9, lr 0.01): 2.01, then
    // 2.004822378….
    assert_close(&a, &[0.806_782_038_298_161_1]);
    assert_close(&b, &[2.004_822_378_881_121_5]);
}

#[test]
fn the_gpt_recipe_decays_weights_not_biases() {
    let (w, bias) = (param(&[2.0]), param(&[2.0]));
    let mut opt = AdamW::with_groups(
        vec![
            ParamGroup::new(vec![w.clone()]).weight_decay(0.1),
            ParamGroup::new(vec![bias.clone()]).weight_decay(0.0),
        ],
        AdamWConfig::new(0.1),
    )
    .unwrap();
    set_grad(&w, &[1.0]);
    set_grad(&bias, &[1.0]);
    opt.step().unwrap();
    // Decoupled decay p·(1 − lr·wd) = 1.98, then the first Adam step −lr·g/|g|.
    assert_close(&w, &[1.88]);
    assert_close(&bias, &[1.9]);
}

#[test]
fn add_param_group_takes_the_defaults_for_what_it_does_not_set() {
    let (a, b) = (param(&[1.0]), param(&[1.0]));
    let mut opt = Sgd::new(vec![a.clone()], SgdConfig::new(0.5)).unwrap();
    opt.set_lr(0.25).unwrap();
    opt.add_param_group(ParamGroup::new(vec![b.clone()]).weight_decay(1.0))
        .unwrap();
    // The new group's rate is the constructor's (PyTorch's `defaults`), not the current one.
    assert_eq!(opt.group_lrs(), [0.25, 0.5]);
    assert_eq!(opt.parameters().len(), 2);
    set_grad(&a, &[1.0]);
    set_grad(&b, &[1.0]);
    opt.step().unwrap();
    assert_close(&a, &[0.75]);
    // d = 1 + 1·1 = 2; p = 1 − 0.5·2 = 0.
    assert_close(&b, &[0.0]);
    opt.set_group_lrs(&[0.1, 0.2]).unwrap();
    assert_eq!(opt.group_lrs(), [0.1, 0.2]);
    assert_eq!(opt.lr(), 0.1);
}

#[test]
fn bad_groups_are_refused_with_a_clear_error() {
    let a = param(&[1.0]);
    let msg = |r: exactgrad_nn::Result<()>| r.unwrap_err().to_string();
    let mut sgd = Sgd::new(vec![a.clone()], SgdConfig::new(0.1)).unwrap();
    let err = msg(sgd.add_param_group(ParamGroup::new(vec![a.clone()])));
    assert!(err.contains("already in a parameter group"), "{err}");
    let err = msg(sgd.add_param_group(ParamGroup::new(vec![param(&[1.0])]).betas((0.9, 0.9))));
    assert!(err.contains("betas"), "{err}");
    let err = msg(sgd.add_param_group(ParamGroup::new(vec![param(&[1.0])]).lr(-1.0)));
    assert!(err.contains("lr"), "{err}");
    assert_eq!(sgd.num_param_groups(), 1);
    let err = msg(sgd.set_group_lrs(&[0.1, 0.2]));
    assert!(
        err.contains("2 learning rates") && err.contains("1 parameter groups"),
        "{err}"
    );
    let mut adam = Adam::new(vec![a.clone()], AdamConfig::new(0.1)).unwrap();
    let err = msg(adam.add_param_group(ParamGroup::new(vec![param(&[1.0])]).momentum(0.9)));
    assert!(err.contains("momentum"), "{err}");
    let err = Adam::<B>::with_groups(vec![], AdamConfig::new(0.1)).unwrap_err();
    assert!(
        err.to_string().contains("at least one parameter group"),
        "{err}"
    );
    let no_grad = Tensor::from_vec(&BE, vec![1.0], [1]).unwrap();
    let err = msg(adam.add_param_group(ParamGroup::new(vec![no_grad])));
    assert!(err.contains("leaf that requires grad"), "{err}");
}

#[test]
fn groups_are_part_of_the_optimizer_state() {
    let (a, b) = (param(&[1.0]), param(&[1.0, 2.0]));
    let groups = || {
        vec![
            ParamGroup::new(vec![a.clone()]).betas((0.8, 0.99)),
            ParamGroup::new(vec![b.clone()]).lr(0.01).weight_decay(0.2),
        ]
    };
    let mut opt = AdamW::with_groups(groups(), AdamWConfig::new(0.1)).unwrap();
    set_grad(&a, &[1.0]);
    set_grad(&b, &[1.0, 1.0]);
    opt.step().unwrap();
    let state = opt.state_dict().unwrap();
    assert_eq!(state.metadata("param_groups"), Some("2"));
    assert_eq!(state.metadata("param_groups.1.params"), Some("1"));
    assert_eq!(state.metadata("param_groups.1.lr"), Some("0.01"));
    assert_eq!(state.metadata("param_groups.0.beta1"), Some("0.8"));
    let mut other = AdamW::with_groups(groups(), AdamWConfig::new(0.5)).unwrap();
    other.load_state_dict(&state).unwrap();
    assert_eq!(other.param_groups(), opt.param_groups());
    assert_eq!(other.step_count(1), 1);
    // Another grouping of the same parameters is refused.
    let mut one = AdamW::new(vec![a.clone(), b.clone()], AdamWConfig::new(0.1)).unwrap();
    let err = one.load_state_dict(&state).unwrap_err().to_string();
    assert!(
        err.contains("2 parameter groups") && err.contains("has 1"),
        "{err}"
    );
    // A state of the layout before groups (hyper-parameters at the top level).
    let mut old = TensorFile::new();
    for n in state.names() {
        match state.floats(n) {
            Ok((s, v)) => old.insert_floats(n, s, v.to_vec()).unwrap(),
            Err(_) => {
                let (s, v) = state.ints(n).unwrap();
                old.insert_ints(n, s, v.to_vec()).unwrap()
            }
        }
    }
    for (k, v) in state.metadata_entries() {
        if k != "param_groups" {
            old.set_metadata(k, v);
        }
    }
    let err = other.load_state_dict(&old).unwrap_err().to_string();
    assert!(
        err.contains("before optimizers had parameter groups"),
        "{err}"
    );
}

/// SGD over two parameters in two groups at rates `lrs`.
fn two_groups(lrs: [f64; 2]) -> Sgd<B> {
    Sgd::with_groups(
        vec![
            ParamGroup::new(vec![param(&[1.0])]).lr(lrs[0]),
            ParamGroup::new(vec![param(&[1.0])]).lr(lrs[1]),
        ],
        SgdConfig::new(lrs[0]),
    )
    .unwrap()
}

fn close(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= 1e-15)
}

#[test]
fn schedulers_scale_each_groups_own_rate() {
    // StepLR(step_size 2, gamma 0.1): every group's lr · gamma at steps 2, 4, …
    let mut opt = two_groups([0.1, 0.02]);
    let mut s = StepLr::new(&mut opt, StepLrConfig::new(2)).unwrap();
    assert_eq!(opt.group_lrs(), [0.1, 0.02]);
    s.step(&mut opt).unwrap();
    assert_eq!(opt.group_lrs(), [0.1, 0.02]);
    s.step(&mut opt).unwrap();
    assert_eq!(opt.group_lrs(), [0.1 * 0.1, 0.02 * 0.1]);
    assert_eq!(s.get_last_lrs(), opt.group_lrs());

    // LinearLR(0.5 → 1 over 2 steps): lr·0.5, then lr·(1 + 0.5/1), then lr·(1 + 0.5/1.5).
    let mut opt = two_groups([0.1, 0.02]);
    let mut s = LinearLr::new(
        &mut opt,
        LinearLrConfig {
            start_factor: 0.5,
            end_factor: 1.0,
            total_iters: 2,
        },
    )
    .unwrap();
    assert!(
        close(&opt.group_lrs(), &[0.05, 0.01]),
        "{:?}",
        opt.group_lrs()
    );
    s.step(&mut opt).unwrap();
    assert!(
        close(&opt.group_lrs(), &[0.075, 0.015]),
        "{:?}",
        opt.group_lrs()
    );
    s.step(&mut opt).unwrap();
    assert!(
        close(&opt.group_lrs(), &[0.1, 0.02]),
        "{:?}",
        opt.group_lrs()
    );

    // CosineAnnealingLR(T_max 2): each group's base · (1 + cos(π·t/2)) / 2.
    let mut opt = two_groups([0.1, 0.02]);
    let mut s = CosineAnnealingLr::new(&mut opt, CosineAnnealingLrConfig::new(2)).unwrap();
    s.step(&mut opt).unwrap();
    assert!(
        close(&opt.group_lrs(), &[0.05, 0.01]),
        "{:?}",
        opt.group_lrs()
    );
    s.step(&mut opt).unwrap();
    assert!(
        close(&opt.group_lrs(), &[0.0, 0.0]),
        "{:?}",
        opt.group_lrs()
    );

    // OneCycleLR with one max_lr gives every group the same rate, as PyTorch.
    let mut opt = two_groups([0.1, 0.02]);
    let mut s = OneCycleLr::new(&mut opt, OneCycleLrConfig::new(1.0, 10)).unwrap();
    s.step(&mut opt).unwrap();
    let lrs = opt.group_lrs();
    assert_eq!(lrs[0], lrs[1]);
    assert_eq!(lrs[0], s.get_last_lr());
}

#[test]
fn a_group_added_after_the_scheduler_or_a_sequential_one_is_refused() {
    let mut opt = two_groups([0.1, 0.02]);
    let err = SequentialLr::new(
        &mut opt,
        vec![StepLrConfig::new(2).into(), StepLrConfig::new(3).into()],
        vec![4],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("one parameter group"), "{err}");
    let mut opt = two_groups([0.1, 0.02]);
    let mut s = StepLr::new(&mut opt, StepLrConfig::new(2)).unwrap();
    opt.add_param_group(ParamGroup::new(vec![param(&[1.0])]))
        .unwrap();
    let err = s.step(&mut opt).unwrap_err().to_string();
    assert!(
        err.contains("3 parameter groups") && err.contains("built on 2"),
        "{err}"
    );
    assert_eq!(s.last_epoch(), 0, "a refused step changes nothing");
}

#[test]
fn scheduler_groups_are_saved_and_restored() {
    let mut opt = two_groups([0.1, 0.02]);
    let mut s = StepLr::new(&mut opt, StepLrConfig::new(1)).unwrap();
    s.step(&mut opt).unwrap();
    let state = s.state();
    assert_eq!(state.groups.len(), 1);
    assert_eq!(state.groups[0].base_lr, 0.02);
    let mut twin_opt = two_groups([0.1, 0.02]);
    let mut twin = StepLr::new(&mut twin_opt, StepLrConfig::new(1)).unwrap();
    twin.restore(&state, &mut twin_opt).unwrap();
    assert_eq!(twin_opt.group_lrs(), opt.group_lrs());
    s.step(&mut opt).unwrap();
    twin.step(&mut twin_opt).unwrap();
    assert_eq!(twin_opt.group_lrs(), opt.group_lrs());
    assert_eq!(opt.group_lrs(), [0.1 * 0.1 * 0.1, 0.02 * 0.1 * 0.1]);
    // A state of another number of groups is refused.
    let mut one = Sgd::new(vec![param(&[1.0])], SgdConfig::new(0.1)).unwrap();
    let mut single = StepLr::new(&mut one, StepLrConfig::new(1)).unwrap();
    let err = single.load_state(&state).unwrap_err().to_string();
    assert!(err.contains("2 parameter groups"), "{err}");
}

#[test]
fn a_training_checkpoint_holds_the_groups_and_refuses_the_format_before_them() {
    use exactgrad_core::Philox;
    use exactgrad_nn::checkpoint::{TrainingCheckpoint, TrainingState};
    use exactgrad_nn::{Linear, ModuleExt};
    let build = |seed| {
        let model = Linear::new(&BE, 3, 2, &mut Philox::new(seed)).unwrap();
        let (w, b): (Vec<_>, Vec<_>) = model
            .parameters()
            .into_iter()
            .partition(|p| p.dims().len() == 2);
        let mut opt = Sgd::with_groups(
            vec![
                ParamGroup::new(w).weight_decay(0.1).momentum(0.9),
                ParamGroup::new(b).lr(0.5),
            ],
            SgdConfig::new(0.1),
        )
        .unwrap();
        let sched = StepLr::new(&mut opt, StepLrConfig::new(1)).unwrap();
        (model, opt, sched)
    };
    let (model, mut opt, mut sched) = build(1);
    for p in model.parameters() {
        p.set_grad(Some(Tensor::ones(&BE, p.shape().clone()).unwrap()))
            .unwrap();
    }
    opt.step().unwrap();
    sched.step(&mut opt).unwrap();
    let ckpt = TrainingState::new(&model, &mut opt)
        .scheduler(&mut sched)
        .capture()
        .unwrap();
    assert_eq!(
        ckpt.file().metadata("format"),
        Some("exactgrad training checkpoint 4")
    );
    let (model2, mut opt2, mut sched2) = build(2);
    TrainingState::new(&model2, &mut opt2)
        .scheduler(&mut sched2)
        .restore(&ckpt)
        .unwrap();
    assert_eq!(opt2.param_groups(), opt.param_groups());
    assert_eq!(opt2.group_lrs(), [0.1 * 0.1, 0.5 * 0.1]);
    assert_eq!(sched2.get_last_lrs(), sched.get_last_lrs());
    assert!(opt2.momentum_buffer(0).is_some());
    // The format before parameter groups is refused, naming both versions.
    let mut old = ckpt.file().clone();
    old.set_metadata("format", "exactgrad training checkpoint 3");
    let (model3, mut opt3, mut sched3) = build(3);
    let err = TrainingState::new(&model3, &mut opt3)
        .scheduler(&mut sched3)
        .restore(&TrainingCheckpoint::from_file(old))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("training checkpoint 3") && err.contains("training checkpoint 4"),
        "{err}"
    );
}
