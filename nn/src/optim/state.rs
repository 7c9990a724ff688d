//! Saving and restoring optimizer state ([`Optimizer::state_dict`],
//! [`Optimizer::load_state_dict`]); the format is in `docs/checkpoints.md`.

use super::adam::{validate as validate_adam, State};
use super::sgd::validate as validate_sgd;
use super::{Adam, AdamConfig, GroupConfig, Sgd, SgdConfig};
use crate::checkpoint::TensorFile;
use crate::error::{Error, Result};
use exactgrad_autograd::Tensor;
use exactgrad_core::Backend;
use std::collections::BTreeSet;
use std::fmt::Debug;
use std::str::FromStr;

/// The metadata common to every optimizer: its type, parameter count and its groups'
/// sizes (`param_groups`, `param_groups.{g}.params`).
fn header<C>(kind: &str, params: usize, groups: &[GroupConfig<C>]) -> TensorFile {
    let mut f = TensorFile::new();
    f.set_metadata("optimizer", kind);
    f.set_metadata("params", params.to_string());
    f.set_metadata("param_groups", groups.len().to_string());
    for (g, group) in groups.iter().enumerate() {
        f.set_metadata(
            &format!("param_groups.{g}.params"),
            group.params.len().to_string(),
        );
    }
    f
}

/// The metadata key of hyper-parameter `name` of group `g`.
fn group_key(g: usize, name: &str) -> String {
    format!("param_groups.{g}.{name}")
}

/// A hyper-parameter as metadata: `{:?}`, for an f64 the shortest decimal that parses
/// back to the same bits, for a bool `true` or `false`.
fn put(f: &mut TensorFile, key: &str, value: impl Debug) {
    f.set_metadata(key, format!("{value:?}"));
}

/// Reads an optimizer state and keeps account of what it read: every tensor and metadata
/// entry must be read exactly once (a parameter's buffer, a hyper-parameter), and what is
/// missing or left over is named in one error ([`Reader::finish`]).
struct Reader<'a> {
    op: &'static str,
    state: &'a TensorFile,
    used: BTreeSet<String>,
    missing: Vec<String>,
}

impl<'a> Reader<'a> {
    fn new(op: &'static str, state: &'a TensorFile) -> Self {
        Self {
            op,
            state,
            used: BTreeSet::new(),
            missing: Vec::new(),
        }
    }

    fn bad(&self, message: String) -> Error {
        Error::invalid(self.op, "state", message)
    }

    /// The metadata entry `key` parsed; a missing one is recorded (and the default
    /// returned, which the caller never uses: [`Reader::check`] fails first).
    fn meta<T: FromStr + Default>(&mut self, key: &str, what: &str) -> Result<T> {
        match self.state.metadata(key) {
            Some(v) => {
                self.used.insert(key.to_string());
                v.parse()
                    .map_err(|_| self.bad(format!("metadata entry `{key}` = `{v}` is not {what}")))
            }
            None => {
                self.missing.push(key.to_string());
                Ok(T::default())
            }
        }
    }

    /// The type, parameter count and group sizes; fails at once on another type, count
    /// or grouping.
    fn header<C>(&mut self, kind: &str, params: usize, groups: &[GroupConfig<C>]) -> Result<()> {
        match self.state.metadata("optimizer") {
            Some(k) if k == kind => {}
            Some(k) => return Err(self.bad(format!("is the state of a {k} optimizer, not {kind}"))),
            None => return Err(self.bad("has no `optimizer` metadata entry".into())),
        }
        self.used.insert("optimizer".into());
        if self.state.metadata("param_groups").is_none() {
            return Err(self.bad(
                "has no `param_groups` entry: it was saved before optimizers had parameter groups, a layout this version does not read".into(),
            ));
        }
        let n: usize = self.meta("params", "a parameter count")?;
        let count: usize = self.meta("param_groups", "a group count")?;
        self.check_missing()?;
        if n != params {
            return Err(self.bad(format!("holds {n} parameters, the optimizer has {params}")));
        }
        if count != groups.len() {
            return Err(self.bad(format!(
                "holds {count} parameter groups, the optimizer has {}",
                groups.len()
            )));
        }
        for (g, group) in groups.iter().enumerate() {
            let size: usize = self.meta(&group_key(g, "params"), "a parameter count")?;
            self.check_missing()?;
            if size != group.params.len() {
                return Err(self.bad(format!(
                    "holds {size} parameters in group {g}, the optimizer has {}",
                    group.params.len()
                )));
            }
        }
        Ok(())
    }

    /// Whether the tensor `name` is there; if so it counts as read.
    fn take(&mut self, name: &str) -> bool {
        let there = self.state.contains(name);
        if there {
            self.used.insert(name.to_string());
        }
        there
    }

    /// Fails, naming them, when entries were missing (the hyper-parameters, read before
    /// the buffers that depend on them).
    fn check_missing(&self) -> Result<()> {
        if self.missing.is_empty() {
            Ok(())
        } else {
            Err(self.bad(format!("is incomplete: missing {:?}", self.missing)))
        }
    }

    /// Fails, naming them, when entries were missing or entries no part of the state
    /// reads are left over.
    fn check(&self) -> Result<()> {
        let left: Vec<String> = self
            .state
            .names()
            .into_iter()
            .map(str::to_string)
            .chain(self.state.metadata_entries().map(|(k, _)| k.to_string()))
            .filter(|k| !self.used.contains(k))
            .collect();
        match (self.missing.is_empty(), left.is_empty()) {
            (true, true) => Ok(()),
            (false, true) => Err(self.bad(format!("is incomplete: missing {:?}", self.missing))),
            (true, false) => Err(self.bad(format!(
                "holds entries that are no part of the state of this optimizer's parameters: {left:?}"
            ))),
            (false, false) => Err(self.bad(format!(
                "is incomplete: missing {:?}; and holds entries that are no part of the state of this optimizer's parameters: {left:?}",
                self.missing
            ))),
        }
    }

    /// [`Reader::check`] after every entry was read.
    fn finish(self) -> Result<()> {
        self.check()
    }
}

/// Which values an optimizer buffer can hold: finite ones (momentum, first moments), or
/// finite and not negative (averages of squares).
#[derive(Clone, Copy, PartialEq)]
enum Values {
    Finite,
    NonNegative,
}

/// The tensor `name` of `state`, which must have the shape of parameter `p` and hold
/// values an optimizer can produce (`values`), on `p`'s backend.
fn buffer<B: Backend>(
    op: &'static str,
    state: &TensorFile,
    name: &str,
    p: &Tensor<B>,
    values_allowed: Values,
) -> Result<Tensor<B>> {
    let (shape, values) = state.floats(name).map_err(|_| {
        Error::invalid(
            op,
            "state",
            match state.dtype(name) {
                Some(d) => {
                    format!("entry `{name}` has element type {d}, not a floating-point type")
                }
                None => format!("entry `{name}` is missing"),
            },
        )
    })?;
    if shape != p.dims() {
        return Err(Error::invalid(
            op,
            "state",
            format!(
                "entry `{name}` has shape {shape:?}, the parameter has shape {:?}",
                p.dims()
            ),
        ));
    }
    let bad = values
        .iter()
        .position(|v| !v.is_finite() || (values_allowed == Values::NonNegative && *v < 0.0));
    if let Some(i) = bad {
        return Err(Error::invalid(
            op,
            "state",
            format!(
                "entry `{name}` holds {} at element {i}, which the optimizer cannot produce ({})",
                values[i],
                match values_allowed {
                    Values::Finite => "values are finite",
                    Values::NonNegative => "an average of squares is finite and not negative",
                }
            ),
        ));
    }
    Tensor::from_slice(p.backend(), values, shape)
}

impl<B: Backend> Sgd<B> {
    pub(super) fn save_state(&self) -> Result<TensorFile> {
        let mut f = header("Sgd", self.params.len(), &self.groups);
        for (g, group) in self.groups.iter().enumerate() {
            let c = &group.config;
            put(&mut f, &group_key(g, "lr"), c.lr);
            put(&mut f, &group_key(g, "momentum"), c.momentum);
            put(&mut f, &group_key(g, "dampening"), c.dampening);
            put(&mut f, &group_key(g, "weight_decay"), c.weight_decay);
            put(&mut f, &group_key(g, "nesterov"), c.nesterov);
            put(&mut f, &group_key(g, "maximize"), c.maximize);
        }
        for (i, b) in self.momentum_buffers.iter().enumerate() {
            if let Some(b) = b {
                f.insert_tensor(&format!("state.{i}.momentum_buffer"), b)?;
            }
        }
        Ok(f)
    }

    pub(super) fn restore_state(&mut self, state: &TensorFile) -> Result<()> {
        let op = "Sgd::load_state_dict";
        let mut r = Reader::new(op, state);
        r.header("Sgd", self.params.len(), &self.groups)?;
        let mut configs = Vec::with_capacity(self.groups.len());
        for g in 0..self.groups.len() {
            let config = SgdConfig {
                lr: r.meta(&group_key(g, "lr"), "a learning rate")?,
                momentum: r.meta(&group_key(g, "momentum"), "a momentum")?,
                dampening: r.meta(&group_key(g, "dampening"), "a dampening")?,
                weight_decay: r.meta(&group_key(g, "weight_decay"), "a weight decay")?,
                nesterov: r.meta(&group_key(g, "nesterov"), "true or false")?,
                maximize: r.meta(&group_key(g, "maximize"), "true or false")?,
            };
            r.check_missing()?;
            validate_sgd(op, &config)?;
            configs.push(config);
        }
        let mut buffers = Vec::with_capacity(self.params.len());
        for (group, config) in self.groups.iter().zip(&configs) {
            for i in group.params.clone() {
                // Only a step with momentum makes a buffer; one in a state without
                // momentum is left over.
                let name = format!("state.{i}.momentum_buffer");
                buffers.push(if config.momentum != 0.0 && r.take(&name) {
                    Some(buffer(op, state, &name, &self.params[i], Values::Finite)?)
                } else {
                    None
                });
            }
        }
        r.finish()?;
        self.momentum_buffers = buffers;
        for (group, config) in self.groups.iter_mut().zip(configs) {
            group.config = config;
        }
        Ok(())
    }
}

impl<B: Backend> Adam<B> {
    pub(super) fn save_state_as(&self, kind: &str) -> Result<TensorFile> {
        let mut f = header(kind, self.params.len(), &self.groups);
        for (g, group) in self.groups.iter().enumerate() {
            let c = &group.config;
            put(&mut f, &group_key(g, "lr"), c.lr);
            put(&mut f, &group_key(g, "beta1"), c.betas.0);
            put(&mut f, &group_key(g, "beta2"), c.betas.1);
            put(&mut f, &group_key(g, "eps"), c.eps);
            put(&mut f, &group_key(g, "weight_decay"), c.weight_decay);
            put(&mut f, &group_key(g, "amsgrad"), c.amsgrad);
            put(&mut f, &group_key(g, "maximize"), c.maximize);
            put(
                &mut f,
                &group_key(g, "decoupled_weight_decay"),
                c.decoupled_weight_decay,
            );
        }
        for (i, st) in self.state.iter().enumerate() {
            let Some(st) = st else { continue };
            let step = i64::try_from(st.step).unwrap_or(i64::MAX);
            f.insert_ints(&format!("state.{i}.step"), &[], vec![step])?;
            f.insert_tensor(&format!("state.{i}.exp_avg"), &st.exp_avg)?;
            f.insert_tensor(&format!("state.{i}.exp_avg_sq"), &st.exp_avg_sq)?;
            if let Some(m) = &st.max_exp_avg_sq {
                f.insert_tensor(&format!("state.{i}.max_exp_avg_sq"), m)?;
            }
        }
        Ok(f)
    }

    pub(super) fn restore_state_as(
        &mut self,
        op: &'static str,
        kind: &str,
        state: &TensorFile,
    ) -> Result<()> {
        let mut r = Reader::new(op, state);
        r.header(kind, self.params.len(), &self.groups)?;
        let mut configs = Vec::with_capacity(self.groups.len());
        for g in 0..self.groups.len() {
            let config = AdamConfig {
                lr: r.meta(&group_key(g, "lr"), "a learning rate")?,
                betas: (
                    r.meta(&group_key(g, "beta1"), "a decay rate")?,
                    r.meta(&group_key(g, "beta2"), "a decay rate")?,
                ),
                eps: r.meta(&group_key(g, "eps"), "an epsilon")?,
                weight_decay: r.meta(&group_key(g, "weight_decay"), "a weight decay")?,
                amsgrad: r.meta(&group_key(g, "amsgrad"), "true or false")?,
                maximize: r.meta(&group_key(g, "maximize"), "true or false")?,
                decoupled_weight_decay: r
                    .meta(&group_key(g, "decoupled_weight_decay"), "true or false")?,
            };
            r.check_missing()?;
            validate_adam(op, &config)?;
            if config.decoupled_weight_decay != (kind == "AdamW") {
                return Err(r.bad(format!(
                    "is a {kind} state with `decoupled_weight_decay` = {} in group {g}",
                    config.decoupled_weight_decay
                )));
            }
            configs.push(config);
        }
        let amsgrad_of: Vec<bool> = self
            .groups
            .iter()
            .zip(&configs)
            .flat_map(|(group, c)| group.params.clone().map(move |_| c.amsgrad))
            .collect();
        let mut slots = Vec::with_capacity(self.params.len());
        for (i, p) in self.params.iter().enumerate() {
            let amsgrad = amsgrad_of[i];
            let name = |what: &str| format!("state.{i}.{what}");
            let mut parts = vec!["step", "exp_avg", "exp_avg_sq"];
            if amsgrad {
                parts.push("max_exp_avg_sq");
            }
            // A parameter that has not stepped has no state; one that has, all of it.
            let present: Vec<bool> = parts.iter().map(|w| r.take(&name(w))).collect();
            if !present.contains(&true) {
                slots.push(None);
                continue;
            }
            for (w, there) in parts.iter().zip(&present) {
                if !there {
                    r.missing.push(name(w));
                }
            }
            if present.contains(&false) {
                slots.push(None);
                continue;
            }
            let step_name = name("step");
            let step = match state.ints(&step_name) {
                Ok((s, v)) if s.is_empty() && v.len() == 1 && v[0] > 0 => v[0] as u64,
                _ => {
                    return Err(r.bad(format!(
                        "entry `{step_name}` must be a positive integer of shape []"
                    )))
                }
            };
            let sq_name = name("exp_avg_sq");
            let exp_avg_sq = buffer(op, state, &sq_name, p, Values::NonNegative)?;
            let max_exp_avg_sq = if amsgrad {
                let max_name = name("max_exp_avg_sq");
                let max = buffer(op, state, &max_name, p, Values::NonNegative)?;
                // AMSGrad keeps the running maximum of the second moment.
                let (_, v) = state.floats(&sq_name)?;
                let (_, m) = state.floats(&max_name)?;
                if let Some(j) = v.iter().zip(m).position(|(v, m)| m < v) {
                    return Err(r.bad(format!(
                        "entry `{max_name}` element {j} ({}) is below `{sq_name}` ({}): not a running maximum",
                        m[j], v[j]
                    )));
                }
                Some(max)
            } else {
                None
            };
            slots.push(Some(State {
                step,
                exp_avg: buffer(op, state, &name("exp_avg"), p, Values::Finite)?,
                exp_avg_sq,
                max_exp_avg_sq,
            }));
        }
        r.finish()?;
        self.state = slots;
        for (group, config) in self.groups.iter_mut().zip(configs) {
            group.config = config;
        }
        Ok(())
    }
}
