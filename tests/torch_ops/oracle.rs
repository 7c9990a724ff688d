//! The oracle data: the cases of `testdata/ops/*.safetensors`, decoded once.

use safetensors::{Dtype, SafeTensors};
use std::collections::BTreeMap;
use std::sync::OnceLock;

use exactgrad::prelude::*;

const FILES: &[&str] = &[
    "elementwise.safetensors",
    "reduce.safetensors",
    "linalg.safetensors",
    "shape.safetensors",
    "softmax_loss.safetensors",
    "conv.safetensors",
    "norm_attention.safetensors",
];

/// Relative tolerance of every comparison.
pub(crate) const TOL: f64 = 1e-5;

#[derive(Clone, Debug)]
pub(crate) struct Array {
    pub(crate) shape: Vec<usize>,
    pub(crate) data: Vec<f32>,
}

#[derive(Debug)]
pub(crate) struct Case {
    pub(crate) file: &'static str,
    pub(crate) name: String,
    pub(crate) spec: BTreeMap<String, String>,
    pub(crate) inputs: Vec<Array>,
    pub(crate) target: Option<Vec<i64>>,
    pub(crate) y: Array,
    pub(crate) gy: Array,
    /// (input index, PyTorch's gradient)
    pub(crate) grads: Vec<(usize, Array)>,
}

impl Case {
    pub(crate) fn op(&self) -> &str {
        &self.spec["op"]
    }

    pub(crate) fn arg(&self, key: &str) -> Result<&str, String> {
        self.spec
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| format!("missing argument `{key}`"))
    }

    pub(crate) fn ints(&self, key: &str) -> Result<Vec<isize>, String> {
        parse_ints(self.arg(key)?)
    }

    pub(crate) fn int(&self, key: &str) -> Result<isize, String> {
        let v = self.ints(key)?;
        if v.len() != 1 {
            return Err(format!("argument `{key}` should be one integer, got {v:?}"));
        }
        Ok(v[0])
    }

    pub(crate) fn float(&self, key: &str) -> Result<Option<f32>, String> {
        let s = self.arg(key)?;
        if s == "none" {
            return Ok(None);
        }
        s.parse::<f32>()
            .map(Some)
            .map_err(|e| format!("argument `{key}` = `{s}`: {e}"))
    }

    pub(crate) fn reduction(&self) -> Result<Reduction, String> {
        match self.arg("reduction")? {
            "none" => Ok(Reduction::None),
            "mean" => Ok(Reduction::Mean),
            "sum" => Ok(Reduction::Sum),
            r => Err(format!("unknown reduction `{r}`")),
        }
    }

    /// Input shapes and views, for failure messages.
    pub(crate) fn describe_inputs(&self) -> String {
        let mut parts = Vec::new();
        for (i, x) in self.inputs.iter().enumerate() {
            let mut s = format!("x{i}: {:?}", x.shape);
            if let Some(v) = self.spec.get(&format!("view{i}")) {
                s.push_str(&format!(" viewed as {v}"));
            }
            if !self.grads.iter().any(|(j, _)| *j == i) {
                s.push_str(" (no grad)");
            }
            parts.push(s);
        }
        if let Some(t) = &self.target {
            parts.push(format!("targets {t:?}"));
        }
        let args: Vec<String> = self
            .spec
            .iter()
            .filter(|(k, _)| {
                !matches!(k.as_str(), "op" | "in" | "grads" | "tol") && !k.starts_with("view")
            })
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if !args.is_empty() {
            parts.push(format!("args {}", args.join(" ")));
        }
        parts.join("; ")
    }
}

pub(crate) fn parse_ints(s: &str) -> Result<Vec<isize>, String> {
    if s.is_empty() {
        return Ok(Vec::new());
    }
    s.split(',')
        .map(|v| {
            v.trim()
                .parse::<isize>()
                .map_err(|e| format!("`{v}` in `{s}`: {e}"))
        })
        .collect()
}

fn read_array(st: &SafeTensors<'_>, name: &str) -> Array {
    let view = st
        .tensor(name)
        .unwrap_or_else(|e| panic!("oracle tensor `{name}`: {e}"));
    assert_eq!(
        view.dtype(),
        Dtype::F32,
        "oracle tensor `{name}` is not f32"
    );
    let data = view
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    Array {
        shape: view.shape().to_vec(),
        data,
    }
}

fn read_targets(st: &SafeTensors<'_>, name: &str) -> Vec<i64> {
    let view = st
        .tensor(name)
        .unwrap_or_else(|e| panic!("oracle tensor `{name}`: {e}"));
    assert_eq!(
        view.dtype(),
        Dtype::I64,
        "oracle tensor `{name}` is not i64"
    );
    view.data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().expect("8 bytes")))
        .collect()
}

fn load_file(file: &'static str) -> Vec<Case> {
    let path = format!("{}/testdata/ops/{file}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("reading {path}: {e} (generate it with tools/op_oracle.py)"));
    let (_, header) = SafeTensors::read_metadata(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
    let meta = header.metadata().clone().unwrap_or_default();
    let st = SafeTensors::deserialize(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut specs: Vec<(&String, &String)> = meta
        .iter()
        .filter(|(k, _)| k.starts_with("case:"))
        .collect();
    specs.sort();
    specs
        .into_iter()
        .map(|(key, value)| {
            let name = key["case:".len()..].to_string();
            let spec: BTreeMap<String, String> = value
                .split(';')
                .map(|kv| {
                    let (k, v) = kv
                        .split_once('=')
                        .unwrap_or_else(|| panic!("{path}: case {name}: bad entry `{kv}`"));
                    (k.to_string(), v.to_string())
                })
                .collect();
            let n: usize = spec["in"].parse().expect("in=<count>");
            let inputs = (0..n)
                .map(|i| read_array(&st, &format!("{name}/x{i}")))
                .collect();
            let grads = parse_ints(&spec["grads"])
                .expect("grads=<list>")
                .into_iter()
                .map(|i| (i as usize, read_array(&st, &format!("{name}/g{i}"))))
                .collect();
            let target = (spec["op"] == "cross_entropy")
                .then(|| read_targets(&st, &format!("{name}/target")));
            Case {
                file,
                y: read_array(&st, &format!("{name}/y")),
                gy: read_array(&st, &format!("{name}/gy")),
                name,
                spec,
                inputs,
                target,
                grads,
            }
        })
        .collect()
}

pub(crate) fn cases() -> &'static [Case] {
    static CASES: OnceLock<Vec<Case>> = OnceLock::new();
    CASES.get_or_init(|| FILES.iter().flat_map(|f| load_file(f)).collect())
}
