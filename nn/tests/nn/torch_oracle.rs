//! Optimizers, gradient clipping, `Linear` and a small MLP against PyTorch 2.15.0 (CPU).
//!
//! The reference files in `testdata/nn/` are written by `tools/nn_oracle.py` (see its
//! docstring for the layout); these tests only read them. Agreement is measured per
//! tensor as `max |ours − torch| / max |torch|` (relative to the tensor's largest
//! magnitude) and must be at most 1e-6 for the optimizers, clipping and `Linear`.

use exactgrad_autograd::{BackwardOptions, CrossEntropyOptions, Tensor};
use exactgrad_backends::ScalarRefBackend;
use exactgrad_nn::optim::{
    clip_grad_norm, clip_grad_value, Adam, AdamConfig, AdamW, AdamWConfig, Optimizer, ParamGroup,
    Sgd, SgdConfig,
};
use exactgrad_nn::{Linear, Module, ModuleExt, Relu, Sequential};
use safetensors::SafeTensors;
use std::collections::HashMap;
use std::path::PathBuf;

type B = ScalarRefBackend;

struct Oracle {
    bytes: Vec<u8>,
    meta: HashMap<String, String>,
}

impl Oracle {
    fn open(name: &str) -> Self {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/nn")
            .join(name);
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let (_, m) = SafeTensors::read_metadata(&bytes).expect("safetensors header");
        let meta = m.metadata().clone().unwrap_or_default();
        Self { bytes, meta }
    }

    fn raw(&self, name: &str) -> (Vec<u8>, Vec<usize>, safetensors::Dtype) {
        let st = SafeTensors::deserialize(&self.bytes).expect("safetensors file");
        let t = st
            .tensor(name)
            .unwrap_or_else(|e| panic!("tensor {name}: {e}"));
        (t.data().to_vec(), t.shape().to_vec(), t.dtype())
    }

    fn f32(&self, name: &str) -> (Vec<f32>, Vec<usize>) {
        let (data, shape, dtype) = self.raw(name);
        assert_eq!(dtype, safetensors::Dtype::F32, "{name}");
        (
            data.chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect(),
            shape,
        )
    }

    fn i64(&self, name: &str) -> Vec<i64> {
        let (data, _, dtype) = self.raw(name);
        assert_eq!(dtype, safetensors::Dtype::I64, "{name}");
        data.chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn tensor(&self, name: &str) -> Tensor<B> {
        let (v, s) = self.f32(name);
        Tensor::from_vec(&ScalarRefBackend, v, s).unwrap()
    }

    fn cases(&self) -> Vec<String> {
        self.meta["cases"].split(',').map(str::to_string).collect()
    }

    fn config(&self, case: &str) -> HashMap<String, String> {
        self.meta[case]
            .split(';')
            .map(|kv| {
                let (k, v) = kv.split_once('=').expect("key=value");
                (k.to_string(), v.to_string())
            })
            .collect()
    }
}

fn num(cfg: &HashMap<String, String>, key: &str, default: f64) -> f64 {
    cfg.get(key).map_or(default, |v| v.parse().unwrap())
}

fn flag(cfg: &HashMap<String, String>, key: &str) -> bool {
    cfg.get(key).is_some_and(|v| v == "True")
}

/// `max |got − want| / max |want|`.
fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let scale = want
        .iter()
        .fold(0.0f64, |m, &w| m.max(f64::from(w).abs()))
        .max(1e-30);
    let diff = got.iter().zip(want).fold(0.0f64, |m, (&g, &w)| {
        m.max((f64::from(g) - f64::from(w)).abs())
    });
    diff / scale
}

fn assert_close(what: &str, got: &Tensor<B>, want: &Tensor<B>, tol: f64) -> f64 {
    assert_eq!(got.dims(), want.dims(), "{what}: shape");
    let e = rel_err(&got.to_vec().unwrap(), &want.to_vec().unwrap());
    assert!(
        e <= tol,
        "{what}: relative error {e:e} > {tol:e}\n ours  {:?}\n torch {:?}",
        got.to_vec().unwrap(),
        want.to_vec().unwrap()
    );
    e
}

fn make_optimizer(
    kind: &str,
    cfg: &HashMap<String, String>,
    params: Vec<Tensor<B>>,
) -> Box<dyn Optimizer<B>> {
    match kind {
        "sgd" => Box::new(
            Sgd::new(
                params,
                SgdConfig {
                    lr: num(cfg, "lr", 1e-3),
                    momentum: num(cfg, "momentum", 0.0),
                    dampening: num(cfg, "dampening", 0.0),
                    weight_decay: num(cfg, "weight_decay", 0.0),
                    nesterov: flag(cfg, "nesterov"),
                    maximize: flag(cfg, "maximize"),
                },
            )
            .unwrap(),
        ),
        "adam" => Box::new(
            Adam::new(
                params,
                AdamConfig {
                    lr: num(cfg, "lr", 1e-3),
                    betas: (num(cfg, "beta1", 0.9), num(cfg, "beta2", 0.999)),
                    eps: num(cfg, "eps", 1e-8),
                    weight_decay: num(cfg, "weight_decay", 0.0),
                    amsgrad: flag(cfg, "amsgrad"),
                    maximize: flag(cfg, "maximize"),
                    decoupled_weight_decay: false,
                },
            )
            .unwrap(),
        ),
        "adamw" => Box::new(
            AdamW::new(
                params,
                AdamWConfig {
                    lr: num(cfg, "lr", 1e-3),
                    betas: (num(cfg, "beta1", 0.9), num(cfg, "beta2", 0.999)),
                    eps: num(cfg, "eps", 1e-8),
                    weight_decay: num(cfg, "weight_decay", 1e-2),
                    amsgrad: flag(cfg, "amsgrad"),
                    maximize: flag(cfg, "maximize"),
                },
            )
            .unwrap(),
        ),
        other => panic!("unknown optimizer kind {other}"),
    }
}

/// The oracle's five steps of `case` on `opt` over `params`: each step's gradients set,
/// a step taken and every parameter compared with PyTorch's (1e-6 relative); the worst
/// relative error.
fn five_steps(o: &Oracle, case: &str, params: &[Tensor<B>], opt: &mut dyn Optimizer<B>) -> f64 {
    let mut worst = 0.0f64;
    for k in 1..=5 {
        for (i, p) in params.iter().enumerate() {
            p.set_grad(Some(o.tensor(&format!("{case}/g{i}/s{k}"))))
                .unwrap();
        }
        opt.step().unwrap();
        for (i, p) in params.iter().enumerate() {
            let e = assert_close(
                &format!("{case} p{i} step {k}"),
                p,
                &o.tensor(&format!("{case}/p{i}/s{k}")),
                1e-6,
            );
            worst = worst.max(e);
        }
    }
    worst
}

#[test]
fn optimizers_match_torch() {
    let o = Oracle::open("optim.safetensors");
    let cases = o.cases();
    assert_eq!(cases.len(), 9);
    let mut worst = 0.0f64;
    for case in &cases {
        let cfg = o.config(case);
        let params: Vec<Tensor<B>> = (0..2)
            .map(|i| {
                o.tensor(&format!("{case}/p{i}/init"))
                    .requires_grad()
                    .unwrap()
            })
            .collect();
        let mut opt = make_optimizer(&cfg["kind"], &cfg, params.clone());
        worst = worst.max(five_steps(&o, case, &params, opt.as_mut()));
    }
    println!("optimizers: worst relative error {worst:e}");
}

/// Optimizers over two parameter groups (`optim_groups.safetensors`): parameter 0 in a
/// group with the optimizer's settings, parameter 1 in a group with its own (the metadata's
/// `group1.*`), five steps each checked against PyTorch.
#[test]
fn optimizer_groups_match_torch() {
    let o = Oracle::open("optim_groups.safetensors");
    let cases = o.cases();
    assert_eq!(cases.len(), 3);
    let mut worst = 0.0f64;
    for case in &cases {
        let cfg = o.config(case);
        let params: Vec<Tensor<B>> = (0..2)
            .map(|i| {
                o.tensor(&format!("{case}/p{i}/init"))
                    .requires_grad()
                    .unwrap()
            })
            .collect();
        let mut own = ParamGroup::new(vec![params[1].clone()]);
        if let Some(v) = cfg.get("group1.lr") {
            own = own.lr(v.parse().unwrap());
        }
        if let Some(v) = cfg.get("group1.weight_decay") {
            own = own.weight_decay(v.parse().unwrap());
        }
        if let Some(v) = cfg.get("group1.momentum") {
            own = own.momentum(v.parse().unwrap());
        }
        if let Some(v) = cfg.get("group1.betas") {
            let (b1, b2) = v
                .trim_matches(|c| c == '(' || c == ')')
                .split_once(',')
                .unwrap();
            own = own.betas((b1.trim().parse().unwrap(), b2.trim().parse().unwrap()));
        }
        let groups = vec![ParamGroup::new(vec![params[0].clone()]), own];
        let lr = num(&cfg, "lr", 1e-3);
        let mut opt: Box<dyn Optimizer<B>> = match cfg["kind"].as_str() {
            "sgd" => Box::new(
                Sgd::with_groups(
                    groups,
                    SgdConfig {
                        momentum: num(&cfg, "momentum", 0.0),
                        weight_decay: num(&cfg, "weight_decay", 0.0),
                        ..SgdConfig::new(lr)
                    },
                )
                .unwrap(),
            ),
            "adam" => Box::new(
                Adam::with_groups(
                    groups,
                    AdamConfig {
                        weight_decay: num(&cfg, "weight_decay", 0.0),
                        ..AdamConfig::new(lr)
                    },
                )
                .unwrap(),
            ),
            "adamw" => Box::new(
                AdamW::with_groups(
                    groups,
                    AdamWConfig {
                        weight_decay: num(&cfg, "weight_decay", 1e-2),
                        ..AdamWConfig::new(lr)
                    },
                )
                .unwrap(),
            ),
            other => panic!("unknown optimizer kind {other}"),
        };
        assert_eq!(opt.num_param_groups(), 2, "{case}");
        worst = worst.max(five_steps(&o, case, &params, opt.as_mut()));
    }
    println!("optimizer groups: worst relative error {worst:e}");
}

#[test]
fn clipping_matches_torch() {
    let o = Oracle::open("clip.safetensors");
    let b = ScalarRefBackend;
    for case in o.cases() {
        let cfg = o.config(&case);
        let limit = num(&cfg, "limit", 0.0);
        let params: Vec<Tensor<B>> = (0..2)
            .map(|i| {
                let before = o.tensor(&format!("{case}/g{i}/before"));
                let p = Tensor::zeros(&b, before.shape().clone())
                    .unwrap()
                    .requires_grad()
                    .unwrap();
                p.set_grad(Some(before)).unwrap();
                p
            })
            .collect();
        if cfg["kind"] == "norm" {
            let norm = clip_grad_norm(&params, limit).unwrap();
            let want = f64::from(o.f32(&format!("{case}/norm")).0[0]);
            assert!(
                (norm - want).abs() <= 1e-6 * want,
                "{case}: norm {norm} vs torch {want}"
            );
        } else {
            clip_grad_value(&params, limit).unwrap();
        }
        for (i, p) in params.iter().enumerate() {
            assert_close(
                &format!("{case} g{i}"),
                &p.grad().unwrap(),
                &o.tensor(&format!("{case}/g{i}/after")),
                1e-6,
            );
        }
    }
}

#[test]
fn linear_forward_backward_match_torch() {
    let o = Oracle::open("linear.safetensors");
    for case in o.cases() {
        let cfg = o.config(&case);
        let bias = (cfg["bias"] == "1").then(|| o.tensor(&format!("{case}/bias")));
        let layer =
            Linear::from_tensors(&o.tensor(&format!("{case}/weight")), bias.as_ref()).unwrap();
        let names: Vec<String> = layer
            .named_parameters()
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        assert_eq!(
            names,
            if bias.is_some() {
                vec!["weight", "bias"]
            } else {
                vec!["weight"]
            }
        );
        let x = o.tensor(&format!("{case}/x")).requires_grad().unwrap();
        let y = layer.forward(&x).unwrap();
        assert_close(
            &format!("{case} y"),
            &y,
            &o.tensor(&format!("{case}/y")),
            1e-6,
        );
        y.backward_with(BackwardOptions::default().gradient(&o.tensor(&format!("{case}/gy"))))
            .unwrap();
        assert_close(
            &format!("{case} dx"),
            &x.grad().unwrap(),
            &o.tensor(&format!("{case}/dx")),
            1e-6,
        );
        assert_close(
            &format!("{case} dweight"),
            &layer.weight().grad().unwrap(),
            &o.tensor(&format!("{case}/dweight")),
            1e-6,
        );
        if let Some(b) = layer.bias() {
            assert_close(
                &format!("{case} dbias"),
                &b.grad().unwrap(),
                &o.tensor(&format!("{case}/dbias")),
                1e-6,
            );
        }
    }
}

/// Linear–ReLU–Linear trained three full-batch Adam steps on 64 digits with cross
/// entropy: losses, first-step gradients and parameters after every step. The tolerance
/// is 1e-5 here because the loss goes through exp and log, whose exact-mode polynomials
/// differ from PyTorch's by a few ulp.
#[test]
fn mlp_training_matches_torch() {
    let o = Oracle::open("mlp.safetensors");
    let x = o.tensor("x");
    let labels = o.i64("labels");
    let layer = |i: usize| {
        Linear::from_tensors(
            &o.tensor(&format!("{i}.weight/init")),
            Some(&o.tensor(&format!("{i}.bias/init"))),
        )
        .unwrap()
    };
    let model = Sequential::new().push(layer(0)).push(Relu).push(layer(2));
    let names: Vec<String> = model
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
    let mut opt = Adam::new(model.parameters(), AdamConfig::new(1e-2)).unwrap();
    let losses = o.f32("losses").0;
    for k in 1..=3 {
        opt.clear_grad();
        let loss = model
            .forward(&x)
            .unwrap()
            .cross_entropy(&labels, CrossEntropyOptions::default())
            .unwrap();
        let l = loss.item().unwrap();
        let want = losses[k - 1];
        assert!(
            ((l - want) / want).abs() <= 1e-5,
            "step {k}: loss {l} vs torch {want}"
        );
        loss.backward().unwrap();
        if k == 1 {
            for (name, p) in model.named_parameters() {
                assert_close(
                    &format!("{name} grad1"),
                    &p.grad().unwrap(),
                    &o.tensor(&format!("{name}/grad1")),
                    1e-5,
                );
            }
        }
        opt.step().unwrap();
        for (name, p) in model.named_parameters() {
            assert_close(
                &format!("{name} step {k}"),
                &p,
                &o.tensor(&format!("{name}/s{k}")),
                1e-5,
            );
        }
    }
}
