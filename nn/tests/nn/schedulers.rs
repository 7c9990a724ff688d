//! Learning-rate schedulers against PyTorch 2.15.0, state restore, and argument errors.
//!
//! `testdata/nn/schedulers.safetensors` is written by `tools/sched_oracle.py` (see its
//! docstring): for every case the learning rate after construction and after each step,
//! and the case's configuration in the metadata, from which these tests build the same
//! scheduler. Every rate must agree within 1e-12 relative (exactly where PyTorch's is 0).

use exactgrad_autograd::Tensor;
use exactgrad_backends::ScalarRefBackend;
use exactgrad_core::Error as CoreError;
use exactgrad_nn::optim::{
    Adam, AdamConfig, AnnealStrategy, CosineAnnealingLr, CosineAnnealingLrConfig, ExponentialLr,
    ExponentialLrConfig, LinearLr, LinearLrConfig, LrScheduler, MultiStepLr, MultiStepLrConfig,
    OneCycleLr, OneCycleLrConfig, Optimizer, ParamGroup, SchedulerConfig, SchedulerKind,
    SchedulerState, SequentialLr, Sgd, SgdConfig, StepLr, StepLrConfig,
};
use exactgrad_nn::Error;
use safetensors::SafeTensors;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

type B = ScalarRefBackend;

const TOLERANCE: f64 = 1e-12;

struct Oracle {
    bytes: Vec<u8>,
    meta: HashMap<String, String>,
}

impl Oracle {
    fn open() -> Self {
        Self::open_file("schedulers.safetensors")
    }

    fn open_file(name: &str) -> Self {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/nn")
            .join(name);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (_, m) = SafeTensors::read_metadata(&bytes).expect("safetensors header");
        let meta = m.metadata().clone().unwrap_or_default();
        Self { bytes, meta }
    }

    fn f64s(&self, name: &str) -> Vec<f64> {
        let st = SafeTensors::deserialize(&self.bytes).expect("safetensors file");
        let t = st
            .tensor(name)
            .unwrap_or_else(|e| panic!("tensor {name}: {e}"));
        assert_eq!(t.dtype(), safetensors::Dtype::F64, "{name}");
        t.data()
            .chunks_exact(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn cases(&self) -> Vec<String> {
        self.meta["cases"].split(',').map(str::to_string).collect()
    }

    fn config(&self, key: &str) -> Config {
        Config(
            self.meta
                .get(key)
                .unwrap_or_else(|| panic!("metadata {key}"))
                .split(';')
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("key=value");
                    (k.to_string(), v.to_string())
                })
                .collect(),
        )
    }
}

/// One "key=value;..." configuration of the oracle.
struct Config(HashMap<String, String>);

impl Config {
    fn str(&self, key: &str) -> &str {
        self.0
            .get(key)
            .unwrap_or_else(|| panic!("missing {key} in {:?}", self.0))
    }
    fn f64(&self, key: &str) -> f64 {
        self.str(key).parse().unwrap()
    }
    fn u64(&self, key: &str) -> u64 {
        self.str(key).parse().unwrap()
    }
    fn f64_or(&self, key: &str, default: f64) -> f64 {
        self.0.get(key).map_or(default, |v| v.parse().unwrap())
    }
    fn list(&self, key: &str) -> Vec<u64> {
        let s = self.str(key);
        if s.is_empty() {
            Vec::new()
        } else {
            s.split('|').map(|v| v.parse().unwrap()).collect()
        }
    }

    /// The scheduler configuration, under PyTorch's argument names and defaults.
    fn scheduler(&self) -> SchedulerConfig {
        match self.str("kind") {
            "StepLR" => StepLrConfig {
                step_size: self.u64("step_size"),
                gamma: self.f64_or("gamma", 0.1),
            }
            .into(),
            "MultiStepLR" => MultiStepLrConfig {
                milestones: self.list("milestones"),
                gamma: self.f64_or("gamma", 0.1),
            }
            .into(),
            "ExponentialLR" => ExponentialLrConfig {
                gamma: self.f64("gamma"),
            }
            .into(),
            "CosineAnnealingLR" => CosineAnnealingLrConfig {
                t_max: self.u64("T_max"),
                eta_min: self.f64_or("eta_min", 0.0),
            }
            .into(),
            "LinearLR" => LinearLrConfig {
                start_factor: self.f64_or("start_factor", 1.0 / 3.0),
                end_factor: self.f64_or("end_factor", 1.0),
                total_iters: self.0.get("total_iters").map_or(5, |v| v.parse().unwrap()),
            }
            .into(),
            "OneCycleLR" => {
                let mut c = match self.0.get("total_steps") {
                    Some(t) => OneCycleLrConfig::new(self.f64("max_lr"), t.parse().unwrap()),
                    None => OneCycleLrConfig::from_epochs(
                        self.f64("max_lr"),
                        self.u64("epochs"),
                        self.u64("steps_per_epoch"),
                    )
                    .unwrap(),
                };
                c.pct_start = self.f64_or("pct_start", c.pct_start);
                c.div_factor = self.f64_or("div_factor", c.div_factor);
                c.final_div_factor = self.f64_or("final_div_factor", c.final_div_factor);
                c.three_phase = self.0.get("three_phase").is_some_and(|v| v == "True");
                c.anneal_strategy = match self.0.get("anneal_strategy").map(String::as_str) {
                    None | Some("cos") => AnnealStrategy::Cos,
                    Some("linear") => AnnealStrategy::Linear,
                    Some(other) => panic!("anneal_strategy {other}"),
                };
                c.into()
            }
            other => panic!("unknown scheduler kind {other}"),
        }
    }
}

fn optimizer(lr: f64) -> Sgd<B> {
    let p = Tensor::from_vec(&ScalarRefBackend, vec![0.5f32], [1])
        .unwrap()
        .requires_grad()
        .unwrap();
    Sgd::new(vec![p], SgdConfig::new(lr)).unwrap()
}

/// A single scheduler on `opt` from its configuration.
fn single<O: Optimizer<B> + ?Sized>(
    opt: &mut O,
    config: SchedulerConfig,
) -> exactgrad_nn::Result<Box<dyn LrScheduler>> {
    Ok(match config {
        SchedulerConfig::Step(c) => Box::new(StepLr::new(opt, c)?),
        SchedulerConfig::MultiStep(c) => Box::new(MultiStepLr::new(opt, c)?),
        SchedulerConfig::Exponential(c) => Box::new(ExponentialLr::new(opt, c)?),
        SchedulerConfig::CosineAnnealing(c) => Box::new(CosineAnnealingLr::new(opt, c)?),
        SchedulerConfig::Linear(c) => Box::new(LinearLr::new(opt, c)?),
        SchedulerConfig::OneCycle(c) => Box::new(OneCycleLr::new(opt, c)?),
    })
}

/// The optimizer and scheduler of an oracle case, built as the oracle builds them.
fn build_case(oracle: &Oracle, case: &str) -> (Sgd<B>, Box<dyn LrScheduler>) {
    let cfg = oracle.config(case);
    let mut opt = optimizer(cfg.f64("lr"));
    let sched: Box<dyn LrScheduler> = if cfg.str("kind") == "SequentialLR" {
        let n: usize = cfg.str("schedulers").parse().unwrap();
        let inner = (0..n)
            .map(|i| oracle.config(&format!("{case}/{i}")).scheduler())
            .collect();
        Box::new(SequentialLr::new(&mut opt, inner, cfg.list("milestones")).unwrap())
    } else {
        single(&mut opt, cfg.scheduler()).unwrap()
    };
    (opt, sched)
}

/// The optimizer's rate for a schedule value (negative values become 0).
fn clamped(lr: f64) -> f64 {
    if lr < 0.0 {
        0.0
    } else {
        lr
    }
}

/// Runs `steps` steps as a training loop does, returning the schedule's rate after each.
fn run(opt: &mut Sgd<B>, sched: &mut Box<dyn LrScheduler>, steps: usize) -> Vec<f64> {
    (0..steps)
        .map(|_| {
            opt.step().unwrap();
            sched.step(opt).unwrap();
            let lr = sched.get_last_lr();
            assert_eq!(opt.lr().to_bits(), clamped(lr).to_bits());
            lr
        })
        .collect()
}

fn rel_err(got: f64, want: f64) -> f64 {
    if want == 0.0 {
        if got == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        ((got - want) / want).abs()
    }
}

#[test]
fn every_case_matches_pytorch() {
    let oracle = Oracle::open();
    let cases = oracle.cases();
    assert!(cases.len() >= 25, "{} cases", cases.len());
    // Worst relative error, bit-exact rates and all rates per PyTorch class.
    let mut summary: BTreeMap<String, (f64, usize, usize)> = BTreeMap::new();
    let mut failures = Vec::new();
    for case in &cases {
        let cfg = oracle.config(case);
        let want = oracle.f64s(case);
        let steps = cfg.u64("steps") as usize;
        assert_eq!(want.len(), steps + 1, "{case}");
        let (mut opt, mut sched) = build_case(&oracle, case);
        assert_eq!(sched.last_epoch(), 0, "{case}");
        assert_eq!(opt.lr().to_bits(), sched.get_last_lr().to_bits(), "{case}");
        let mut got = vec![sched.get_last_lr()];
        got.extend(run(&mut opt, &mut sched, steps));
        assert_eq!(sched.last_epoch(), steps as i64, "{case}");
        let entry = summary
            .entry(cfg.str("kind").to_string())
            .or_insert((0.0, 0, 0));
        for (t, (&g, &w)) in got.iter().zip(&want).enumerate() {
            let e = rel_err(g, w);
            entry.0 = entry.0.max(e);
            entry.1 += usize::from(g.to_bits() == w.to_bits());
            entry.2 += 1;
            if e > TOLERANCE {
                failures.push(format!(
                    "{case} step {t}: ours {g:e}, torch {w:e}, rel {e:e}"
                ));
            }
        }
        if let Some(k) = cfg.0.get("raises_at") {
            // PyTorch raised at this step; so must we, leaving everything unchanged.
            let k: i64 = k.parse().unwrap();
            assert_eq!(k, steps as i64 + 1, "{case}");
            let before = sched.state();
            let lr = opt.lr();
            let err = sched.step(&mut opt).expect_err(case);
            assert!(
                matches!(
                    &err,
                    Error::Core(CoreError::InvalidArgument {
                        op: "OneCycleLr::step",
                        ..
                    })
                ),
                "{case}: {err}"
            );
            assert_eq!(sched.state(), before, "{case}");
            assert_eq!(opt.lr().to_bits(), lr.to_bits(), "{case}");
        }
    }
    for (kind, (worst, exact, total)) in &summary {
        println!("{kind:>18}: worst relative error {worst:.3e}, {exact}/{total} rates bit-exact");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    for kind in [
        "StepLR",
        "MultiStepLR",
        "ExponentialLR",
        "CosineAnnealingLR",
        "LinearLR",
        "OneCycleLR",
        "SequentialLR",
    ] {
        assert!(summary.contains_key(kind), "no {kind} case");
    }
}

/// Every case, interrupted half-way: a fresh optimizer and scheduler restored from the
/// state continue with the same bits as the uninterrupted run.
#[test]
fn restoring_mid_run_continues_identically() {
    let oracle = Oracle::open();
    for case in oracle.cases() {
        let steps = oracle.config(&case).u64("steps") as usize;
        let (mut opt, mut sched) = build_case(&oracle, &case);
        let full = run(&mut opt, &mut sched, steps);

        let half = steps / 2 + 1;
        let (mut opt_a, mut sched_a) = build_case(&oracle, &case);
        let first = run(&mut opt_a, &mut sched_a, half);
        let state = sched_a.state();
        assert_eq!(state.last_epoch, half as i64, "{case}");
        assert_eq!(state.last_lr.to_bits(), first[half - 1].to_bits());

        let (mut opt_b, mut sched_b) = build_case(&oracle, &case);
        sched_b.restore(&state, &mut opt_b).unwrap();
        assert_eq!(sched_b.state(), state, "{case}");
        assert_eq!(
            opt_b.lr().to_bits(),
            clamped(state.last_lr).to_bits(),
            "{case}"
        );
        let rest = run(&mut opt_b, &mut sched_b, steps - half);
        let resumed: Vec<u64> = first.iter().chain(&rest).map(|v| v.to_bits()).collect();
        let reference: Vec<u64> = full.iter().map(|v| v.to_bits()).collect();
        assert_eq!(resumed, reference, "{case}");
    }
}

#[test]
fn the_state_is_plain_numbers() {
    let mut opt = optimizer(0.1);
    let mut sched = SequentialLr::new(
        &mut opt,
        vec![
            LinearLrConfig {
                start_factor: 0.5,
                end_factor: 1.0,
                total_iters: 4,
            }
            .into(),
            ExponentialLrConfig { gamma: 0.5 }.into(),
        ],
        vec![4],
    )
    .unwrap();
    for _ in 0..6 {
        sched.step(&mut opt).unwrap();
    }
    let s = sched.state();
    assert_eq!(s.kind, SchedulerKind::Sequential);
    assert_eq!((s.last_epoch, s.base_lr), (6, 0.1));
    assert_eq!(s.children.len(), 2);
    assert_eq!(s.children[0].kind, SchedulerKind::Linear);
    assert_eq!(s.children[0].last_epoch, 3);
    assert_eq!(s.children[1].kind, SchedulerKind::Exponential);
    // Restarted at step 4 with base_lr · gamma^0, then two steps of × 0.5.
    assert_eq!(s.children[1].last_epoch, 2);
    assert_eq!(s.last_lr, 0.1 * 0.5 * 0.5);
    assert_eq!(sched.current(), 1);
    assert_eq!(sched.milestones(), &[4]);
}

#[test]
fn recursive_schedules_follow_a_changed_rate() {
    // As in PyTorch, the recursive forms multiply the optimizer's current rate.
    let mut opt = optimizer(0.1);
    let mut sched = ExponentialLr::new(&mut opt, ExponentialLrConfig { gamma: 0.9 }).unwrap();
    sched.step(&mut opt).unwrap();
    assert_eq!(opt.lr(), 0.1 * 0.9);
    opt.set_lr(1.0).unwrap();
    sched.step(&mut opt).unwrap();
    assert_eq!(opt.lr(), 0.9);
    assert_eq!(sched.base_lr(), 0.1);
    // OneCycle is a closed form: it ignores the change.
    let mut opt = optimizer(0.1);
    let mut one = OneCycleLr::new(&mut opt, OneCycleLrConfig::new(0.1, 10)).unwrap();
    let mut twin_opt = optimizer(0.1);
    let mut twin = OneCycleLr::new(&mut twin_opt, OneCycleLrConfig::new(0.1, 10)).unwrap();
    opt.set_lr(5.0).unwrap();
    one.step(&mut opt).unwrap();
    twin.step(&mut twin_opt).unwrap();
    assert_eq!(opt.lr(), twin_opt.lr());
}

#[test]
fn schedulers_work_through_trait_objects_and_next_lr() {
    let mut opt = optimizer(0.2);
    let mut boxed: Box<dyn LrScheduler> =
        Box::new(StepLr::new(&mut opt, StepLrConfig::new(2)).unwrap());
    let lrs: Vec<f64> = (0..4).map(|_| boxed.next_lr(0.2).unwrap()).collect();
    // next_lr does not touch the optimizer; with the rate held at 0.2 the decay applies
    // to 0.2 at every multiple of 2.
    assert_eq!(lrs, [0.2, 0.2 * 0.1, 0.2, 0.2 * 0.1]);
    assert_eq!(opt.lr(), 0.2);
    assert!(boxed.next_lr(f64::NAN).is_err());
    assert!(boxed.next_lr(-1.0).is_err());
    assert_eq!(boxed.last_epoch(), 4);
}

fn assert_invalid<T: std::fmt::Debug>(r: exactgrad_nn::Result<T>, op: &str, arg: &str) {
    match r {
        Err(Error::Core(CoreError::InvalidArgument { op: o, arg: a, msg })) => {
            assert_eq!((o, a), (op, arg), "{msg}");
            assert!(!msg.is_empty());
        }
        other => panic!("expected InvalidArgument {op} {arg}, got {other:?}"),
    }
}

#[test]
fn bad_arguments_are_errors() {
    let opt = &mut optimizer(0.1);
    let step = |step_size, gamma| StepLrConfig { step_size, gamma };
    assert_invalid(StepLr::new(opt, step(0, 0.1)), "StepLr::new", "step_size");
    assert_invalid(
        StepLr::new(opt, step(1 << 54, 0.1)),
        "StepLr::new",
        "step_size",
    );
    for g in [0.0, -0.5, f64::NAN, f64::INFINITY] {
        assert_invalid(StepLr::new(opt, step(3, g)), "StepLr::new", "gamma");
        assert_invalid(
            ExponentialLr::new(opt, ExponentialLrConfig { gamma: g }),
            "ExponentialLr::new",
            "gamma",
        );
        assert_invalid(
            MultiStepLr::new(
                opt,
                MultiStepLrConfig {
                    milestones: vec![1],
                    gamma: g,
                },
            ),
            "MultiStepLr::new",
            "gamma",
        );
    }
    assert_invalid(
        MultiStepLr::new(opt, MultiStepLrConfig::new(vec![10, 5])),
        "MultiStepLr::new",
        "milestones",
    );
    assert_invalid(
        MultiStepLr::new(opt, MultiStepLrConfig::new(vec![5, 1 << 60])),
        "MultiStepLr::new",
        "milestones",
    );
    let cosine = |t_max, eta_min| CosineAnnealingLrConfig { t_max, eta_min };
    assert_invalid(
        CosineAnnealingLr::new(opt, cosine(0, 0.0)),
        "CosineAnnealingLr::new",
        "t_max",
    );
    for eta in [-1e-3, f64::NAN, f64::INFINITY] {
        assert_invalid(
            CosineAnnealingLr::new(opt, cosine(10, eta)),
            "CosineAnnealingLr::new",
            "eta_min",
        );
    }
    let linear = |start_factor, end_factor, total_iters| LinearLrConfig {
        start_factor,
        end_factor,
        total_iters,
    };
    for s in [0.0, -0.1, 1.5, f64::NAN] {
        assert_invalid(
            LinearLr::new(opt, linear(s, 1.0, 5)),
            "LinearLr::new",
            "start_factor",
        );
    }
    for e in [-0.1, 1.01, f64::NAN] {
        assert_invalid(
            LinearLr::new(opt, linear(0.5, e, 5)),
            "LinearLr::new",
            "end_factor",
        );
    }
    assert_invalid(
        LinearLr::new(opt, linear(0.5, 1.0, 0)),
        "LinearLr::new",
        "total_iters",
    );

    let oc = OneCycleLrConfig::new(0.1, 100);
    assert_invalid(
        OneCycleLr::new(
            opt,
            OneCycleLrConfig {
                total_steps: 0,
                ..oc
            },
        ),
        "OneCycleLr::new",
        "total_steps",
    );
    for p in [0.0, 1.0, -0.2, 1.5, f64::NAN] {
        assert_invalid(
            OneCycleLr::new(opt, OneCycleLrConfig { pct_start: p, ..oc }),
            "OneCycleLr::new",
            "pct_start",
        );
    }
    for v in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert_invalid(
            OneCycleLr::new(opt, OneCycleLrConfig { max_lr: v, ..oc }),
            "OneCycleLr::new",
            "max_lr",
        );
        assert_invalid(
            OneCycleLr::new(
                opt,
                OneCycleLrConfig {
                    div_factor: v,
                    ..oc
                },
            ),
            "OneCycleLr::new",
            "div_factor",
        );
        assert_invalid(
            OneCycleLr::new(
                opt,
                OneCycleLrConfig {
                    final_div_factor: v,
                    ..oc
                },
            ),
            "OneCycleLr::new",
            "final_div_factor",
        );
    }
    assert_invalid(
        OneCycleLr::new(
            opt,
            OneCycleLrConfig {
                div_factor: 1e-310,
                ..oc
            },
        ),
        "OneCycleLr::new",
        "div_factor",
    );
    // pct_start · total_steps = 1: the first phase has length 0 and step 0 is in it
    // (PyTorch divides by zero).
    assert_invalid(
        OneCycleLr::new(
            opt,
            OneCycleLrConfig {
                pct_start: 0.25,
                ..OneCycleLrConfig::new(0.1, 4)
            },
        ),
        "OneCycleLr::new",
        "pct_start",
    );
    // Three phases with 2·pct_start·N − 2 = N − 1: the last phase has length 0 and
    // step N falls in it.
    assert_invalid(
        OneCycleLr::new(
            opt,
            OneCycleLrConfig {
                pct_start: 0.55,
                three_phase: true,
                ..OneCycleLrConfig::new(0.1, 10)
            },
        ),
        "OneCycleLr::new",
        "pct_start",
    );
    assert_invalid(
        OneCycleLrConfig::from_epochs(0.1, 0, 10),
        "OneCycleLrConfig::from_epochs",
        "epochs",
    );
    assert_invalid(
        OneCycleLrConfig::from_epochs(0.1, 10, 0),
        "OneCycleLrConfig::from_epochs",
        "steps_per_epoch",
    );
    assert_eq!(
        opt.lr(),
        0.1,
        "a rejected scheduler leaves the optimizer alone"
    );

    let warm: SchedulerConfig = LinearLrConfig::default().into();
    let cos: SchedulerConfig = CosineAnnealingLrConfig::new(10).into();
    assert_invalid(
        SequentialLr::new(opt, vec![], vec![]),
        "SequentialLr::new",
        "schedulers",
    );
    assert_invalid(
        SequentialLr::new(opt, vec![warm.clone(), cos.clone()], vec![]),
        "SequentialLr::new",
        "milestones",
    );
    assert_invalid(
        SequentialLr::new(opt, vec![warm.clone(), cos.clone()], vec![3, 6]),
        "SequentialLr::new",
        "milestones",
    );
    assert_invalid(
        SequentialLr::new(opt, vec![warm.clone(), cos.clone()], vec![0]),
        "SequentialLr::new",
        "milestones",
    );
    assert_invalid(
        SequentialLr::new(
            opt,
            vec![warm.clone(), cos.clone(), warm.clone()],
            vec![5, 5],
        ),
        "SequentialLr::new",
        "milestones",
    );
    let one: SchedulerConfig = OneCycleLrConfig::new(0.1, 10).into();
    assert_invalid(
        SequentialLr::new(opt, vec![one.clone(), one], vec![5]),
        "SequentialLr::new",
        "schedulers",
    );
    // An invalid inner configuration is reported by its own constructor.
    assert_invalid(
        SequentialLr::new(
            opt,
            vec![warm, CosineAnnealingLrConfig::new(0).into()],
            vec![5],
        ),
        "CosineAnnealingLr::new",
        "t_max",
    );
    assert_eq!(opt.lr(), 0.1);
}

#[test]
fn one_cycle_stops_after_total_steps() {
    let mut opt = optimizer(0.1);
    let mut sched = OneCycleLr::new(&mut opt, OneCycleLrConfig::new(0.1, 5)).unwrap();
    for _ in 0..5 {
        sched.step(&mut opt).unwrap();
    }
    let before = sched.state();
    for _ in 0..2 {
        assert_invalid(sched.step(&mut opt), "OneCycleLr::step", "total_steps");
    }
    assert_eq!(sched.state(), before);
    // Inside a SequentialLr the error comes from the inner scheduler.
    let mut opt = optimizer(0.1);
    let mut seq = SequentialLr::new(
        &mut opt,
        vec![
            LinearLrConfig::default().into(),
            OneCycleLrConfig::new(0.1, 3).into(),
        ],
        vec![2],
    )
    .unwrap();
    for _ in 0..5 {
        seq.step(&mut opt).unwrap();
    }
    assert_eq!(seq.last_epoch(), 5);
    assert_invalid(seq.step(&mut opt), "OneCycleLr::step", "total_steps");
    assert_eq!(seq.last_epoch(), 5);
}

#[test]
fn bad_states_are_errors() {
    let mut opt = optimizer(0.1);
    let mut cos = CosineAnnealingLr::new(&mut opt, CosineAnnealingLrConfig::new(10)).unwrap();
    let good = cos.state();
    let op = "CosineAnnealingLr::load_state";
    let with = |f: &dyn Fn(&mut SchedulerState)| {
        let mut s = good.clone();
        f(&mut s);
        s
    };
    assert_invalid(
        cos.load_state(&with(&|s| s.kind = SchedulerKind::Step)),
        op,
        "state",
    );
    assert_invalid(
        cos.load_state(&with(&|s| s.last_epoch = -1)),
        op,
        "state.last_epoch",
    );
    assert_invalid(
        cos.load_state(&with(&|s| s.last_lr = -1.0)),
        op,
        "state.last_lr",
    );
    assert_invalid(
        cos.load_state(&with(&|s| s.children = vec![good.clone()])),
        op,
        "state",
    );
    assert_invalid(
        cos.load_state(&with(&|s| s.last_lr = f64::NAN)),
        op,
        "state.last_lr",
    );
    assert_invalid(
        cos.load_state(&with(&|s| s.base_lr = -1.0)),
        op,
        "state.base_lr",
    );
    assert_eq!(cos.state(), good, "a rejected state changes nothing");

    let mut one = OneCycleLr::new(&mut opt, OneCycleLrConfig::new(0.1, 10)).unwrap();
    let s = one.state();
    let op = "OneCycleLr::load_state";
    assert_invalid(
        one.load_state(&SchedulerState {
            last_epoch: 11,
            ..s.clone()
        }),
        op,
        "state",
    );
    assert_invalid(
        one.load_state(&SchedulerState {
            base_lr: 0.5,
            ..s.clone()
        }),
        op,
        "state",
    );
    // Only the cycle's own rate at a step is a state of it.
    assert_invalid(
        one.load_state(&SchedulerState {
            last_lr: s.last_lr * 2.0,
            ..s.clone()
        }),
        op,
        "state.last_lr",
    );
    let mut later = OneCycleLr::new(&mut opt, OneCycleLrConfig::new(0.1, 10)).unwrap();
    for _ in 0..10 {
        later.step(&mut opt).unwrap();
    }
    one.load_state(&later.state()).unwrap();
    assert_eq!(one.state(), later.state());

    let mut seq = SequentialLr::new(
        &mut opt,
        vec![
            LinearLrConfig::default().into(),
            CosineAnnealingLrConfig::new(10).into(),
        ],
        vec![5],
    )
    .unwrap();
    let s = seq.state();
    let op = "SequentialLr::load_state";
    let mut fewer = s.clone();
    fewer.children.pop();
    assert_invalid(seq.load_state(&fewer), op, "state");
    let mut swapped = s.clone();
    swapped.children.swap(0, 1);
    assert_invalid(seq.load_state(&swapped), op, "state");
    assert_invalid(seq.load_state(&good), op, "state");
    let mut off = s.clone();
    off.last_lr *= 0.5;
    assert_invalid(seq.load_state(&off), op, "state.last_lr");
    // Inner schedulers that have not started yet have last_epoch −1.
    assert_eq!(s.children[1].last_epoch, -1);
    seq.load_state(&s).unwrap();
    assert_eq!(seq.state(), s);
}

/// PyTorch's `OneCycleLR(cycle_momentum=True)`, the default: the momentum of every group
/// (SGD's `momentum`, Adam's β1) goes from `max_momentum` down to `base_momentum` while the
/// rate rises, and back. Values worked by hand from PyTorch's `_annealing_cos` /
/// `_annealing_linear` for `total_steps = 10`, `pct_start = 0.3` (phase ends at steps 2
/// and 9).
#[test]
fn one_cycle_cycles_the_momentum_by_default() {
    let cos = [
        0.95,
        0.9,
        0.85,
        0.854_951_556_604_879,
        0.868_825_509_907_063_3,
    ];
    let linear = [
        0.95,
        0.9,
        0.85,
        0.864_285_714_285_714_2,
        0.878_571_428_571_428_6,
    ];
    for (strategy, want) in [(AnnealStrategy::Cos, cos), (AnnealStrategy::Linear, linear)] {
        let config = OneCycleLrConfig {
            anneal_strategy: strategy,
            ..OneCycleLrConfig::new(1.0, 10)
        };
        assert!(config.cycle_momentum);
        assert_eq!((config.base_momentum, config.max_momentum), (0.85, 0.95));
        // SGD's momentum.
        let mut sgd = optimizer(0.1);
        let mut s = OneCycleLr::new(&mut sgd, config).unwrap();
        let mut got = vec![sgd.momentum()];
        for _ in 1..want.len() {
            s.step(&mut sgd).unwrap();
            got.push(sgd.momentum());
        }
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-15,
                "{strategy:?}: {got:?}, want {want:?}"
            );
        }
        assert_eq!(s.get_last_momentum(), Some(got[got.len() - 1]));
        // Adam's β1, β2 untouched.
        let p = Tensor::from_vec(&ScalarRefBackend, vec![0.5f32], [1])
            .unwrap()
            .requires_grad()
            .unwrap();
        let mut adam =
            exactgrad_nn::optim::Adam::new(vec![p], exactgrad_nn::optim::AdamConfig::new(0.1))
                .unwrap();
        let mut s = OneCycleLr::new(&mut adam, config).unwrap();
        s.step(&mut adam).unwrap();
        assert!((adam.config().betas.0 - want[1]).abs() <= 1e-15);
        assert_eq!(adam.config().betas.1, 0.999);
    }
    // cycle_momentum = false leaves the momentum alone.
    let mut sgd = optimizer(0.1);
    let mut s = OneCycleLr::new(
        &mut sgd,
        OneCycleLrConfig {
            cycle_momentum: false,
            ..OneCycleLrConfig::new(1.0, 10)
        },
    )
    .unwrap();
    s.step(&mut sgd).unwrap();
    assert_eq!(sgd.momentum(), 0.0);
    assert_eq!(s.get_last_momentum(), None);
    // Inside a SequentialLr: max_momentum from construction, cycled while in charge.
    let mut sgd = optimizer(0.1);
    let mut s = SequentialLr::new(
        &mut sgd,
        vec![
            OneCycleLrConfig::new(1.0, 10).into(),
            StepLrConfig::new(2).into(),
        ],
        vec![10],
    )
    .unwrap();
    assert_eq!(sgd.momentum(), 0.95);
    s.step(&mut sgd).unwrap();
    assert!((sgd.momentum() - 0.9).abs() <= 1e-15, "{}", sgd.momentum());
}

/// Parameter groups and OneCycleLR's momentum cycle against PyTorch
/// (`testdata/nn/scheduler_groups.safetensors`, written by `tools/sched_oracle.py`): each
/// group's rate, and with OneCycleLR (PyTorch's default `cycle_momentum=True`) each
/// group's momentum (SGD's momentum, Adam's β1), after construction and after each step.
#[test]
fn groups_and_the_momentum_cycle_match_pytorch() {
    let oracle = Oracle::open_file("scheduler_groups.safetensors");
    let cases = oracle.cases();
    assert_eq!(cases.len(), 5);
    let mut cycled = 0;
    for case in &cases {
        let cfg = oracle.config(case);
        let lrs: Vec<f64> = cfg
            .str("groups")
            .split('|')
            .map(|v| v.parse().unwrap())
            .collect();
        let steps = cfg.u64("steps") as usize;
        let groups: Vec<ParamGroup<B>> = lrs
            .iter()
            .map(|&lr| {
                let p = Tensor::from_vec(&ScalarRefBackend, vec![0.0f32], [1])
                    .unwrap()
                    .requires_grad()
                    .unwrap();
                ParamGroup::new(vec![p]).lr(lr)
            })
            .collect();
        let mut opt: Box<dyn Optimizer<B>> = match cfg.str("optimizer") {
            "SGD" => Box::new(Sgd::with_groups(groups, SgdConfig::new(lrs[0])).unwrap()),
            "Adam" => Box::new(Adam::with_groups(groups, AdamConfig::new(lrs[0])).unwrap()),
            other => panic!("optimizer {other}"),
        };
        let mut sched = single(opt.as_mut(), cfg.scheduler()).unwrap();
        let cycles = cfg.str("kind") == "OneCycleLR";
        let (mut lrs_got, mut moms_got) = (vec![opt.group_lrs()], vec![opt.momentum()]);
        for _ in 0..steps {
            for p in opt.parameters() {
                p.set_grad(Some(
                    Tensor::from_vec(&ScalarRefBackend, vec![1.0f32], [1]).unwrap(),
                ))
                .unwrap();
            }
            opt.step().unwrap();
            sched.step(opt.as_mut()).unwrap();
            lrs_got.push(opt.group_lrs());
            moms_got.push(opt.momentum());
        }
        for (g, _) in lrs.iter().enumerate() {
            let want = oracle.f64s(&format!("{case}/lr/{g}"));
            assert_eq!(want.len(), steps + 1, "{case}");
            for (t, w) in want.iter().enumerate() {
                // The optimizer's rate: a negative schedule value becomes 0 (`run`).
                let (got, w) = (lrs_got[t][g], clamped(*w));
                assert!(
                    rel_err(got, w) <= TOLERANCE,
                    "{case} group {g} step {t}: rate {got:e}, torch {w:e}"
                );
            }
            if cycles {
                cycled += 1;
                let want = oracle.f64s(&format!("{case}/momentum/{g}"));
                for (t, w) in want.iter().enumerate() {
                    let got = moms_got[t];
                    assert!(
                        rel_err(got, *w) <= TOLERANCE,
                        "{case} group {g} step {t}: momentum {got:e}, torch {w:e}"
                    );
                }
            }
        }
    }
    assert_eq!(cycled, 3, "momentum series checked");
}
