//! Property-based fuzzing of the tape: programs decoded from random bytes
//! (`programs::TapeProgram`, shared with the `tape` cargo-fuzz target) make views of
//! every kind, valid or not, record up to eight operations of the sixteen operator types
//! on them (registered or not, in arenas too small or large enough, with a view of
//! another tape, with recording switched off), and run backward. For each program:
//!
//! - nothing panics, and each run finishes within a time limit;
//! - an independent model of `docs/tape.md` predicts, from the program alone, which views
//!   are valid, which operations succeed and record, every status along the way, what
//!   `backward` returns and the bytes in use; a failed operation leaves its output's
//!   buffer untouched, and no parameter buffer is ever written;
//! - when every operation succeeded with exact lengths, the values of every output and
//!   the parameters' gradients equal the eager engine's on `ScalarRefBackend` bit for bit
//!   (within the accumulation-order and `−0` limits that `docs/tape.md`, "Backward",
//!   states).

mod programs;

use exactgrad_autograd::{BackwardOptions, CrossEntropyOptions, Reduction, Tensor};
use exactgrad_backends::ScalarRefBackend;
use exactgrad_tape::operators::*;
use exactgrad_tape::{record_size, Status, ALIGN, VALIDATION};
use programs::{Make, Resolved, TapeProgram, ViewSpec, ARENAS, OPS};
use proptest::prelude::*;
use std::time::Duration;

// ----- the model ------------------------------------------------------------------------

/// A view as the model sees it.
#[derive(Clone, Copy, Debug)]
struct ModelView {
    len: usize,
    valid: bool,
    /// Rows and columns when made as a matrix.
    rc: Option<(usize, usize)>,
}

/// The record size of operator type `k`.
fn record_bytes(k: usize) -> usize {
    match k {
        0 => record_size::<f32, Relu<f32>>(),
        1 => record_size::<f32, Sigmoid<f32>>(),
        2 => record_size::<f32, Tanh<f32>>(),
        3 => record_size::<f32, Exp<f32>>(),
        4 => record_size::<f32, Log<f32>>(),
        5 => record_size::<f32, Scale<f32>>(),
        6 => record_size::<f32, Softmax<f32>>(),
        7 => record_size::<f32, Sum<f32>>(),
        8 => record_size::<f32, CrossEntropy<f32>>(),
        9 => record_size::<f32, Add<f32>>(),
        10 => record_size::<f32, Sub<f32>>(),
        11 => record_size::<f32, Mul<f32>>(),
        12 => record_size::<f32, Dot<f32>>(),
        13 => record_size::<f32, Mse<f32>>(),
        14 => record_size::<f32, MatVec<f32>>(),
        _ => record_size::<f32, Linear<f32>>(),
    }
}

/// What the model predicts.
#[derive(Debug, PartialEq)]
struct Prediction {
    statuses: Vec<Status>,
    succeeded: Vec<bool>,
    recorded: Vec<bool>,
    backward: Option<bool>,
    valid: (Vec<bool>, Vec<bool>, Vec<bool>),
    used: usize,
    /// Whether every operation had exact lengths (the eager engine's shapes).
    exact: bool,
}

struct Model {
    status: Status,
    low: usize,
    high: usize,
}

impl Model {
    fn fail(&mut self, s: Status) {
        if self.status == Status::Ok {
            self.status = s;
        }
    }

    /// A view made by `make` over a buffer of `buffer` elements, its gradient from the
    /// arena (`arena_grad`), none (inputs) or the caller's.
    fn view(&mut self, spec: &ViewSpec, grad: bool) -> ModelView {
        let caller_grad = |n: usize| n.min(64);
        let (len, rc, glen) = match spec.make {
            Make::Whole => (Some(spec.buffer), None, None),
            Make::WithLen(n) => (Some(n), None, None),
            Make::Matrix(r, c) => (r.checked_mul(c), Some((r, c)), None),
            Make::WithGrad(g) => (Some(spec.buffer), None, Some(caller_grad(g))),
            Make::MatrixWithGrad(g, r, c) => (r.checked_mul(c), Some((r, c)), Some(caller_grad(g))),
        };
        let Some(len) = len else {
            // rows × cols overflows.
            self.fail(Status::TapeMismatch);
            return ModelView {
                len: 0,
                valid: false,
                rc: Some((0, 0)),
            };
        };
        if len > spec.buffer {
            self.fail(Status::TapeMismatch);
            return ModelView {
                len: 0,
                valid: false,
                rc,
            };
        }
        let valid = match (grad, glen) {
            (false, _) => true,
            (true, Some(g)) => {
                let ok = g == len;
                if !ok {
                    self.fail(Status::TapeMismatch);
                }
                ok
            }
            (true, None) => {
                let bytes = (len * 4).div_ceil(ALIGN) * ALIGN;
                if bytes > self.high - self.low {
                    self.fail(Status::OutOfMemory);
                    false
                } else {
                    self.low += bytes;
                    true
                }
            }
        };
        ModelView { len, valid, rc }
    }
}

/// The model's prediction for a program.
fn predict(p: &TapeProgram) -> Prediction {
    let top = ARENAS[p.arena] / ALIGN * ALIGN;
    let mut m = Model {
        status: Status::Ok,
        low: 0,
        high: top,
    };
    let registered: Vec<usize> = p.register.iter().copied().take(p.slots).collect();
    if p.register.len() > p.slots {
        m.fail(Status::OperatorRegistryFull);
    }
    let mut statuses = vec![m.status];
    let params: Vec<ModelView> = p.params.iter().map(|s| m.view(s, true)).collect();
    let inputs: Vec<ModelView> = p.inputs.iter().map(|s| m.view(s, false)).collect();
    let outs: Vec<ModelView> = p.outputs.iter().map(|s| m.view(s, true)).collect();
    statuses.push(m.status);
    if p.begin {
        m.status = Status::Ok;
    }
    let alien = ModelView {
        len: 2,
        valid: true,
        rc: Some((1, 2)),
    };
    let view = |r: Resolved| match r {
        Resolved::Param(i) => (params[i], false),
        Resolved::Input(i) => (inputs[i], false),
        Resolved::Out(j) => (outs[j], false),
        Resolved::Alien => (alien, true),
    };
    let (mut succeeded, mut recorded) = (Vec::new(), Vec::new());
    let mut exact_all = true;
    for (k, op) in p.ops.iter().enumerate() {
        let y = outs[k];
        let n_args = match op.kind {
            0..=8 => 1,
            9..=14 => 2,
            _ => 3,
        };
        let args: Vec<(ModelView, bool)> = (0..n_args)
            .map(|i| {
                if op.kind >= 14 && i == 0 {
                    let r = p.resolve_matrix(op.args[0]);
                    let (v, alien) = view(r);
                    // A vector parameter or input cannot be a matrix: the other tape's is
                    // used instead.
                    if v.rc.is_none() {
                        (alien_view(), true)
                    } else {
                        (v, alien)
                    }
                } else {
                    view(p.resolve(k, op.args[i]))
                }
            })
            .collect();
        let len = |i: usize| args[i].0.len;
        let (fits, exact) = match op.kind {
            0..=6 => (len(0) >= y.len, len(0) == y.len),
            7 => (y.len >= 1, y.len == 1),
            8 => (op.target < len(0) && y.len >= 1, y.len == 1),
            9..=11 => (
                len(0) >= y.len && len(1) >= y.len,
                len(0) == y.len && len(1) == y.len,
            ),
            12 | 13 => (
                len(1) >= len(0) && y.len >= 1,
                len(1) == len(0) && y.len == 1,
            ),
            _ => {
                let (r, c) = args[0].0.rc.unwrap();
                let rc = r.checked_mul(c);
                let fits = rc.is_some_and(|n| len(0) >= n) && len(1) >= c && y.len >= r;
                let exact = rc == Some(len(0)) && len(1) == c && y.len == r;
                if op.kind == 15 {
                    (fits && len(2) >= r, exact && len(2) == r)
                } else {
                    (fits, exact)
                }
            }
        };
        exact_all &= exact;
        let views_ok = y.valid && args.iter().all(|(v, alien)| v.valid && !alien);
        let recording = k < p.recording_off_from;
        let ok = if !(fits && views_ok) || (VALIDATION && !exact) {
            m.fail(Status::TapeMismatch);
            false
        } else if !registered.contains(&op.kind) {
            m.fail(Status::OperatorNotRegistered);
            false
        } else if recording {
            let size = record_bytes(op.kind);
            if size > m.high - m.low {
                m.fail(Status::OutOfMemory);
                false
            } else {
                m.high -= size;
                true
            }
        } else {
            true
        };
        succeeded.push(ok);
        recorded.push(ok && recording);
        statuses.push(m.status);
    }
    let backward = p.root_op().map(|r| {
        let seed_len = p.seed.unwrap_or(1);
        if m.status != Status::Ok {
            false
        } else if !(outs[r].valid && recorded[r] && seed_len == outs[r].len) {
            m.fail(Status::InvalidOutput);
            false
        } else {
            true
        }
    });
    statuses.push(m.status);
    Prediction {
        statuses,
        succeeded,
        recorded,
        backward,
        valid: (
            params.iter().map(|v| v.valid).collect(),
            inputs.iter().map(|v| v.valid).collect(),
            outs.iter().map(|v| v.valid).collect(),
        ),
        used: m.low + (top - m.high),
        exact: exact_all,
    }
}

fn alien_view() -> ModelView {
    ModelView {
        len: 2,
        valid: true,
        rc: Some((1, 2)),
    }
}

// ----- the eager engine -----------------------------------------------------------------

type T = Tensor<ScalarRefBackend>;
const B: ScalarRefBackend = ScalarRefBackend;

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// The outputs' values and the parameters' gradients, on the eager engine.
type Eager = (Vec<Vec<f32>>, Vec<Vec<f32>>);

/// The outputs' values and the parameters' gradients of the program on the eager engine.
fn eager(p: &TapeProgram) -> Eager {
    let len = |s: &ViewSpec| match s.make {
        Make::WithLen(n) => Some(n),
        Make::Matrix(r, c) | Make::MatrixWithGrad(_, r, c) => r.checked_mul(c),
        _ => Some(s.buffer),
    };
    // A view the tape refused is never an operand of an exact program: an empty leaf.
    let leaf = |s: &ViewSpec, v: Vec<f32>| -> T {
        match len(s).filter(|&n| n <= v.len()) {
            Some(n) => {
                let shape = match s.matrix() {
                    Some((r, c)) => vec![r, c],
                    None => vec![n],
                };
                T::from_vec(&B, v[..n].to_vec(), shape).unwrap()
            }
            None => T::zeros(&B, [0]).unwrap(),
        }
    };
    let params: Vec<T> = p
        .params
        .iter()
        .enumerate()
        .map(|(i, s)| {
            leaf(s, p.values(i as u64, s.buffer))
                .requires_grad()
                .unwrap()
        })
        .collect();
    let inputs: Vec<T> = p
        .inputs
        .iter()
        .enumerate()
        .map(|(i, s)| leaf(s, p.values(100 + i as u64, s.buffer)))
        .collect();
    let mut outs: Vec<T> = Vec::new();
    for (k, op) in p.ops.iter().enumerate() {
        let vector = |o| -> T {
            let t = match p.resolve(k, o) {
                Resolved::Param(i) => params[i].clone(),
                Resolved::Input(i) => inputs[i].clone(),
                Resolved::Out(j) => outs[j].clone(),
                Resolved::Alien => unreachable!("exact programs use no other tape"),
            };
            let n = t.numel();
            t.reshape([n]).unwrap()
        };
        let matrix = |o| -> T {
            match p.resolve_matrix(o) {
                Resolved::Param(i) => params[i].clone(),
                Resolved::Input(i) => inputs[i].clone(),
                _ => unreachable!("exact programs use no other tape"),
            }
        };
        let [a, b, c] = op.args;
        let one = |t: T| t.reshape([1]).unwrap();
        let y = match OPS[op.kind] {
            "relu" => vector(a).relu(),
            "sigmoid" => vector(a).sigmoid(),
            "tanh" => vector(a).tanh(),
            "exp" => vector(a).exp(),
            "log" => vector(a).log(),
            "scale" => vector(a).mul_scalar(op.c),
            "softmax" => vector(a).softmax(0),
            "sum" => vector(a).sum().map(one),
            "cross_entropy" => vector(a)
                .cross_entropy(&[op.target as i64], CrossEntropyOptions::default())
                .map(one),
            "add" => vector(a).add(&vector(b)),
            "sub" => vector(a).sub(&vector(b)),
            "mul" => vector(a).mul(&vector(b)),
            "dot" => vector(a).matmul(&vector(b)).map(one),
            "mse" => vector(a).mse_loss(&vector(b), Reduction::Mean).map(one),
            "matvec" => matrix(a).matmul(&vector(b)),
            _ => vector(b).linear(&matrix(a), Some(&vector(c))),
        }
        .unwrap_or_else(|e| panic!("eager {}: {e}", OPS[op.kind]));
        outs.push(y);
    }
    let r = p.root_op().unwrap();
    let root = &outs[r];
    let seed = p.seed.map_or(vec![1.0], |n| p.values(200, n));
    // A root computed from inputs alone has no eager graph (the tape's parameters then
    // receive nothing either).
    if root.is_requires_grad() {
        root.backward_with(
            BackwardOptions::default().gradient(&T::from_vec(&B, seed, [root.numel()]).unwrap()),
        )
        .unwrap();
    }
    let values = outs.iter().map(|t| t.to_vec().unwrap()).collect();
    let grads = params
        .iter()
        .map(|t| match t.grad() {
            Some(g) => g.to_vec().unwrap(),
            None => vec![0.0; t.numel()],
        })
        .collect();
    (values, grads)
}

/// How many times each parameter and output is an operand (the accumulation-order limit
/// applies above two).
fn max_uses(p: &TapeProgram) -> usize {
    let mut uses = std::collections::HashMap::new();
    for (k, op) in p.ops.iter().enumerate() {
        let n = match op.kind {
            0..=8 => 1,
            9..=14 => 2,
            _ => 3,
        };
        for (i, &o) in op.args.iter().enumerate().take(n) {
            let r = if op.kind >= 14 && i == 0 {
                p.resolve_matrix(o)
            } else {
                p.resolve(k, o)
            };
            *uses.entry(format!("{r:?}")).or_insert(0usize) += 1;
        }
    }
    uses.values().copied().max().unwrap_or(0)
}

// ----- the property ---------------------------------------------------------------------

fn check(p: TapeProgram) -> Result<(), TestCaseError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let q = p.clone();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(|| {
            let trace = q.run();
            let eager = std::panic::catch_unwind(|| eager_if_exact(&q));
            (trace, eager)
        });
        let _ = tx.send(r);
    });
    // A program takes milliseconds (seconds under Miri).
    let limit = Duration::from_secs(if cfg!(miri) { 600 } else { 20 });
    let (t, eager) = match rx.recv_timeout(limit) {
        Ok(Ok(r)) => r,
        Ok(Err(_)) => return Err(TestCaseError::fail(format!("{p:?}: panicked"))),
        Err(_) => return Err(TestCaseError::fail(format!("{p:?}: did not finish"))),
    };
    let want = predict(&p);
    let got = Prediction {
        statuses: t.statuses.clone(),
        succeeded: want.succeeded.clone(),
        recorded: t.recorded.clone(),
        backward: t.backward,
        valid: t.valid.clone(),
        used: t.used,
        exact: want.exact,
    };
    prop_assert_eq!(&got, &want, "{:?}", p);
    prop_assert_eq!(t.peak, t.used, "nothing is released during a program");
    prop_assert_eq!(t.capacity, ARENAS[p.arena] / ALIGN * ALIGN);
    for (i, s) in p.params.iter().enumerate() {
        prop_assert_eq!(
            bits(&t.params_after[i]),
            bits(&p.values(i as u64, s.buffer))
        );
    }
    for (k, ok) in want.succeeded.iter().enumerate() {
        if !ok {
            prop_assert!(
                t.outputs[k]
                    .iter()
                    .all(|v| v.to_bits() == TapeProgram::SENTINEL),
                "operation {k} failed but wrote its output: {:?}",
                t.outputs[k]
            );
        }
    }
    match eager {
        Err(_) => {
            return Err(TestCaseError::fail(format!(
                "{p:?}: the eager run panicked"
            )))
        }
        Ok(None) => {}
        Ok(Some((values, grads))) => {
            for (k, v) in values.iter().enumerate() {
                prop_assert_eq!(
                    bits(&t.outputs[k][..v.len()]),
                    bits(v),
                    "output {} of {:?}",
                    k,
                    p
                );
            }
            // A parameter gradient starts from +0 where the eager engine copies the first
            // contribution (docs/tape.md, "Backward"): `+0 ⊕ c` is `c` except that −0
            // becomes +0 and a NaN (from a seed with a NaN payload) the canonical NaN.
            let z = |v: &[f32]| -> Vec<u32> {
                v.iter()
                    .map(|&x| (0.0f32 + x).to_bits())
                    .map(|b| {
                        if f32::from_bits(b).is_nan() {
                            0x7FC0_0000
                        } else {
                            b
                        }
                    })
                    .collect()
            };
            for (i, g) in grads.iter().enumerate() {
                if want.valid.0[i] {
                    prop_assert_eq!(z(&t.param_grads[i]), z(g), "gradient of parameter {}", i);
                }
            }
        }
    }
    Ok(())
}

/// The eager results when the program is one the eager engine computes the same way: every
/// operation succeeded with exact lengths and recorded, backward ran, and no gradient
/// takes more than two contributions.
fn eager_if_exact(p: &TapeProgram) -> Option<Eager> {
    // Under Miri the tape is what is checked (the eager engine is safe code, and
    // `tests/exact.rs` compares the two there).
    if cfg!(miri) {
        return None;
    }
    let want = predict(p);
    let all = want.succeeded.iter().all(|&s| s) && want.recorded.iter().all(|&r| r);
    (want.exact && all && want.backward == Some(true) && max_uses(p) <= 2).then(|| eager(p))
}

/// Bytes that decode to programs, biased towards small numbers (valid lengths).
fn program_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop_oneof![4 => 0u8..16, 1 => any::<u8>()], 0..160)
}

/// A program whose operations all fit: vectors of one length `L`, `L × L` matrix
/// parameters, reductions into one-element outputs, every operator registered in a large
/// arena; then, for some, one thing changed (an operand of another tape, a length, a
/// registration, the arena, the recording, the seed).
fn consistent_program() -> impl Strategy<Value = TapeProgram> {
    (
        1usize..=4,
        prop::collection::vec(0u8..4, 1..=3),
        0usize..=2,
        prop::collection::vec((0..OPS.len(), any::<[u8; 3]>(), -2.0f32..2.0), 1..=8),
        any::<u8>(),
        any::<u64>(),
        prop::bool::weighted(0.2),
        prop_oneof![3 => Just(None), 1 => (0u8..8, any::<u8>()).prop_map(Some)],
    )
        .prop_map(|(l, pk, ni, ops, root, values_seed, bits, change)| {
            use programs::{OpSpec, Operand};
            // Parameter 0 is a vector, the others a vector, a matrix or a vector with the
            // caller's gradient.
            let params: Vec<ViewSpec> = pk
                .iter()
                .enumerate()
                .map(|(i, &k)| match (i, k) {
                    (0, _) | (_, 0) => ViewSpec {
                        buffer: l,
                        make: Make::Whole,
                    },
                    (_, 1) => ViewSpec {
                        buffer: l,
                        make: Make::WithGrad(l),
                    },
                    _ => ViewSpec {
                        buffer: l * l,
                        make: Make::Matrix(l, l),
                    },
                })
                .collect();
            let vec_params: Vec<usize> = (0..params.len())
                .filter(|&i| params[i].matrix().is_none())
                .collect();
            let has_matrix = vec_params.len() < params.len();
            let inputs = vec![
                ViewSpec {
                    buffer: l,
                    make: Make::Whole
                };
                ni
            ];
            let (mut outputs, mut specs, mut vec_outs) = (Vec::new(), Vec::new(), Vec::new());
            for (k, (kind, picks, c)) in ops.into_iter().enumerate() {
                let kind = if kind >= 14 && !has_matrix {
                    kind % 14
                } else {
                    kind
                };
                // A vector operand: a vector parameter, an input or an earlier vector output.
                let pick = |b: u8| -> Operand {
                    let n = vec_params.len() + ni + vec_outs.len();
                    let i = usize::from(b) % n;
                    if i < vec_params.len() {
                        Operand::Param(vec_params[i])
                    } else if i < vec_params.len() + ni {
                        Operand::Input(i - vec_params.len())
                    } else {
                        Operand::Out(vec_outs[i - vec_params.len() - ni])
                    }
                };
                let args = if kind >= 14 {
                    [Operand::Param(0), pick(picks[1]), pick(picks[2])]
                } else {
                    [pick(picks[0]), pick(picks[1]), pick(picks[2])]
                };
                let reduces = (7..=8).contains(&kind) || (12..=13).contains(&kind);
                outputs.push(ViewSpec {
                    buffer: if reduces { 1 } else { l },
                    make: Make::Whole,
                });
                if !reduces {
                    vec_outs.push(k);
                }
                specs.push(OpSpec {
                    kind,
                    args,
                    c,
                    target: usize::from(picks[0]) % l,
                });
            }
            let root = usize::from(root) % specs.len();
            let mut p = TapeProgram {
                arena: 2,
                slots: 16,
                register: (0..16).collect(),
                begin: root % 2 == 0,
                seed: Some(outputs[root].buffer),
                params,
                inputs,
                outputs,
                ops: specs,
                recording_off_from: usize::MAX,
                root,
                values_seed,
                bits,
            };
            if let Some((what, at)) = change {
                let k = usize::from(at) % p.ops.len();
                match what {
                    0 => p.ops[k].args[usize::from(at) % 3] = Operand::Alien,
                    1 => p.outputs[k].buffer += 1,
                    2 => p.register.retain(|&r| r != p.ops[k].kind),
                    3 => p.arena = usize::from(at) % 2,
                    4 => p.recording_off_from = k,
                    5 => p.seed = Some(usize::from(at) % 3),
                    6 => p.slots = 4,
                    _ => p.outputs[k].make = Make::WithGrad(usize::from(at) % 4),
                }
            }
            p
        })
}

/// `n` times the `EXACTGRAD_FUZZ_SCALE` environment variable (default 1); under Miri a
/// few cases, each checked for undefined behaviour.
fn cases(n: u32) -> u32 {
    if cfg!(miri) {
        return 4;
    }
    let scale = std::env::var("EXACTGRAD_FUZZ_SCALE")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(1)
        .max(1);
    n.saturating_mul(scale)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(3000),
        failure_persistence: None,
        max_shrink_iters: 256,
        ..ProptestConfig::default()
    })]

    #[test]
    fn tape_programs_from_bytes(bytes in program_bytes()) {
        check(TapeProgram::decode(&bytes))?;
    }

    #[test]
    fn consistent_tape_programs(p in consistent_program()) {
        check(p)?;
    }
}

/// The programs reach every operator, every status, and exact programs compared with
/// the eager engine (so that the property above tests them).
#[test]
#[cfg_attr(
    miri,
    ignore = "3000 programs and their models take minutes under Miri"
)]
fn programs_reach_every_outcome() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let mut statuses = std::collections::BTreeSet::new();
    let mut kinds = std::collections::BTreeSet::new();
    let (mut compared, mut backward) = (0, 0);
    for i in 0..3000 {
        let p = if i % 2 == 0 {
            TapeProgram::decode(&program_bytes().new_tree(&mut runner).unwrap().current())
        } else {
            consistent_program()
                .new_tree(&mut runner)
                .unwrap()
                .current()
        };
        let want = predict(&p);
        statuses.extend(want.statuses.iter().map(|s| s.name()));
        for (op, ok) in p.ops.iter().zip(&want.succeeded) {
            if *ok {
                kinds.insert(op.kind);
            }
        }
        backward += usize::from(want.backward == Some(true));
        compared += usize::from(eager_if_exact(&p).is_some());
    }
    assert_eq!(statuses.len(), 6, "{statuses:?}");
    assert_eq!(kinds.len(), 16, "{kinds:?}");
    assert!(backward > 100 && compared > 100, "{backward} {compared}");
}
