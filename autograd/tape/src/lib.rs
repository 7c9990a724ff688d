//! Reverse-mode automatic differentiation on a fixed byte budget: no heap, `no_std`.
//!
//! An [`Arena`] supplies exactly `BYTES` bytes; a [`Tape`] keeps gradients and operation
//! records in it and reports [`Status::OutOfMemory`] instead of growing. The application
//! owns every value buffer; [`BufferView`] and [`MatrixView`] describe them to the tape,
//! in one of three roles: [`Input`] (read-only, no gradient), [`Parameter`] (trainable,
//! gradient accumulates) and [`Output`] (written by an operator, gradient set by backward).
//! Operators are separate types, registered on the tape before use, and recorded through a
//! [`Graph`], whose [`backward`](Graph::backward) visits the records reachable from the root.
//!
//! ```
//! use exactgrad_tape::operators::{linear, mse, relu, Linear, Mse, Relu};
//! use exactgrad_tape::{Arena, Tape};
//!
//! let mut arena = Arena::<1024>::new();
//! let tape: Tape<f32> = Tape::new(&mut arena);
//! tape.register_operator::<Linear<f32>>();
//! tape.register_operator::<Relu<f32>>();
//! tape.register_operator::<Mse<f32>>();
//!
//! let (mut w, mut b) = ([0.5f32, -0.25, 0.75, 1.0], [0.1f32, -0.1]);
//! let (mut h, mut a, mut loss) = ([0.0f32; 2], [0.0f32; 2], [0.0f32]);
//! let mut w = tape.parameter_matrix(&mut w, 2, 2);
//! let mut b = tape.parameter(&mut b);
//! let mut h = tape.output(&mut h);
//! let mut a = tape.output(&mut a);
//! let mut loss = tape.output(&mut loss);
//!
//! let x = [1.0f32, 2.0];
//! let target = [1.0f32, 0.0];
//! let (x, target) = (tape.input(&x), tape.input(&target));
//! let mut g = tape.graph();
//! let hv = linear(&mut g, &w, &x, &b, &mut h);
//! let av = relu(&mut g, hv, &mut a);
//! let l = mse(&mut g, av, &target, &mut loss);
//! assert!(g.backward(l));
//! assert!(tape.good());
//! // h = W·x + b = [0.1, 2.65]; loss = ((0.1 − 1)² + 2.65²) / 2; ∂loss/∂b = h − target.
//! let expected = [-0.9f32, 2.65];
//! assert!(b.grad().iter().zip(expected).all(|(g, e)| (g - e).abs() < 1e-6));
//! assert_eq!(w.grad().len(), 4);
//! ```
//!
//! # What the compiler guarantees
//!
//! An arena tape in C or C++ leaves these duties to the caller (as a documented contract);
//! here they are compile-time errors, by borrowing.
//!
//! A buffer must stay alive until `backward` has finished:
//!
//! ```compile_fail,E0597
//! # use exactgrad_tape::operators::{sum, Sum};
//! # use exactgrad_tape::{Arena, Tape};
//! let mut arena = Arena::<512>::new();
//! let tape: Tape<f32> = Tape::new(&mut arena);
//! tape.register_operator::<Sum<f32>>();
//! let mut out = [0.0f32];
//! let mut y = tape.output(&mut out);
//! let mut g = tape.graph();
//! let s = {
//!     let values = [1.0f32, 2.0];
//!     let x = tape.input(&values);
//!     sum(&mut g, &x, &mut y)
//! }; // `values` is dropped here, while the graph still refers to it
//! g.backward(s);
//! ```
//!
//! An operator's output must not alias its input:
//!
//! ```compile_fail,E0502
//! # use exactgrad_tape::operators::{relu, Relu};
//! # use exactgrad_tape::{Arena, Tape};
//! let mut arena = Arena::<512>::new();
//! let tape: Tape<f32> = Tape::new(&mut arena);
//! tape.register_operator::<Relu<f32>>();
//! let mut values = [1.0f32, -2.0];
//! let mut y = tape.output(&mut values);
//! let mut g = tape.graph();
//! relu(&mut g, &y, &mut y);
//! ```
//!
//! nor can one buffer be both an input and an output:
//!
//! ```compile_fail,E0502
//! # use exactgrad_tape::{Arena, Tape};
//! let mut arena = Arena::<512>::new();
//! let tape: Tape<f32> = Tape::new(&mut arena);
//! let mut values = [1.0f32, -2.0];
//! let x = tape.input(&values);
//! let y = tape.output(&mut values);
//! drop((x, y));
//! ```
//!
//! Values read by a backward rule must not change between the forward operation and
//! `backward`:
//!
//! ```compile_fail,E0502
//! # use exactgrad_tape::operators::{dot, Dot};
//! # use exactgrad_tape::{Arena, Tape};
//! let mut arena = Arena::<512>::new();
//! let tape: Tape<f32> = Tape::new(&mut arena);
//! tape.register_operator::<Dot<f32>>();
//! let (mut wv, xv, mut out) = ([1.0f32, 2.0], [3.0f32, 4.0], [0.0f32]);
//! let mut w = tape.parameter(&mut wv);
//! let x = tape.input(&xv);
//! let mut y = tape.output(&mut out);
//! let mut g = tape.graph();
//! let l = dot(&mut g, &w, &x, &mut y);
//! w.values_mut()[0] = 5.0; // the record of `dot` reads `w`
//! g.backward(l);
//! ```
//!
//! A live intermediate must not be overwritten by a later operation before `backward`:
//!
//! ```compile_fail,E0499
//! # use exactgrad_tape::operators::{relu, Relu};
//! # use exactgrad_tape::{Arena, Tape};
//! let mut arena = Arena::<512>::new();
//! let tape: Tape<f32> = Tape::new(&mut arena);
//! tape.register_operator::<Relu<f32>>();
//! let (xv, mut hv) = ([1.0f32, -2.0], [0.0f32; 2]);
//! let x = tape.input(&xv);
//! let mut h = tape.output(&mut hv);
//! let mut g = tape.graph();
//! let first = relu(&mut g, &x, &mut h);
//! relu(&mut g, &x, &mut h); // `h` is still needed by the first record
//! g.backward(first);
//! ```
//!
//! After [`Tape::reset`] no old view can be used:
//!
//! ```compile_fail,E0502
//! # use exactgrad_tape::{Arena, Tape};
//! let mut arena = Arena::<512>::new();
//! let mut tape: Tape<f32> = Tape::new(&mut arena);
//! let mut values = [1.0f32, 2.0];
//! let mut w = tape.parameter(&mut values);
//! tape.reset();
//! w.zero_grad();
//! ```
//!
//! Roles are types: an input cannot be written by an operator (nor has it a gradient):
//!
//! ```compile_fail,E0308
//! # use exactgrad_tape::operators::{relu, Relu};
//! # use exactgrad_tape::{Arena, Tape};
//! let mut arena = Arena::<512>::new();
//! let tape: Tape<f32> = Tape::new(&mut arena);
//! let (xv, yv) = ([1.0f32], [0.0f32]);
//! let x = tape.input(&xv);
//! let mut y = tape.input(&yv);
//! let mut g = tape.graph();
//! relu(&mut g, &x, &mut y);
//! ```
//!
//! What the types cannot exclude is checked at run time and reported as
//! [`Status::TapeMismatch`]: lengths and shapes, views of another tape, views that could
//! not be made, graphs that are no longer current. Checks that memory safety depends on
//! (every record stays inside the caller's buffers) always run; exact shape agreement is
//! checked in debug builds and, in release builds, with the `validation` feature
//! ([`VALIDATION`]).
//!
//! See `docs/tape.md` for the memory layout and for sizing an arena.
#![no_std]
#![warn(missing_docs)]
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]

mod arena;
mod graph;
pub mod operators;
mod scalar;
mod status;
mod tape;
mod view;

pub use arena::{Arena, ALIGN};
pub use graph::Graph;
pub use operators::{record_size, Operator};
pub use scalar::TapeScalar;
pub use status::Status;
pub use tape::{RecordingScope, Tape, VALIDATION};
pub use view::{BufferView, HasGrad, Input, MatrixView, Output, Parameter, Role};
