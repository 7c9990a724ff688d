//! The [`Module`] trait: a differentiable function whose parameters, buffers, random
//! streams, training flag and children are named once, in one visitor.
//!
//! # Deriving it
//!
//! `#[derive(Module)]` (exported with the trait, as serde exports its derives) writes the
//! whole `impl Module<B>` from the struct: [`visit`](Module::visit) names the fields in
//! declaration order and [`forward`](Module::forward) calls the type's inherent
//! `fn forward(&self, &Tensor<B>) -> Result<Tensor<B>, E>` (any `E` that converts into
//! [`Error`](crate::Error): this crate's or the autograd error).
//!
//! ```
//! use exactgrad_autograd::Tensor;
//! use exactgrad_core::{Backend, Philox};
//! use exactgrad_nn::{Dropout, Linear, Module, ModuleExt};
//!
//! /// A linear layer followed by dropout, with a learned output scale.
//! #[derive(Module)]
//! struct Head<B: Backend> {
//!     linear: Linear<B>,  // a child module: linear.weight, linear.bias
//!     dropout: Dropout,   // a child with a random stream: dropout.rng
//!     #[module(param)]
//!     scale: Tensor<B>,   // a parameter: scale
//!     #[module(skip)]
//!     name: String,       // plain data
//! }
//!
//! impl<B: Backend> Head<B> {
//!     fn forward(&self, x: &Tensor<B>) -> exactgrad_nn::Result<Tensor<B>> {
//!         let y = self.dropout.forward(&self.linear.forward(x)?)?;
//!         Ok(y.mul(&self.scale)?)
//!     }
//! }
//!
//! # fn main() -> exactgrad_nn::Result<()> {
//! let b = exactgrad_backends::ScalarRefBackend;
//! let mut rng = Philox::new(0);
//! let head = Head {
//!     linear: Linear::new(&b, 4, 2, &mut rng)?,
//!     dropout: Dropout::new(0.5)?,
//!     scale: Tensor::ones(&b, [2])?.requires_grad()?,
//!     name: "head".into(),
//! };
//! let names: Vec<String> = head.named_parameters().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names, ["scale", "linear.weight", "linear.bias"]);
//! head.seed_streams(42)?; // every random stream of the tree, keyed by its path
//! let y = head.forward(&Tensor::ones(&b, [3, 4])?)?;
//! head.eval(); // the dropout child follows
//! assert!(!head.is_training());
//! assert!(head.describe().starts_with("Head(\n  (linear): Linear(in_features=4"));
//! # let _ = (y, &head.name);
//! # Ok(())
//! # }
//! ```
//!
//! What each field becomes:
//!
//! | field | entry |
//! |---|---|
//! | any type without a mark | a child module ([`Visitor::child`]); it must implement `Module<B>` |
//! | `#[module(param)]` on `Tensor<B>`, `Option<Tensor<B>>` or `Vec<Tensor<B>>` | parameter(s) ([`Visitor::parameter`]) |
//! | `#[module(buffer)]` on the same types | float buffer(s) ([`Visitor::buffer`]) |
//! | [`IntBuffer`] | an integer buffer ([`Visitor::int_buffer`]) |
//! | [`RandomStream`] | a random stream ([`Visitor::stream`]) |
//! | [`TrainingFlag`] | the training flag ([`Visitor::training`]) |
//! | `bool`, `char`, numbers, `PhantomData`, and arrays, tuples, `Option`s and `Vec`s of them | nothing |
//! | `#[module(skip)]` | nothing (configs, names, any other data) |
//!
//! - The key is the field's name; `#[module(rename = "key")]` sets another (`"0"` for a
//!   PyTorch key that is not a Rust identifier, `"dropout_rng"`, …); tuple structs' keys
//!   are `0`, `1`, …. An empty key puts a child's entries at the parent's own path (a
//!   wrapper that keeps the wrapped module's keys; [`Sequential`](crate::Sequential)'s
//!   list of children is one).
//! - `Option<X>` names `X` when it is `Some`; `Vec<X>` and `[X; N]` name `key.0`,
//!   `key.1`, … (PyTorch's `ModuleList` and `ParameterList` keys), for children and
//!   tensors alike. `Box<dyn Module<B>>` is a child.
//! - A `Tensor` field without a mark does not compile (the error says to mark it); a
//!   field that is not a module says it is not a `Module<B>`, with a note on what to mark.
//!   [`RandomStream`], [`TrainingFlag`] and [`IntBuffer`] are recognised by the last
//!   segment of their type's path; `#[module(stream)]`, `#[module(training)]` and
//!   `#[module(int_buffer)]` mark them under another name (a type alias), and
//!   `#[module(child)]` says the default aloud.
//! - The backend is the struct's type parameter bounded by `Backend` (`struct
//!   T<B: Backend>` or `where B: Backend`); other type parameters, const parameters,
//!   lifetimes and where-clauses are kept, and a child whose type involves another type
//!   parameter gets the bound `Child: Module<B>`. A struct over one concrete backend
//!   names it, `#[module(backend = "ExactBackend")]`; a struct without any backend (a
//!   stateless module whose `forward` is generic) is a module over every backend.
//! - `#[module(forward = "method")]` on the struct calls another inherent method.
//! - [`describe`](Module::describe) prints PyTorch's `repr`: `Name(\n  (key): child\n  …\n)`.
//! - The generated code names the crate as `::exactgrad::nn` (the facade a user depends
//!   on), or `::exactgrad_nn` inside the package `exactgrad-nn`; a crate that depends on
//!   `exactgrad-nn` alone writes `#[module(crate = "exactgrad_nn")]`.
//!
//! The derived `forward` calls `self.forward(input)` with a fallback trait in scope: an
//! inherent `forward` always wins; without one, the trait's `forward` (the derived method
//! itself) and the fallback are equally good candidates, which is a compile error (E0034,
//! "multiple applicable items", naming `DeriveModuleNeedsAnInherentForward`), so the
//! derived method can never call itself. `docs/api.md` ("`#[derive(Module)]`") has the
//! reasons for the design and the code generated for an example.
//!
//! # Writing it by hand
//!
//! A module implements two methods, both required:
//!
//! - [`forward`](Module::forward), the function;
//! - [`visit`](Module::visit), which names everything the module holds once, in
//!   `state_dict` order: its parameters ([`Visitor::parameter`]), buffers
//!   ([`Visitor::buffer`], [`Visitor::int_buffer`]), random streams
//!   ([`Visitor::stream`]), training flag ([`Visitor::training`]) and child modules
//!   ([`Visitor::child`]).
//!
//! Everything else — [`parameters`](ModuleExt::parameters),
//! [`state_dict`](ModuleExt::state_dict), [`load_state_dict`](ModuleExt::load_state_dict),
//! [`set_training`](ModuleExt::set_training), [`seed_streams`](ModuleExt::seed_streams), … —
//! lives in [`ModuleExt`], which is implemented for every module and cannot be
//! overridden, so none of it can disagree with the visitor. A composite module names each
//! child once; its parameters, buffers, streams, training mode and state dict follow.
//!
//! Whatever order a module's `visit` names things in, the walks give PyTorch's order: a
//! module's own entries first (in the order named), then each child's, depth first.
//! Layers whose keys do not follow their fields (the recurrent layers'
//! `weight_ih_l0_reverse`, …) write `visit` by hand:
//!
//! ```
//! use exactgrad_autograd::Tensor;
//! use exactgrad_core::{Backend, Philox};
//! use exactgrad_nn::{Linear, Module, ModuleExt, Visitor};
//!
//! /// Stacked layers keyed `layer_0`, `layer_1`, ….
//! struct Stack<B: Backend> {
//!     layers: Vec<Linear<B>>,
//! }
//!
//! impl<B: Backend> Module<B> for Stack<B> {
//!     fn forward(&self, x: &Tensor<B>) -> exactgrad_nn::Result<Tensor<B>> {
//!         let mut x = x.clone();
//!         for l in &self.layers {
//!             x = l.forward(&x)?.relu()?;
//!         }
//!         Ok(x)
//!     }
//!     fn visit(&self, v: &mut Visitor<'_, B>) {
//!         for (i, l) in self.layers.iter().enumerate() {
//!             v.child(&format!("layer_{i}"), l);
//!         }
//!     }
//! }
//!
//! # fn main() -> exactgrad_nn::Result<()> {
//! let b = exactgrad_backends::ScalarRefBackend;
//! let mut rng = Philox::new(0);
//! let stack = Stack { layers: vec![Linear::new(&b, 4, 4, &mut rng)?, Linear::new(&b, 4, 2, &mut rng)?] };
//! let names: Vec<String> = stack.named_parameters().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names[..2], ["layer_0.weight", "layer_0.bias"]);
//! # Ok(())
//! # }
//! ```

use crate::checkpoint::load::{load_entries, state_dict_of, LoadOptions, LoadReport};
use crate::checkpoint::tensor_file::TensorFile;
pub use crate::entry::{Entry, IntBuffer, TrainingFlag};
use crate::error::Result;
use crate::random::RandomStream;
use exactgrad_autograd::Tensor;
use exactgrad_core::Backend;

/// What [`Module::visit`] reports its contents to. A walk calls each module's `visit`
/// twice — once for its own entries, once for its children — so that the order is
/// PyTorch's however the calls are arranged; a call that does not belong to the current
/// pass does nothing.
pub struct Visitor<'v, B: Backend> {
    prefix: &'v str,
    own: bool,
    sink: &'v mut dyn FnMut(&str, Entry<'_, B>),
}

impl<B: Backend> Visitor<'_, B> {
    fn entry(&mut self, name: &str, entry: Entry<'_, B>) {
        if self.own {
            (self.sink)(&join_name(self.prefix, name), entry);
        }
    }

    /// Reports a parameter named `name` (`weight`, `in_proj_bias`, …); `None` (an absent
    /// bias) reports nothing.
    pub fn parameter<'t>(&mut self, name: &str, tensor: impl Into<Option<&'t Tensor<B>>>)
    where
        B: 't,
    {
        if let Some(t) = tensor.into() {
            self.entry(name, Entry::Parameter(t));
        }
    }

    /// Reports a float buffer: state saved with the parameters but not trained
    /// (PyTorch's `register_buffer`, e.g. running statistics). `None` reports nothing.
    pub fn buffer<'t>(&mut self, name: &str, tensor: impl Into<Option<&'t Tensor<B>>>)
    where
        B: 't,
    {
        if let Some(t) = tensor.into() {
            self.entry(name, Entry::Buffer(t));
        }
    }

    /// Reports an integer buffer (see [`IntBuffer`]).
    pub fn int_buffer(&mut self, name: &str, buffer: &IntBuffer) {
        self.entry(name, Entry::IntBuffer(buffer));
    }

    /// Reports a random stream the module draws from in `forward`. Only reported streams
    /// can be seeded ([`ModuleExt::seed_streams`]) or restored from a checkpoint, and an
    /// unseeded stream refuses to draw, so a stream a module forgets to report fails
    /// loudly instead of breaking resume silently.
    pub fn stream(&mut self, name: &str, stream: &RandomStream) {
        self.entry(name, Entry::Stream(stream));
    }

    /// Reports the module's training flag.
    pub fn training(&mut self, flag: &TrainingFlag) {
        if self.own {
            (self.sink)(self.prefix, Entry::Training(flag));
        }
    }

    /// Reports a child module named `name` (`0`, `linear1`, `layers.0`, …).
    pub fn child(&mut self, name: &str, module: &dyn Module<B>) {
        if !self.own {
            walk(module, &join_name(self.prefix, name), self.sink);
        }
    }
}

/// Visits `module` at `prefix`: its own entries, then its children's.
fn walk<B: Backend>(
    module: &dyn Module<B>,
    prefix: &str,
    sink: &mut dyn FnMut(&str, Entry<'_, B>),
) {
    for own in [true, false] {
        module.visit(&mut Visitor { prefix, own, sink });
    }
}

/// A layer or model: a forward function and what it holds, named as in PyTorch's
/// `state_dict` (`weight`, `bias`, `0.weight`, `encoder.1.bias`, …). The
/// [module documentation](self) shows an implementation; [`ModuleExt`] has the methods
/// every module gets.
///
/// Parameters are leaf tensors that require gradients. Cloning a [`Tensor`] shares its
/// storage and gradient slot, so the tensors returned by [`ModuleExt::parameters`] are
/// the module's own: an optimizer that updates them in place (`copy_` under `no_grad`)
/// updates the module.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a `Module<{B}>`",
    label = "not a module over `{B}`",
    note = "in a #[derive(Module)] struct every field is a child module unless marked: #[module(param)] or #[module(buffer)] for a tensor, #[module(skip)] for plain data such as a config",
    note = "a struct over one concrete backend names it: #[module(backend = \"ExactBackend\")]"
)]
pub trait Module<B: Backend> {
    /// Applies the module to `input`.
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>>;

    /// Names every parameter, buffer, random stream, the training flag and every child
    /// of this module once (see [`Visitor`]).
    fn visit(&self, v: &mut Visitor<'_, B>);

    /// A one-line description for printing a model (PyTorch's `repr`): by default the
    /// type's name without its path and generic arguments; the layers of this crate give
    /// their configuration (`Linear(in_features=4, out_features=2, bias=true)`).
    fn describe(&self) -> String {
        short_type_name(std::any::type_name::<Self>())
    }
}

/// `a::b::Name<c::D>` → `Name`.
fn short_type_name(full: &str) -> String {
    let base = full.split('<').next().unwrap_or(full);
    base.rsplit("::").next().unwrap_or(base).to_string()
}

impl<B: Backend, M: Module<B> + ?Sized> Module<B> for Box<M> {
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        (**self).forward(input)
    }
    fn visit(&self, v: &mut Visitor<'_, B>) {
        (**self).visit(v)
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}

impl<B: Backend, M: Module<B> + ?Sized> Module<B> for &M {
    fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
        (**self).forward(input)
    }
    fn visit(&self, v: &mut Visitor<'_, B>) {
        (**self).visit(v)
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}

/// The methods every [`Module`] has, derived from its visitor. Implemented for every
/// module (and `dyn Module`) and not overridable.
pub trait ModuleExt<B: Backend>: Module<B> {
    /// Calls `f` with the full name and every entry of the tree (own entries first, then
    /// each child's, depth first): the walk every other method is made of.
    fn visit_entries(&self, f: &mut dyn FnMut(&str, Entry<'_, B>));

    /// The parameters with their `state_dict` names, in order.
    fn named_parameters(&self) -> Vec<(String, Tensor<B>)> {
        let mut out = Vec::new();
        self.visit_entries(&mut |name, e| {
            if let Entry::Parameter(t) = e {
                out.push((name.to_string(), t.clone()));
            }
        });
        out
    }

    /// The parameters in `state_dict` order (the order optimizers and hashes use).
    fn parameters(&self) -> Vec<Tensor<B>> {
        let mut out = Vec::new();
        self.visit_entries(&mut |_, e| {
            if let Entry::Parameter(t) = e {
                out.push(t.clone());
            }
        });
        out
    }

    /// The float buffers with their `state_dict` names, in order.
    fn named_buffers(&self) -> Vec<(String, Tensor<B>)> {
        let mut out = Vec::new();
        self.visit_entries(&mut |name, e| {
            if let Entry::Buffer(t) = e {
                out.push((name.to_string(), t.clone()));
            }
        });
        out
    }

    /// The total number of parameter elements.
    fn num_parameters(&self) -> usize {
        let mut n = 0;
        self.visit_entries(&mut |_, e| {
            if let Entry::Parameter(t) = e {
                n += t.numel();
            }
        });
        n
    }

    /// The gradient hash of the parameters' elements in `state_dict` order: the value of
    /// `hash_tensors(&self.parameters())` (`docs/arithmetic.md`, the pinned hashes of the
    /// tests and examples). Fails only when a parameter's storage was released.
    fn parameter_hash(&self) -> Result<u64> {
        exactgrad_autograd::hash_tensors(&self.parameters())
    }

    /// The names of the random streams of the tree, in order.
    fn stream_names(&self) -> Vec<String> {
        let mut out = Vec::new();
        self.visit_entries(&mut |name, e| {
            if let Entry::Stream(_) = e {
                out.push(name.to_string());
            }
        });
        out
    }

    /// Seeds every random stream of the tree from the run's `seed`: the stream at path
    /// `p` gets the key [`stream_seed`](crate::random::stream_seed)`(seed, p)` and starts
    /// at position 0 (`docs/arithmetic.md`, "Random streams of modules"). Call it once
    /// after building the model (PyTorch's `torch.manual_seed`); a training checkpoint
    /// restores the seed and the positions.
    ///
    /// A stream that a restored training checkpoint keyed with this very key keeps its
    /// position, so calling it again after a restore changes nothing and the resumed run
    /// draws what an uninterrupted one would. Fails, changing no stream, when a restored
    /// stream has another key (the checkpoint is of a run with another seed): re-keying
    /// it would silently start other streams than the run it resumes; to start new
    /// streams on purpose, use [`reseed_streams`](ModuleExt::reseed_streams).
    fn seed_streams(&self, seed: u64) -> Result<()> {
        let mut streams = Vec::new();
        self.visit_entries(&mut |name, e| {
            if let Entry::Stream(s) = e {
                streams.push((name.to_string(), s.conflict(seed, name)));
            }
        });
        if let Some((path, Some(restored))) = streams.iter().find(|(_, c)| c.is_some()) {
            return Err(reseed_conflict(path, *restored, seed));
        }
        self.visit_entries(&mut |name, e| {
            if let Entry::Stream(s) = e {
                s.seed_at(seed, name);
            }
        });
        Ok(())
    }

    /// Keys every random stream of the tree from `seed` at position 0, whatever it held
    /// (a restored checkpoint's state included): starts new streams on purpose.
    fn reseed_streams(&self, seed: u64) {
        self.visit_entries(&mut |name, e| {
            if let Entry::Stream(s) = e {
                s.reseed_at(seed, name);
            }
        });
    }

    /// Switches between training and evaluation behaviour (dropout, batch statistics)
    /// of every module of the tree (PyTorch's `train(mode)`).
    fn set_training(&self, training: bool) {
        self.visit_entries(&mut |_, e| {
            if let Entry::Training(flag) = e {
                flag.set(training);
            }
        });
    }

    /// Training mode (PyTorch's `train()`): `set_training(true)`.
    fn train(&self) {
        self.set_training(true)
    }

    /// Evaluation mode (PyTorch's `eval()`): `set_training(false)`.
    fn eval(&self) {
        self.set_training(false)
    }

    /// Whether any module of the tree is in training mode (a tree without training flags
    /// is not).
    fn is_training(&self) -> bool {
        let mut any = false;
        self.visit_entries(&mut |_, e| {
            if let Entry::Training(flag) = e {
                any |= flag.get();
            }
        });
        any
    }

    /// The parameters and buffers by their PyTorch names, copied to the host: float
    /// tensors as `F32` entries, integer buffers as 0-dimensional `I64` entries
    /// (PyTorch's `state_dict()`). [`TensorFile::save`] writes it as a safetensors file
    /// that PyTorch loads with `load_state_dict(strict=True)`.
    ///
    /// Fails when a tensor cannot be read (a released storage, an allocation failure).
    fn state_dict(&self) -> Result<TensorFile> {
        state_dict_of(&|f| self.visit_entries(f))
    }

    /// Copies every parameter and buffer from `dict` (PyTorch's
    /// `load_state_dict(state_dict, strict)`): see
    /// [`load_state_dict_with`](crate::checkpoint::load_state_dict_with) with an empty
    /// prefix. Nothing changes when the dict does not fit; the error names every missing,
    /// unexpected, wrong-shape, wrong-type and non-finite entry.
    fn load_state_dict(&self, dict: &TensorFile, options: LoadOptions) -> Result<LoadReport> {
        load_entries(&|f| self.visit_entries(f), dict, "", options)
    }

    /// Frees every parameter's gradient, as PyTorch's `module.zero_grad()` does by
    /// default (`set_to_none=True`). The same as [`ModuleExt::clear_grad`].
    fn zero_grad(&self) {
        self.clear_grad();
    }

    /// Sets every parameter's gradient to zeros, reusing its buffer when it has one
    /// (PyTorch's `zero_grad(set_to_none=False)`). Fails when a new gradient buffer
    /// cannot be allocated.
    fn fill_grad_zero(&self) -> Result<()> {
        for p in self.parameters() {
            p.fill_grad_zero()?;
        }
        Ok(())
    }

    /// Frees every parameter's gradient; the same as [`ModuleExt::zero_grad`].
    fn clear_grad(&self) {
        self.visit_entries(&mut |_, e| {
            if let Entry::Parameter(t) = e {
                t.clear_grad();
            }
        });
    }
}

/// The error of [`ModuleExt::seed_streams`] when the stream at `path`, restored with the
/// key `restored`, would get another key from `seed`.
pub(crate) fn reseed_conflict(path: &str, restored: u64, seed: u64) -> crate::Error {
    crate::Error::invalid(
        "seed_streams",
        "seed",
        format!(
            "the random stream `{path}` was restored from a training checkpoint with the key {restored:#x}, and seed {seed} gives it another: re-keying it would break the resumed run's masks. Seed before restoring, or call reseed_streams to start new streams"
        ),
    )
}

impl<B: Backend, M: Module<B> + ?Sized> ModuleExt<B> for M {
    fn visit_entries(&self, f: &mut dyn FnMut(&str, Entry<'_, B>)) {
        // `walk` needs a `dyn Module`; a sized `M` coerces, and `dyn Module` is itself.
        struct Root<'a, M: ?Sized>(&'a M);
        impl<B: Backend, M: Module<B> + ?Sized> Module<B> for Root<'_, M> {
            fn forward(&self, input: &Tensor<B>) -> Result<Tensor<B>> {
                self.0.forward(input)
            }
            fn visit(&self, v: &mut Visitor<'_, B>) {
                self.0.visit(v)
            }
        }
        walk(&Root(self), "", f);
    }
}

/// `prefix.name`, or `name` alone when the prefix is empty (or the name is).
pub fn join_name(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else if name.is_empty() {
        prefix.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}
