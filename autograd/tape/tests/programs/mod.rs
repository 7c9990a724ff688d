//! Tape programs decoded from bytes: an arena of one of three sizes, a registry of 4 or 16
//! slots filled with a chosen set of operator types, parameter, input and output views
//! made by every kind of constructor (with lengths that do not fit their buffers, matrix
//! sizes that overflow, caller gradients of the wrong length), a graph of up to eight
//! operations on any of them (a view of another tape included), recording switched off
//! part of the way, and a backward pass from any output with a seed of any length.
//!
//! [`TapeProgram::run`] performs the program and reports what happened ([`Trace`]).
//! Shared by `tests/fuzz.rs` (proptest, with a model of the expected outcome and a
//! comparison with the eager engine) and the `tape` target of the cargo-fuzz crate in
//! `fuzz/` (which includes this file by path and only requires that nothing crashes).
#![allow(dead_code)]

use exactgrad_core::Philox;
use exactgrad_tape::operators::*;
use exactgrad_tape::{Arena, BufferView, Input, MatrixView, Output, Parameter, RecordingScope};
use exactgrad_tape::{Status, Tape};

/// The operator types, in registration-mask order.
pub const OPS: [&str; 16] = [
    "relu",
    "sigmoid",
    "tanh",
    "exp",
    "log",
    "scale",
    "softmax",
    "sum",
    "cross_entropy",
    "add",
    "sub",
    "mul",
    "dot",
    "mse",
    "matvec",
    "linear",
];

/// Arena sizes in bytes.
pub const ARENAS: [usize; 3] = [96, 512, 4096];

/// Reads bytes; past the end every read gives 0.
pub struct Bytes<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Bytes<'a> {
    /// A reader over `data`.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, at: 0 }
    }
    /// The next byte.
    pub fn byte(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }
    /// A number below `n` (`n` ≥ 1).
    pub fn below(&mut self, n: usize) -> usize {
        usize::from(self.byte()) % n
    }
    /// A length or size: 0 to 6, or one at the extremes for a byte ≥ 0xF8.
    pub fn len(&mut self) -> usize {
        let b = self.byte();
        match b {
            0xF8..=0xFB => usize::MAX,
            0xFC..=0xFD => 1 << 62,
            0xFE..=0xFF => (1 << 32) + 1,
            _ => usize::from(b % 7),
        }
    }
    /// The next 8 bytes as a `u64`.
    pub fn u64(&mut self) -> u64 {
        (0..8).fold(0u64, |a, _| a << 8 | u64::from(self.byte()))
    }
}

/// How a view is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Make {
    /// `parameter(v)`, `input(v)`, `output(v)`: the whole buffer.
    Whole,
    /// `*_with_len(v, len)`.
    WithLen(usize),
    /// `*_matrix(v, rows, cols)`.
    Matrix(usize, usize),
    /// `*_with_grad(v, g)` (parameters and outputs) with a gradient of this length.
    WithGrad(usize),
    /// `*_matrix_with_grad(v, g, rows, cols)` with a gradient of the first length.
    MatrixWithGrad(usize, usize, usize),
}

/// One view: its buffer's length and how it is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ViewSpec {
    /// Elements of the caller's buffer.
    pub buffer: usize,
    /// The constructor.
    pub make: Make,
}

impl ViewSpec {
    fn decode(r: &mut Bytes, grad: bool) -> Self {
        let buffer = r.below(7);
        let make = match r.below(if grad { 8 } else { 5 }) {
            0..=2 => Make::Whole,
            3 => Make::WithLen(r.len()),
            4 => Make::Matrix(r.len(), r.len()),
            5 | 6 => Make::WithGrad(if r.below(3) == 0 { r.len() } else { buffer }),
            _ => Make::MatrixWithGrad(r.len(), r.len(), r.len()),
        };
        Self { buffer, make }
    }

    /// Rows and columns when made as a matrix.
    pub fn matrix(&self) -> Option<(usize, usize)> {
        match self.make {
            Make::Matrix(r, c) | Make::MatrixWithGrad(_, r, c) => Some((r, c)),
            _ => None,
        }
    }
}

/// The view an operand resolves to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolved {
    /// Parameter `i`.
    Param(usize),
    /// Input `i`.
    Input(usize),
    /// The output of operation `j`.
    Out(usize),
    /// The other tape's view.
    Alien,
}

/// An operand of an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    /// Parameter `i` (modulo the number of parameters).
    Param(usize),
    /// Input `i`.
    Input(usize),
    /// The output of an earlier operation `j` (an input when there is none).
    Out(usize),
    /// A view of another tape.
    Alien,
}

impl Operand {
    fn decode(r: &mut Bytes) -> Self {
        let b = r.byte();
        match b % 16 {
            0..=4 => Operand::Param(usize::from(b / 16)),
            5..=7 => Operand::Input(usize::from(b / 16)),
            8..=14 => Operand::Out(usize::from(b / 16)),
            _ => Operand::Alien,
        }
    }
}

/// One operation: its type (an index into [`OPS`]), operands, scale and target.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpSpec {
    /// Index into [`OPS`].
    pub kind: usize,
    /// Operands (as many as the operator takes; for matvec and linear the first is the
    /// matrix).
    pub args: [Operand; 3],
    /// The factor of `scale`.
    pub c: f32,
    /// The target of `cross_entropy`.
    pub target: usize,
}

/// A whole program.
#[derive(Clone, Debug, PartialEq)]
pub struct TapeProgram {
    /// Index into [`ARENAS`].
    pub arena: usize,
    /// Registry slots: 4 or 16.
    pub slots: usize,
    /// Operator types registered, in this order (indices into [`OPS`]).
    pub register: Vec<usize>,
    /// Whether `begin_graph` runs after the views are made (it clears the status).
    pub begin: bool,
    /// Parameters, inputs and outputs (one per operation).
    pub params: Vec<ViewSpec>,
    /// Inputs.
    pub inputs: Vec<ViewSpec>,
    /// Outputs.
    pub outputs: Vec<ViewSpec>,
    /// The operations.
    pub ops: Vec<OpSpec>,
    /// Operations from this index on run with recording off.
    pub recording_off_from: usize,
    /// The operation whose output is the backward root (modulo their number).
    pub root: usize,
    /// The backward seed's length (`None`: plain `backward`).
    pub seed: Option<usize>,
    /// Seed of the values.
    pub values_seed: u64,
    /// Whether values are random bit patterns (else uniform in [−2, 2)).
    pub bits: bool,
}

impl TapeProgram {
    /// Decodes a program from bytes (any bytes give a program).
    pub fn decode(data: &[u8]) -> Self {
        let mut r = Bytes::new(data);
        let arena = r.below(ARENAS.len());
        let slots = if r.below(4) == 0 { 4 } else { 16 };
        let mask = u16::from(r.byte()) << 8 | u16::from(r.byte());
        // Mostly everything registered.
        let mask = if r.below(4) == 0 { mask } else { u16::MAX };
        let register: Vec<usize> = (0..16).filter(|i| mask & (1 << i) != 0).collect();
        let begin = r.below(2) == 0;
        let params = (0..1 + r.below(3))
            .map(|_| ViewSpec::decode(&mut r, true))
            .collect();
        let inputs = (0..r.below(3))
            .map(|_| ViewSpec::decode(&mut r, false))
            .collect();
        let n_ops = r.below(9);
        let mut outputs = Vec::new();
        let mut ops = Vec::new();
        for _ in 0..n_ops {
            outputs.push(ViewSpec::decode(&mut r, true));
            let kind = r.below(OPS.len());
            let args = [
                Operand::decode(&mut r),
                Operand::decode(&mut r),
                Operand::decode(&mut r),
            ];
            let c = match r.below(8) {
                0 => f32::NAN,
                1 => f32::INFINITY,
                2 => -0.0,
                b => b as f32 * 0.75 - 2.0,
            };
            let target = r.below(8);
            ops.push(OpSpec {
                kind,
                args,
                c,
                target,
            });
        }
        let recording_off_from = if r.below(4) == 0 {
            r.below(9)
        } else {
            usize::MAX
        };
        let root = r.below(8);
        let seed = match r.below(4) {
            0 => Some(r.below(7)),
            _ => None,
        };
        let values_seed = r.u64();
        let bits = r.below(4) == 0;
        Self {
            arena,
            slots,
            register,
            begin,
            params,
            inputs,
            outputs,
            ops,
            recording_off_from,
            root,
            seed,
            values_seed,
            bits,
        }
    }

    /// The values of buffer `k` of `len` elements.
    pub fn values(&self, k: u64, len: usize) -> Vec<f32> {
        let mut r = Philox::new(self.values_seed ^ k.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        (0..len)
            .map(|_| {
                if self.bits {
                    f32::from_bits(r.next_u64() as u32)
                } else {
                    r.uniform(-2.0, 2.0)
                }
            })
            .collect()
    }

    /// The operation whose output is the backward root.
    pub fn root_op(&self) -> Option<usize> {
        (!self.ops.is_empty()).then(|| self.root % self.ops.len())
    }

    /// The view an operand of operation `k` names (earlier outputs only).
    pub fn resolve(&self, k: usize, o: Operand) -> Resolved {
        let (np, ni) = (self.params.len(), self.inputs.len());
        match o {
            Operand::Param(i) if np > 0 => Resolved::Param(i % np),
            Operand::Out(j) if k > 0 => Resolved::Out(j % k),
            Operand::Alien => Resolved::Alien,
            Operand::Input(i) | Operand::Param(i) | Operand::Out(i) if ni > 0 => {
                Resolved::Input(i % ni)
            }
            _ => Resolved::Alien,
        }
    }

    /// The matrix view an operand names: the first matrix parameter from index `i` on,
    /// else the first matrix input, else the other tape's.
    pub fn resolve_matrix(&self, o: Operand) -> Resolved {
        let i = match o {
            Operand::Param(i) | Operand::Input(i) | Operand::Out(i) => i,
            Operand::Alien => return Resolved::Alien,
        };
        let n = self.params.len();
        for k in 0..n {
            if self.params[(i + k) % n].matrix().is_some() {
                return Resolved::Param((i + k) % n);
            }
        }
        match self
            .inputs
            .iter()
            .position(|s| matches!(s.make, Make::Matrix(..)))
        {
            Some(j) => Resolved::Input(j),
            None => Resolved::Alien,
        }
    }

    /// The value every output buffer holds before the program runs (a NaN with a
    /// payload no operation writes).
    pub const SENTINEL: u32 = 0x7FA5_A5A5;

    /// Runs the program on a tape of `f32`.
    pub fn run(&self) -> Trace {
        match (self.arena, self.slots) {
            (0, 4) => self.run_in::<{ ARENAS[0] }, 4>(),
            (0, _) => self.run_in::<{ ARENAS[0] }, 16>(),
            (1, 4) => self.run_in::<{ ARENAS[1] }, 4>(),
            (1, _) => self.run_in::<{ ARENAS[1] }, 16>(),
            (_, 4) => self.run_in::<{ ARENAS[2] }, 4>(),
            (_, _) => self.run_in::<{ ARENAS[2] }, 16>(),
        }
    }

    fn run_in<const BYTES: usize, const SLOTS: usize>(&self) -> Trace {
        // Buffers first: views borrow them.
        let mut pvals: Vec<Vec<f32>> = (0..self.params.len())
            .map(|i| self.values(i as u64, self.params[i].buffer))
            .collect();
        let mut pgrads: Vec<Vec<f32>> = self.params.iter().map(grad_buffer).collect();
        let ivals: Vec<Vec<f32>> = (0..self.inputs.len())
            .map(|i| self.values(100 + i as u64, self.inputs[i].buffer))
            .collect();
        let mut ovals: Vec<Vec<f32>> = self
            .outputs
            .iter()
            .map(|s| vec![f32::from_bits(Self::SENTINEL); s.buffer])
            .collect();
        let mut ograds: Vec<Vec<f32>> = self.outputs.iter().map(grad_buffer).collect();
        let alien_vals = [1.0f32, 2.0];
        let seed: Vec<f32> = self.seed.map_or(vec![1.0], |n| self.values(200, n));

        let mut arena = Arena::<BYTES>::new();
        let mut alien_arena = Arena::<64>::new();
        let tape: Tape<f32, SLOTS> = Tape::new(&mut arena);
        let alien_tape: Tape<f32, SLOTS> = Tape::new(&mut alien_arena);
        let alien = alien_tape.input(&alien_vals);
        let alien_m = alien_tape.input_matrix(&alien_vals, 1, 2);
        for &k in &self.register {
            register(&tape, k);
        }
        let mut statuses = vec![tape.status()];

        let params: Vec<Param<'_>> = self
            .params
            .iter()
            .zip(pvals.iter_mut())
            .zip(pgrads.iter_mut())
            .map(|((s, v), g)| make_param(&tape, s, v, g))
            .collect();
        let inputs: Vec<In<'_>> = self
            .inputs
            .iter()
            .zip(&ivals)
            .map(|(s, v)| match s.make {
                Make::Matrix(r, c) => In::Mat(tape.input_matrix(v, r, c)),
                Make::WithLen(n) => In::Buf(tape.input_with_len(v, n)),
                _ => In::Buf(tape.input(v)),
            })
            .collect();
        let mut outs: Vec<BufferView<'_, f32, Output>> = self
            .outputs
            .iter()
            .zip(ovals.iter_mut())
            .zip(ograds.iter_mut())
            .map(|((s, v), g)| make_output(&tape, s, v, g))
            .collect();
        statuses.push(tape.status());
        if self.begin {
            tape.begin_graph();
        }
        let mut recorded = Vec::new();
        let mut backward = None;
        {
            let mut g = tape.graph();
            let mut produced: Vec<&BufferView<'_, f32, Output>> = Vec::new();
            let ctx = Ctx {
                params: &params,
                inputs: &inputs,
                alien: &alien,
                alien_m: &alien_m,
            };
            let mut scope = None;
            for (k, y) in outs.iter_mut().enumerate().take(self.ops.len()) {
                if k == self.recording_off_from {
                    scope = Some(RecordingScope::new(&tape, false));
                }
                let r = apply(&mut g, self, k, &ctx, &produced, y);
                recorded.push(r.has_producer());
                produced.push(r);
                statuses.push(tape.status());
            }
            drop(scope);
            if !produced.is_empty() {
                let root = produced[self.root_op().unwrap()];
                backward = Some(match self.seed {
                    None => g.backward(root),
                    Some(_) => g.backward_with_seed(root, &seed),
                });
            }
        }
        statuses.push(tape.status());
        let valid = (
            params.iter().map(Param::is_valid).collect(),
            inputs.iter().map(In::is_valid).collect(),
            outs.iter().map(|o| o.is_valid()).collect(),
        );
        let param_grads: Vec<Vec<f32>> = params
            .into_iter()
            .map(|p| match p {
                Param::Buf(mut v) => v.grad().to_vec(),
                Param::Mat(mut m) => m.grad().to_vec(),
            })
            .collect();
        let out_grads: Vec<Vec<f32>> = outs.iter_mut().map(|o| o.grad().to_vec()).collect();
        let (used, peak, capacity) = (tape.used(), tape.peak(), tape.capacity());
        drop(outs);
        drop(inputs);
        Trace {
            statuses,
            recorded,
            backward,
            valid,
            param_grads,
            out_grads,
            outputs: ovals,
            params_after: pvals,
            used,
            peak,
            capacity,
        }
    }
}

/// What a program did.
#[derive(Debug)]
pub struct Trace {
    /// The tape's status after registration, after making the views, after each
    /// operation, and at the end.
    pub statuses: Vec<Status>,
    /// Whether each operation recorded itself (its output has a producer).
    pub recorded: Vec<bool>,
    /// What backward returned (`None`: no operation to start from).
    pub backward: Option<bool>,
    /// Whether each parameter, input and output view was valid.
    pub valid: (Vec<bool>, Vec<bool>, Vec<bool>),
    /// The parameters' gradients.
    pub param_grads: Vec<Vec<f32>>,
    /// The outputs' gradients.
    pub out_grads: Vec<Vec<f32>>,
    /// The output buffers after the program.
    pub outputs: Vec<Vec<f32>>,
    /// The parameter buffers after the program (never written).
    pub params_after: Vec<Vec<f32>>,
    /// `used()`, `peak()` and `capacity()` at the end.
    pub used: usize,
    /// See `used`.
    pub peak: usize,
    /// See `used`.
    pub capacity: usize,
}

fn grad_buffer(s: &ViewSpec) -> Vec<f32> {
    match s.make {
        Make::WithGrad(n) | Make::MatrixWithGrad(n, _, _) => vec![0.0; n.min(64)],
        _ => Vec::new(),
    }
}

fn register<const S: usize>(tape: &Tape<'_, f32, S>, k: usize) -> bool {
    match k {
        0 => tape.register_operator::<Relu<f32>>(),
        1 => tape.register_operator::<Sigmoid<f32>>(),
        2 => tape.register_operator::<Tanh<f32>>(),
        3 => tape.register_operator::<Exp<f32>>(),
        4 => tape.register_operator::<Log<f32>>(),
        5 => tape.register_operator::<Scale<f32>>(),
        6 => tape.register_operator::<Softmax<f32>>(),
        7 => tape.register_operator::<Sum<f32>>(),
        8 => tape.register_operator::<CrossEntropy<f32>>(),
        9 => tape.register_operator::<Add<f32>>(),
        10 => tape.register_operator::<Sub<f32>>(),
        11 => tape.register_operator::<Mul<f32>>(),
        12 => tape.register_operator::<Dot<f32>>(),
        13 => tape.register_operator::<Mse<f32>>(),
        14 => tape.register_operator::<MatVec<f32>>(),
        _ => tape.register_operator::<Linear<f32>>(),
    }
}

/// A parameter view: a vector or a matrix.
pub enum Param<'t> {
    /// Made by `parameter`, `parameter_with_len` or `parameter_with_grad`.
    Buf(BufferView<'t, f32, Parameter>),
    /// Made by `parameter_matrix` or `parameter_matrix_with_grad`.
    Mat(MatrixView<'t, f32, Parameter>),
}

impl<'t> Param<'t> {
    fn view(&self) -> &BufferView<'t, f32, Parameter> {
        match self {
            Param::Buf(v) => v,
            Param::Mat(m) => m,
        }
    }
    fn is_valid(&self) -> bool {
        self.view().is_valid()
    }
}

/// An input view: a vector or a matrix.
pub enum In<'t> {
    /// Made by `input` or `input_with_len`.
    Buf(BufferView<'t, f32, Input>),
    /// Made by `input_matrix`.
    Mat(MatrixView<'t, f32, Input>),
}

impl<'t> In<'t> {
    fn view(&self) -> &BufferView<'t, f32, Input> {
        match self {
            In::Buf(v) => v,
            In::Mat(m) => m,
        }
    }
    fn is_valid(&self) -> bool {
        self.view().is_valid()
    }
}

fn make_param<'t, const S: usize>(
    tape: &'t Tape<'_, f32, S>,
    s: &ViewSpec,
    v: &'t mut [f32],
    g: &'t mut [f32],
) -> Param<'t> {
    match s.make {
        Make::Whole => Param::Buf(tape.parameter(v)),
        Make::WithLen(n) => Param::Buf(tape.parameter_with_len(v, n)),
        Make::Matrix(r, c) => Param::Mat(tape.parameter_matrix(v, r, c)),
        Make::WithGrad(_) => Param::Buf(tape.parameter_with_grad(v, g)),
        Make::MatrixWithGrad(_, r, c) => Param::Mat(tape.parameter_matrix_with_grad(v, g, r, c)),
    }
}

fn make_output<'t, const S: usize>(
    tape: &'t Tape<'_, f32, S>,
    s: &ViewSpec,
    v: &'t mut [f32],
    g: &'t mut [f32],
) -> BufferView<'t, f32, Output> {
    match s.make {
        Make::Whole => tape.output(v),
        Make::WithLen(n) => tape.output_with_len(v, n),
        Make::Matrix(r, c) => tape.output_matrix(v, r, c).into_view(),
        Make::WithGrad(_) => tape.output_with_grad(v, g),
        Make::MatrixWithGrad(_, r, c) => tape.output_matrix_with_grad(v, g, r, c).into_view(),
    }
}

/// The views an operation can take its operands from (besides earlier outputs).
struct Ctx<'g, 't> {
    params: &'g [Param<'t>],
    inputs: &'g [In<'t>],
    alien: &'g BufferView<'t, f32, Input>,
    alien_m: &'g MatrixView<'t, f32, Input>,
}

/// A resolved operand: a view of one of the three roles.
enum Arg<'g, 't> {
    P(&'g BufferView<'t, f32, Parameter>),
    I(&'g BufferView<'t, f32, Input>),
    O(&'g BufferView<'t, f32, Output>),
}

/// A resolved matrix operand.
enum MatArg<'g, 't> {
    P(&'g MatrixView<'t, f32, Parameter>),
    I(&'g MatrixView<'t, f32, Input>),
}

impl<'g, 't> Ctx<'g, 't> {
    fn arg(&self, r: Resolved, produced: &[&'g BufferView<'t, f32, Output>]) -> Arg<'g, 't> {
        match r {
            Resolved::Param(i) => Arg::P(self.params[i].view()),
            Resolved::Input(i) => Arg::I(self.inputs[i].view()),
            Resolved::Out(j) => Arg::O(produced[j]),
            Resolved::Alien => Arg::I(self.alien),
        }
    }

    fn mat(&self, r: Resolved) -> MatArg<'g, 't> {
        match r {
            Resolved::Param(i) => match &self.params[i] {
                Param::Mat(m) => MatArg::P(m),
                Param::Buf(_) => MatArg::I(self.alien_m),
            },
            Resolved::Input(i) => match &self.inputs[i] {
                In::Mat(m) => MatArg::I(m),
                In::Buf(_) => MatArg::I(self.alien_m),
            },
            _ => MatArg::I(self.alien_m),
        }
    }
}

/// Calls `$f` with the operand bound to `$x` as a view of its role.
macro_rules! with1 {
    ($a:expr, |$x:ident| $body:expr) => {
        match $a {
            Arg::P($x) => $body,
            Arg::I($x) => $body,
            Arg::O($x) => $body,
        }
    };
}

macro_rules! with2 {
    ($a:expr, $b:expr, |$x:ident, $y:ident| $body:expr) => {
        with1!($a, |$x| with1!($b, |$y| $body))
    };
}

macro_rules! with_mat {
    ($a:expr, |$x:ident| $body:expr) => {
        match $a {
            MatArg::P($x) => $body,
            MatArg::I($x) => $body,
        }
    };
}

fn apply<'g, 't, const S: usize>(
    g: &mut exactgrad_tape::Graph<'g, '_, f32, S>,
    p: &TapeProgram,
    k: usize,
    ctx: &Ctx<'g, 't>,
    produced: &[&'g BufferView<'t, f32, Output>],
    y: &'g mut BufferView<'t, f32, Output>,
) -> &'g BufferView<'t, f32, Output> {
    let op = &p.ops[k];
    let [a, b, c] = op.args;
    let arg = |o| ctx.arg(p.resolve(k, o), produced);
    let mat = |o| ctx.mat(p.resolve_matrix(o));
    match op.kind {
        0 => with1!(arg(a), |x| relu(g, x, y)),
        1 => with1!(arg(a), |x| sigmoid(g, x, y)),
        2 => with1!(arg(a), |x| tanh(g, x, y)),
        3 => with1!(arg(a), |x| exp(g, x, y)),
        4 => with1!(arg(a), |x| log(g, x, y)),
        5 => with1!(arg(a), |x| scale(g, x, op.c, y)),
        6 => with1!(arg(a), |x| softmax(g, x, y)),
        7 => with1!(arg(a), |x| sum(g, x, y)),
        8 => with1!(arg(a), |x| cross_entropy(g, x, op.target, y)),
        9 => with2!(arg(a), arg(b), |p, q| add(g, p, q, y)),
        10 => with2!(arg(a), arg(b), |p, q| sub(g, p, q, y)),
        11 => with2!(arg(a), arg(b), |p, q| mul(g, p, q, y)),
        12 => with2!(arg(a), arg(b), |p, q| dot(g, p, q, y)),
        13 => with2!(arg(a), arg(b), |p, q| mse(g, p, q, y)),
        14 => with_mat!(mat(a), |w| with1!(arg(b), |x| matvec(g, w, x, y))),
        _ => with_mat!(mat(a), |w| with2!(arg(b), arg(c), |x, bias| linear(
            g, w, x, bias, y
        ))),
    }
}
