//! Saving and restoring optimizer state ([`Optimizer::state_dict`],
//! [`Optimizer::load_state_dict`]); the format is in `docs/checkpoints.md`.

use super::adam::State;
use super::{check_non_negative, Adam, Sgd};
use crate::checkpoint::TensorFile;
use crate::error::{Error, Result};
use exactgrad_autograd::Tensor;
use exactgrad_core::Backend;

/// The metadata common to every optimizer: its type, parameter count and learning rate.
fn header(kind: &str, params: usize, lr: f64) -> TensorFile {
    let mut f = TensorFile::new();
    f.set_metadata("optimizer", kind);
    f.set_metadata("params", params.to_string());
    // `{:?}` of an f64 is the shortest decimal that parses back to the same bits.
    f.set_metadata("lr", format!("{lr:?}"));
    f
}

/// Checks the header and returns the learning rate.
fn check_header(op: &'static str, kind: &str, params: usize, state: &TensorFile) -> Result<f64> {
    let bad = |message: String| Error::invalid(op, "state", message);
    match state.metadata("optimizer") {
        Some(k) if k == kind => {}
        Some(k) => return Err(bad(format!("is the state of a {k} optimizer, not {kind}"))),
        None => return Err(bad("has no `optimizer` metadata entry".into())),
    }
    let n: usize = state
        .metadata_parsed("params", "a parameter count")
        .map_err(|e| bad(e.to_string()))?;
    if n != params {
        return Err(bad(format!(
            "holds {n} parameters, the optimizer has {params}"
        )));
    }
    let lr: f64 = state
        .metadata_parsed("lr", "a learning rate")
        .map_err(|e| bad(e.to_string()))?;
    check_non_negative(op, "state.lr", lr)?;
    Ok(lr)
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
        let mut f = header("Sgd", self.params.len(), self.config.lr);
        for (i, b) in self.momentum_buffers.iter().enumerate() {
            if let Some(b) = b {
                f.insert_tensor(&format!("state.{i}.momentum_buffer"), b)?;
            }
        }
        Ok(f)
    }

    pub(super) fn restore_state(&mut self, state: &TensorFile) -> Result<()> {
        let op = "Sgd::load_state_dict";
        let lr = check_header(op, "Sgd", self.params.len(), state)?;
        let mut buffers = Vec::with_capacity(self.params.len());
        for (i, p) in self.params.iter().enumerate() {
            let name = format!("state.{i}.momentum_buffer");
            buffers.push(if state.contains(&name) {
                Some(buffer(op, state, &name, p, Values::Finite)?)
            } else {
                None
            });
        }
        self.momentum_buffers = buffers;
        self.config.lr = lr;
        Ok(())
    }
}

impl<B: Backend> Adam<B> {
    pub(super) fn save_state_as(&self, kind: &str) -> Result<TensorFile> {
        let mut f = header(kind, self.params.len(), self.config.lr);
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
        let lr = check_header(op, kind, self.params.len(), state)?;
        let mut slots = Vec::with_capacity(self.params.len());
        for (i, p) in self.params.iter().enumerate() {
            let step_name = format!("state.{i}.step");
            if !state.contains(&step_name) {
                slots.push(None);
                continue;
            }
            let step = match state.ints(&step_name) {
                Ok((s, v)) if s.is_empty() && v.len() == 1 && v[0] > 0 => v[0] as u64,
                _ => {
                    return Err(Error::invalid(
                        op,
                        "state",
                        format!("entry `{step_name}` must be a positive integer of shape []"),
                    ))
                }
            };
            let max_name = format!("state.{i}.max_exp_avg_sq");
            let max_exp_avg_sq = match (self.config.amsgrad, state.contains(&max_name)) {
                (true, _) => Some(buffer(op, state, &max_name, p, Values::NonNegative)?),
                (false, false) => None,
                (false, true) => {
                    return Err(Error::invalid(
                        op,
                        "state",
                        format!("entry `{max_name}` is an AMSGrad state; this optimizer does not use AMSGrad"),
                    ))
                }
            };
            let sq_name = format!("state.{i}.exp_avg_sq");
            let exp_avg_sq = buffer(op, state, &sq_name, p, Values::NonNegative)?;
            if max_exp_avg_sq.is_some() {
                // AMSGrad keeps the running maximum of the second moment.
                let (_, v) = state.floats(&sq_name)?;
                let (_, m) = state.floats(&max_name)?;
                if let Some(j) = v.iter().zip(m).position(|(v, m)| m < v) {
                    return Err(Error::invalid(
                        op,
                        "state",
                        format!(
                            "entry `{max_name}` element {j} ({}) is below `{sq_name}` ({}): not a running maximum",
                            m[j], v[j]
                        ),
                    ));
                }
            }
            slots.push(Some(State {
                step,
                exp_avg: buffer(op, state, &format!("state.{i}.exp_avg"), p, Values::Finite)?,
                exp_avg_sq,
                max_exp_avg_sq,
            }));
        }
        self.state = slots;
        self.config.lr = lr;
        Ok(())
    }
}
