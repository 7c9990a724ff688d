//! Traces of training runs with a model (`docs/debugging.md`): the model's parameter,
//! buffer and random-stream paths in the header and in every record that touches them,
//! the positions of its streams at every step's end, and the module a record belongs to.
//!
//! The recording itself is [`exactgrad_autograd::trace`]; this module adds what the
//! module tree knows. [`TraceModel::model`] tells a [`TraceConfig`] about a model; the
//! layers of this crate put their records in the scope of their module path
//! ([`module_scope`]), and a module of a user's can do the same in its `forward`.
//!
//! ```
//! use exactgrad_autograd::trace::{TraceConfig, TraceLevel, TraceSteps};
//! use exactgrad_autograd::Tensor;
//! use exactgrad_core::Philox;
//! use exactgrad_nn::trace::TraceModel;
//! use exactgrad_nn::{Linear, Module, ModuleExt, Relu, Sequential};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let b = exactgrad_backends::ScalarRefBackend;
//! let mut rng = Philox::new(0);
//! let model = Sequential::new()
//!     .push(Linear::new(&b, 3, 4, &mut rng)?)
//!     .push(Relu)
//!     .push(Linear::new(&b, 4, 2, &mut rng)?);
//! let path = std::env::temp_dir().join(format!("nn-doc-{}.trace", std::process::id()));
//! let trace = TraceConfig::new(&path).level(TraceLevel::Ops).model(&model).start()?;
//! model.forward(&Tensor::ones(&b, [5, 3])?)?;
//! trace.finish()?;
//! let step = TraceSteps::open(&[&path])?.next_step()?.unwrap();
//! let first = &step.records[0]; // the first layer's product
//! assert_eq!(first.module.as_deref(), Some("0"));
//! assert_eq!(first.params(), ["0.weight"]);
//! # std::fs::remove_file(&path)?;
//! # Ok(())
//! # }
//! ```

use crate::module::{Entry, Module, ModuleExt};
use crate::random::RandomStream;
use exactgrad_autograd::trace::{self, ModuleScope, TraceConfig, Value};
use exactgrad_core::Backend;
use std::any::Any;
use std::sync::Arc;

/// Tells a [`TraceConfig`] about a model.
pub trait TraceModel: Sized {
    /// Names every parameter, buffer and random stream of `model` by its path (the
    /// header lists them with their shapes and initial digests, and every record that
    /// reads or writes one, or a view of one, names it), and records the positions of
    /// its random streams at every step's end.
    #[must_use]
    fn model<B: Backend, M: Module<B> + ?Sized>(self, model: &M) -> Self;
}

impl TraceModel for TraceConfig {
    fn model<B: Backend, M: Module<B> + ?Sized>(self, model: &M) -> Self {
        let mut config = self;
        let mut streams: Vec<(String, Arc<dyn Any + Send + Sync>)> = Vec::new();
        let mut tensors = Vec::new();
        model.visit_entries(&mut |name, e| match e {
            Entry::Parameter(t) => tensors.push((name.to_string(), "parameter", t.clone())),
            Entry::Buffer(t) => tensors.push((name.to_string(), "buffer", t.clone())),
            Entry::Stream(s) => streams.push((name.to_string(), s.trace_handle())),
            _ => {}
        });
        for (name, role, t) in &tensors {
            config = config.name_tensor(name, role, t);
        }
        for (name, handle) in &streams {
            config = config.name_object(name, "stream", Arc::clone(handle));
        }
        if !streams.is_empty() {
            config = config.on_step_end(move || {
                streams
                    .iter()
                    .map(|(name, h)| {
                        let v = match RandomStream::state_of(h) {
                            Some((key, position)) => {
                                Value::Str(format!("{key:#018x} at {position}"))
                            }
                            None => Value::Str("unseeded".into()),
                        };
                        (format!("stream {name}"), v)
                    })
                    .collect()
            });
        }
        config
    }
}

/// While the returned guard lives, the records of this thread's trace belong to
/// `module`'s path in the model the trace was told about ([`TraceModel::model`]): the
/// path of the first parameter, buffer or stream of the module's tree, less that entry's
/// own name. Nothing (and no cost beyond one check) when no trace records, or when the
/// module holds nothing the trace knows.
pub fn module_scope<B: Backend>(module: &dyn Module<B>) -> ModuleScope {
    if trace::is_recording() {
        if let Some(path) = path_of(module) {
            return trace::module_scope(path);
        }
    }
    ModuleScope::none()
}

/// The path of `module` in the traced model, from the first entry of its tree that the
/// trace knows.
fn path_of<B: Backend>(module: &dyn Module<B>) -> Option<String> {
    let mut found: Option<String> = None;
    module.visit_entries(&mut |name, e| {
        if found.is_some() {
            return;
        }
        let absolute = match e {
            Entry::Parameter(t) | Entry::Buffer(t) => trace::name_of(t),
            Entry::Stream(s) => trace::name_of_object(&s.trace_handle()),
            _ => None,
        };
        if let Some(abs) = absolute {
            found = Some(strip_suffix(&abs, name));
        }
    });
    found
}

/// `abs` without the trailing `rel` (and the dot before it): `layer1.0.conv1.weight` less
/// `conv1.weight` is `layer1.0`.
fn strip_suffix(abs: &str, rel: &str) -> String {
    match abs.strip_suffix(rel) {
        Some(head) => head.strip_suffix('.').unwrap_or(head).to_string(),
        None => abs.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::strip_suffix;

    #[test]
    fn module_paths_are_entry_paths_less_the_entry() {
        assert_eq!(
            strip_suffix("layer1.0.conv1.weight", "conv1.weight"),
            "layer1.0"
        );
        assert_eq!(
            strip_suffix("layer1.0.conv1.weight", "weight"),
            "layer1.0.conv1"
        );
        assert_eq!(strip_suffix("weight", "weight"), "");
        assert_eq!(strip_suffix("0.rng", "rng"), "0");
    }
}
