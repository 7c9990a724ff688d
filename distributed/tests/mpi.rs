//! The distributed tests, each a run of this program under `mpirun`.
//!
//! Without arguments this program is the driver: it starts
//! `mpirun --oversubscribe --allow-run-as-root -np N <this program> --worker SCENARIO`
//! (`MPIRUN` overrides the command) and checks what the ranks print and how they exit:
//!
//! - `train` at 1, 2, 3 and 4 processes: the digits MLP and the reference conv net
//!   (`exactgrad::nn::reference::ConvNet`, on the digits as 1×8×8 images) trained for 8
//!   steps on batches of 45 examples in 8 shards of 5 or 6, with blocked, shuffled and
//!   round-robin shard assignments, in exact mode with a
//!   different backend on every rank (ScalarRef and every ExactBackend path of this CPU,
//!   1 or 2 threads) and in fast mode on FastBackend's best path; every final hash of
//!   parameters and buffers must be equal across world sizes and assignments;
//! - `mismatch_shapes`, `mismatch_shards`: ranks with different parameter shapes or
//!   shard counts are all refused at start with an error naming the difference;
//! - `root_file`: `Comm::run_on_root` writes a file on rank 0 only, and a failure there
//!   reaches every rank as an error;
//! - `bad_input`: zero shards, an assignment naming a missing rank, a batch smaller than
//!   the shard count and a loss that is not one per example are clear errors on every
//!   rank, and the same `DataParallel` trains afterwards;
//! - `panic`, `error`, `error_outside`: a rank that panics or returns an error (inside a
//!   step, or before the others' next collective) ends every rank with a non-zero exit
//!   within seconds.
//!
//! It ends with the line `N passed, M failed`.

use exactgrad::nn::data::{BatchSampler, ClassificationData, Digits};
use exactgrad::nn::reference::{ConvNet, ConvNetConfig};
use exactgrad::nn::{Linear, Module, ModuleExt, Relu, Sequential};
use exactgrad::prelude::*;
use exactgrad_distributed::{run, Assignment, Comm, DataParallel, DdpConfig, Error, Result};
use mpi::datatype::PartitionMut;
use mpi::traits::CommunicatorCollectives;
use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

// ----- the workers ---------------------------------------------------------------------

const STEPS: usize = 8;
/// 45 examples in 8 shards: shards of 5 and 6 examples.
const BATCH: usize = 45;
const SHARDS: usize = 8;

/// Which model a run trains.
#[derive(Clone, Copy, Debug)]
enum Model {
    Mlp,
    Conv,
}

impl Model {
    fn name(self) -> &'static str {
        match self {
            Model::Mlp => "mlp",
            Model::Conv => "conv",
        }
    }
}

/// Every rank's string, on every rank.
fn gather_strings(comm: &Comm, s: &str) -> Vec<String> {
    let world = comm.mpi();
    let mut lens = vec![0i32; comm.size()];
    world.all_gather_into(&(s.len() as i32), &mut lens[..]);
    let displs: Vec<i32> = lens
        .iter()
        .scan(0, |at, &n| {
            let d = *at;
            *at += n;
            Some(d)
        })
        .collect();
    let mut all = vec![0u8; lens.iter().map(|&n| n as usize).sum()];
    world.all_gather_varcount_into(
        s.as_bytes(),
        &mut PartitionMut::new(&mut all[..], &lens[..], &displs[..]),
    );
    (0..comm.size())
        .map(|r| {
            let at = displs[r] as usize;
            String::from_utf8_lossy(&all[at..at + lens[r] as usize]).into_owned()
        })
        .collect()
}

fn mlp<B: Backend>(b: &B, hidden: usize, seed: u64) -> Result<Sequential<B>> {
    let mut rng = Philox::new(seed);
    Ok(Sequential::new()
        .push(Linear::new(b, Digits::FEATURES, hidden, &mut rng)?)
        .push(Relu)
        .push(Linear::new(b, hidden, Digits::CLASSES, &mut rng)?))
}

fn conv_net<B: Backend>(b: &B, seed: u64) -> Result<ConvNet<B>> {
    // The reference sizes (16 and 32 channels, 64 hidden) on 1×8×8 images.
    let config = ConvNetConfig {
        in_channels: 1,
        classes: Digits::CLASSES,
        ..ConvNetConfig::default()
    };
    Ok(ConvNet::new(b, config, &mut Philox::new(seed))?)
}

fn losses_of<B: Backend, M: Module<B> + ?Sized>(
    b: &B,
    model: &M,
    data: &ClassificationData,
    indices: &[usize],
    image: bool,
) -> exactgrad::nn::Result<Tensor<B>> {
    let part = data.subset(indices)?;
    let shape: Vec<usize> = if image {
        vec![indices.len(), 1, 8, 8]
    } else {
        vec![indices.len(), Digits::FEATURES]
    };
    let x = Tensor::from_slice(b, part.features(), shape)?;
    let options = CrossEntropyOptions {
        reduction: Reduction::None,
        ..CrossEntropyOptions::default()
    };
    Ok(model.forward(&x)?.cross_entropy(part.labels(), options)?)
}

/// How a rank fails on purpose.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    None,
    Panic,
    Error,
}

/// Trains `model` for `STEPS` steps; returns the hash of the final parameters and
/// buffers and the step losses. Rank `r` initialises its model from seed `1 + r`, so
/// the result also shows that rank 0's values were broadcast.
fn train<B: Backend>(
    comm: &Comm,
    b: &B,
    kind: Model,
    config: DdpConfig,
    fault: Fault,
) -> Result<(u64, Vec<f32>)> {
    let data = Digits::bundled().split()?.train;
    let seed = 1 + comm.rank() as u64;
    let (model, image): (Box<dyn Module<B>>, bool) = match kind {
        Model::Mlp => (Box::new(mlp(b, 32, seed)?), false),
        Model::Conv => (Box::new(conv_net(b, seed)?), true),
    };
    let mut ddp = DataParallel::new(comm, &model, config)?;
    let state = |m: &dyn Module<B>| {
        let mut t = m.parameters();
        t.extend(m.named_buffers().into_iter().map(|(_, t)| t));
        hash_tensors(&t.iter().collect::<Vec<_>>())
    };
    let start_hash = state(&*model)?;
    let mut opt = Adam::new(model.parameters(), AdamConfig::new(1e-2))?;
    let batches = BatchSampler::new(data.len(), BATCH)?
        .shuffle(3)
        .batches(0)?;
    let faulty = comm.rank() + 1 == comm.size();
    let mut losses = Vec::new();
    for (step, batch) in batches.iter().take(STEPS).enumerate() {
        let report = ddp.step(batch.len(), |shard| -> Result<Tensor<B>> {
            if faulty && step == 1 {
                match fault {
                    Fault::Panic => panic!("injected panic in shard {}", shard.index),
                    Fault::Error => {
                        return Err(Error::InvalidArgument {
                            op: "test",
                            arg: "shard",
                            message: format!("injected error in shard {}", shard.index),
                        })
                    }
                    Fault::None => {}
                }
            }
            Ok(losses_of(
                b,
                &*model,
                &data,
                &batch[shard.range.clone()],
                image,
            )?)
        })?;
        opt.step()?;
        losses.push(report.loss);
    }
    let end_hash = state(&*model)?;
    if end_hash == start_hash {
        return Err(Error::Mpi("training did not change the parameters".into()));
    }
    if losses.last() >= losses.first() {
        return Err(Error::Mpi(format!("the loss did not decrease: {losses:?}")));
    }
    Ok((end_hash, losses))
}

/// The exact-mode backends of this CPU: ScalarRef, then every supported ExactBackend
/// path.
fn exact_choices() -> Vec<Option<Isa>> {
    let mut v = vec![None];
    v.extend(
        Isa::ALL
            .into_iter()
            .filter(|i| i.is_supported(ComputeMode::Exact))
            .map(Some),
    );
    v
}

/// Trains on this rank's exact backend: rank `r` of `P` takes choice `(r + P − 1) mod
/// k`, with 1 thread on even and 2 threads on odd ranks.
fn train_exact(comm: &Comm, kind: Model, config: DdpConfig) -> Result<(u64, Vec<f32>, String)> {
    let choices = exact_choices();
    let (r, p) = (comm.rank(), comm.size());
    let threads = 1 + r % 2;
    match choices[(r + p - 1) % choices.len()] {
        None => {
            let b = ScalarRefBackend;
            let (h, l) = train(comm, &b, kind, config, Fault::None)?;
            Ok((h, l, b.name()))
        }
        Some(isa) => {
            let b = ExactBackend::with_isa(isa, threads).map_err(|e| Error::Mpi(e.to_string()))?;
            let (h, l) = train(comm, &b, kind, config, Fault::None)?;
            Ok((h, l, b.name()))
        }
    }
}

fn assignments(p: usize) -> Vec<(&'static str, Assignment)> {
    vec![
        ("blocked", Assignment::Blocked),
        ("shuffled", Assignment::Shuffled { seed: 11 }),
        (
            "round-robin",
            Assignment::Explicit((0..SHARDS).map(|s| s % p).collect()),
        ),
    ]
}

fn worker_train(comm: &Comm) -> Result<()> {
    let p = comm.size();
    for kind in [Model::Mlp, Model::Conv] {
        for (label, assignment) in assignments(p) {
            let config = DdpConfig::new(SHARDS).with_assignment(assignment);
            let (hash, losses, backend) = train_exact(comm, kind, config)?;
            report(comm, kind, "exact", label, hash, &losses, &backend)?;
        }
        for (label, assignment) in assignments(p).into_iter().take(2) {
            let b = FastBackend::with_isa(Isa::best(ComputeMode::Fast), 1)
                .map_err(|e| Error::Mpi(e.to_string()))?;
            let config = DdpConfig::new(SHARDS).with_assignment(assignment);
            let (hash, losses) = train(comm, &b, kind, config, Fault::None)?;
            report(comm, kind, "fast", label, hash, &losses, &b.name())?;
        }
    }
    // Three shards: at 4 processes one rank has none.
    let (hash, losses, backend) = train_exact(comm, Model::Mlp, DdpConfig::new(3))?;
    report(
        comm,
        Model::Mlp,
        "exact-3-shards",
        "blocked",
        hash,
        &losses,
        &backend,
    )?;
    Ok(())
}

/// Checks that every rank ended with the same hash and prints the result on rank 0.
fn report(
    comm: &Comm,
    kind: Model,
    mode: &str,
    assignment: &str,
    hash: u64,
    losses: &[f32],
    backend: &str,
) -> Result<()> {
    let hashes = gather_strings(comm, &format!("{hash:#018x}"));
    let backends = gather_strings(comm, backend);
    if hashes.iter().any(|h| *h != hashes[0]) {
        return Err(Error::Mpi(format!(
            "{} {mode} {assignment}: the ranks' hashes differ: {hashes:?}",
            kind.name()
        )));
    }
    if comm.is_root() {
        println!(
            "RESULT {} {mode} {assignment} {} losses {:?} backends {}",
            kind.name(),
            hashes[0],
            losses,
            backends.join(",")
        );
    }
    Ok(())
}

/// Every rank's `DataParallel::new` must fail with `Inconsistent`; prints the message.
fn expect_refusal<B: Backend, M: Module<B>>(
    comm: &Comm,
    model: &M,
    config: DdpConfig,
) -> Result<()> {
    match DataParallel::new(comm, model, config) {
        Ok(_) => Err(Error::Mpi("inconsistent ranks were accepted".into())),
        Err(e @ Error::Inconsistent { .. }) => {
            println!("REFUSED rank {}: {e}", comm.rank());
            Ok(())
        }
        Err(e) => Err(Error::Mpi(format!("unexpected error: {e}"))),
    }
}

fn worker_root_file(comm: &Comm, path: &str) -> Result<()> {
    let text = format!("written by rank {} of {}", comm.rank(), comm.size());
    let log = format!("{path}.log");
    let wrote = comm.run_on_root(|| {
        use std::io::Write;
        // Every run of the closure leaves a line in the log.
        let mut l = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&log)?;
        writeln!(l, "closure ran on rank {}", comm.rank())?;
        // create_new: a second writer would fail.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(path)?;
        f.write_all(text.as_bytes())
    })?;
    if wrote.is_some() != comm.is_root() {
        return Err(Error::Mpi(
            "run_on_root's value reached a non-root rank".into(),
        ));
    }
    let content = std::fs::read_to_string(path).map_err(|e| Error::Mpi(e.to_string()))?;
    let runs = std::fs::read_to_string(&log).map_err(|e| Error::Mpi(e.to_string()))?;
    if runs != "closure ran on rank 0\n" {
        return Err(Error::Mpi(format!(
            "the closure ran elsewhere than rank 0: {runs:?}"
        )));
    }
    println!("FILE rank {}: {content}", comm.rank());
    // A failing write on rank 0 is an error on every rank.
    let missing = format!("{path}.missing-dir/checkpoint");
    match comm.run_on_root(|| std::fs::write(&missing, b"x")) {
        Err(e @ Error::Root { .. }) => println!("ROOT-ERROR rank {}: {e}", comm.rank()),
        other => return Err(Error::Mpi(format!("expected Error::Root, got {other:?}"))),
    }
    Ok(())
}

/// Invalid arguments give a clear error on every rank (and no rank waits for another).
fn worker_bad_input(comm: &Comm) -> Result<()> {
    let b = ScalarRefBackend;
    let model = mlp(&b, 8, 1)?;
    let mut errors = Vec::new();
    errors.push(DataParallel::new(comm, &model, DdpConfig::new(0)).map(|_| ()));
    let beyond = Assignment::Explicit(vec![comm.size(); 2]);
    errors.push(
        DataParallel::new(comm, &model, DdpConfig::new(2).with_assignment(beyond)).map(|_| ()),
    );
    let data = Digits::bundled().split()?.train;
    let mut ddp = DataParallel::new(comm, &model, DdpConfig::new(4))?;
    let losses = |indices: &[usize]| losses_of(&b, &model, &data, indices, false);
    errors.push(ddp.step(3, |s| losses(&[s.index])).map(|_| ()));
    errors.push(
        ddp.step(8, |s| -> Result<Tensor<ScalarRefBackend>> {
            let per_example = losses(&(s.range.start..s.range.end).collect::<Vec<_>>())?;
            Ok(per_example.mean()?.reshape([1])?)
        })
        .map(|_| ()),
    );
    for e in errors {
        match e {
            Ok(()) => return Err(Error::Mpi("an invalid argument was accepted".into())),
            Err(e) => println!("BAD-INPUT rank {}: {e}", comm.rank()),
        }
    }
    // The same object still trains afterwards.
    ddp.step(8, |s| {
        losses(&(s.range.start..s.range.end).collect::<Vec<_>>())
    })?;
    Ok(())
}

/// Trains the conv net for 3 steps on this rank's exact backend (every rank another path
/// or thread count), traced at the operations level into `DIR/rank{R}.trace`; with
/// `change` = `lr`, the learning rate is halved before step 2.
fn worker_trace(comm: &Comm, dir: &str, change: &str) -> Result<()> {
    let choices = exact_choices();
    let (r, p) = (comm.rank(), comm.size());
    match choices[(r + p - 1) % choices.len()] {
        None => trace_run(comm, &ScalarRefBackend, dir, change),
        Some(isa) => {
            let b =
                ExactBackend::with_isa(isa, 1 + r % 2).map_err(|e| Error::Mpi(e.to_string()))?;
            trace_run(comm, &b, dir, change)
        }
    }
}

fn trace_run<B: Backend>(comm: &Comm, b: &B, dir: &str, change: &str) -> Result<()> {
    use exactgrad::trace::{TraceConfig, TraceLevel, TraceModel};
    let data = Digits::bundled().split()?.train;
    let model = conv_net(b, 1)?;
    let mut ddp = DataParallel::new(comm, &model, DdpConfig::new(SHARDS))?;
    let mut opt = Adam::new(model.parameters(), AdamConfig::new(1e-2))?;
    let path = std::path::Path::new(dir).join(format!("rank{}.trace", comm.rank()));
    let trace = TraceConfig::new(path)
        .level(TraceLevel::Ops)
        .rank(comm.rank(), comm.size())
        .model(&model)
        .start()
        .map_err(exactgrad::Error::from)?;
    let batches = BatchSampler::new(data.len(), BATCH)?
        .shuffle(3)
        .batches(0)?;
    for (step, batch) in batches.iter().take(3).enumerate() {
        if step == 1 && change == "lr" {
            opt.set_lr(5e-3)?;
        }
        ddp.step(batch.len(), |shard| -> Result<Tensor<B>> {
            Ok(losses_of(
                b,
                &model,
                &data,
                &batch[shard.range.clone()],
                true,
            )?)
        })?;
        opt.step()?;
    }
    trace.finish().map_err(exactgrad::Error::from)?;
    Ok(())
}

fn worker(args: &[String]) -> Result<()> {
    let scenario = args.first().map(String::as_str).unwrap_or("");
    let arg = args.get(1).cloned().unwrap_or_default();
    run(|comm| -> Result<()> {
        let b = ScalarRefBackend;
        let last = comm.rank() + 1 == comm.size();
        match scenario {
            "train" => worker_train(comm),
            "mismatch_shapes" => {
                let hidden = if last { 16 } else { 32 };
                expect_refusal(comm, &mlp(&b, hidden, 1)?, DdpConfig::new(SHARDS))
            }
            "mismatch_shards" => {
                let shards = if last { 6 } else { SHARDS };
                expect_refusal(comm, &mlp(&b, 32, 1)?, DdpConfig::new(shards))
            }
            "root_file" => worker_root_file(comm, &arg),
            "trace" => worker_trace(comm, &arg, args.get(2).map_or("", String::as_str)),
            "bad_input" => worker_bad_input(comm),
            "panic" => {
                train(comm, &b, Model::Mlp, DdpConfig::new(SHARDS), Fault::Panic).map(|_| ())
            }
            "error" => {
                train(comm, &b, Model::Mlp, DdpConfig::new(SHARDS), Fault::Error).map(|_| ())
            }
            "error_outside" => {
                if last {
                    return Err(Error::Mpi(
                        "injected error before the first collective".into(),
                    ));
                }
                comm.barrier();
                Ok(())
            }
            other => Err(Error::Mpi(format!("unknown scenario `{other}`"))),
        }
    })
}

// ----- the driver ----------------------------------------------------------------------

/// What one `mpirun` did.
struct Outcome {
    success: bool,
    code: Option<i32>,
    stdout: String,
    stderr: String,
    elapsed: Duration,
}

/// Runs `np` copies of this program as workers of `scenario`; kills the whole process
/// group after `limit`.
fn mpirun(np: usize, scenario: &str, extra: &[&str], limit: Duration) -> Outcome {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().expect("the test's own path");
    let launcher = std::env::var("MPIRUN").unwrap_or_else(|_| "mpirun".into());
    let mut cmd = Command::new(&launcher);
    cmd.args([
        "--oversubscribe",
        "--allow-run-as-root",
        "-np",
        &np.to_string(),
    ])
    .arg(&exe)
    .args(["--worker", scenario])
    .args(extra)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .process_group(0);
    let start = Instant::now();
    let child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start `{launcher}` (install openmpi-bin): {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => {
            let out = out.expect("mpirun's output");
            Outcome {
                success: out.status.success(),
                code: out.status.code(),
                stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                elapsed: start.elapsed(),
            }
        }
        Err(_) => {
            let _ = Command::new("kill")
                .args(["-KILL", &format!("-{pid}")])
                .status();
            Outcome {
                success: false,
                code: None,
                stdout: String::new(),
                stderr: format!("no exit within {limit:?}: killed (a hang)"),
                elapsed: start.elapsed(),
            }
        }
    }
}

/// Fails with the outcome's output.
fn explain(o: &Outcome, why: &str) -> String {
    format!(
        "{why}\nexit code {:?} after {:.1} s\n--- stdout\n{}--- stderr\n{}",
        o.code,
        o.elapsed.as_secs_f64(),
        o.stdout,
        o.stderr
    )
}

fn lines_with<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.lines().filter(|l| l.starts_with(prefix)).collect()
}

const LIMIT: Duration = Duration::from_secs(300);

fn check_refusal(np: usize, scenario: &str, wants: &[&str]) -> std::result::Result<(), String> {
    let o = mpirun(np, scenario, &[], LIMIT);
    if !o.success {
        return Err(explain(&o, "the workers failed"));
    }
    let refused = lines_with(&o.stdout, "REFUSED");
    if refused.len() != np {
        return Err(explain(
            &o,
            &format!("{} of {np} ranks refused", refused.len()),
        ));
    }
    for line in &refused {
        for w in wants {
            if !line.contains(w) {
                return Err(explain(&o, &format!("`{line}` does not contain `{w}`")));
            }
        }
    }
    println!("    {}", refused[0]);
    Ok(())
}

/// A failure on one rank must end every rank with a non-zero exit within `FAIL_FAST`.
const FAIL_FAST: Duration = Duration::from_secs(20);

fn check_fault(np: usize, scenario: &str, wants: &[&str]) -> std::result::Result<(), String> {
    let o = mpirun(np, scenario, &[], Duration::from_secs(120));
    if o.success || o.code.is_none() {
        return Err(explain(&o, "expected every rank to exit with an error"));
    }
    if o.elapsed > FAIL_FAST {
        return Err(explain(&o, &format!("took longer than {FAIL_FAST:?}")));
    }
    let all = format!("{}{}", o.stdout, o.stderr);
    for w in wants {
        if !all.contains(w) {
            return Err(explain(&o, &format!("the output lacks `{w}`")));
        }
    }
    println!(
        "    mpirun exit code {:?} after {:.2} s",
        o.code,
        o.elapsed.as_secs_f64()
    );
    Ok(())
}

/// One training result: world size, assignment, final hash; keyed by (model, mode).
type Run = (usize, String, String);

fn driver() -> usize {
    let mut passed = 0;
    let mut failed = Vec::new();
    let mut test = |name: &str, f: &mut dyn FnMut() -> std::result::Result<(), String>| {
        let start = Instant::now();
        let r = f();
        let secs = start.elapsed().as_secs_f64();
        match r {
            Ok(()) => {
                println!("test {name} ... ok ({secs:.1} s)");
                passed += 1;
            }
            Err(e) => {
                println!("test {name} ... FAILED ({secs:.1} s)\n{e}");
                failed.push(name.to_string());
            }
        }
    };

    let mut results: BTreeMap<(String, String), Vec<Run>> = BTreeMap::new();
    for np in 1..=4 {
        test(&format!("train_world_size_{np}"), &mut || {
            let o = mpirun(np, "train", &[], LIMIT);
            if !o.success {
                return Err(explain(&o, "training failed"));
            }
            let lines = lines_with(&o.stdout, "RESULT");
            if lines.len() != 11 {
                return Err(explain(
                    &o,
                    &format!("{} RESULT lines, 11 expected", lines.len()),
                ));
            }
            for l in lines {
                let f: Vec<&str> = l.split_whitespace().collect();
                results
                    .entry((f[1].to_string(), f[2].to_string()))
                    .or_default()
                    .push((np, f[3].to_string(), f[4].to_string()));
                if np == 4 || np == 1 {
                    println!("    {l}");
                }
            }
            Ok(())
        });
    }
    test("same_hash_for_every_world_size_and_assignment", &mut || {
        if results.len() != 5 {
            return Err(format!(
                "results for {} model/mode pairs, 5 expected",
                results.len()
            ));
        }
        for ((model, mode), runs) in &results {
            let want = match mode.as_str() {
                "exact" => 4 * 3,
                "fast" => 4 * 2,
                _ => 4,
            };
            if runs.len() != want {
                return Err(format!(
                    "{model} {mode}: {} runs, {want} expected",
                    runs.len()
                ));
            }
            let first = &runs[0].2;
            if let Some(r) = runs.iter().find(|r| r.2 != *first) {
                return Err(format!(
                    "{model} {mode}: world size {} ({}) ended with {} but world size {} ({}) with {first}\nall: {runs:?}",
                    r.0, r.1, r.2, runs[0].0, runs[0].1
                ));
            }
            println!("    {model} {mode}: {first} in all {} runs", runs.len());
        }
        Ok(())
    });
    for np in [2, 3] {
        test(
            &format!("refuses_different_parameter_shapes_np{np}"),
            &mut || {
                check_refusal(
                    np,
                    "mismatch_shapes",
                    &[
                        "configurations differ",
                        "parameter `0.weight` of shape [32, 64]",
                        "[16, 64]",
                    ],
                )
            },
        );
    }
    test("refuses_different_shard_counts_np2", &mut || {
        check_refusal(
            2,
            "mismatch_shards",
            &["rank 0 has shards 8, rank 1 has shards 6"],
        )
    });
    test(
        "run_on_root_writes_once_and_reports_failure_np3",
        &mut || {
            let dir = std::env::temp_dir().join(format!("exactgrad-ddp-{}", std::process::id()));
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let path = dir.join("checkpoint.txt");
            let _ = std::fs::remove_file(&path);
            let o = mpirun(3, "root_file", &[path.to_str().expect("utf-8 path")], LIMIT);
            let _ = std::fs::remove_dir_all(&dir);
            if !o.success {
                return Err(explain(&o, "the workers failed"));
            }
            let files = lines_with(&o.stdout, "FILE");
            if files.len() != 3
                || files
                    .iter()
                    .any(|l| !l.ends_with(": written by rank 0 of 3"))
            {
                return Err(explain(&o, "every rank must read the file rank 0 wrote"));
            }
            let errors = lines_with(&o.stdout, "ROOT-ERROR");
            if errors.len() != 3
                || errors
                    .iter()
                    .any(|l| !l.contains("rank 0 failed in run_on_root"))
            {
                return Err(explain(&o, "every rank must get rank 0's error"));
            }
            println!("    {}", errors[0]);
            Ok(())
        },
    );
    test("bad_input_is_a_clear_error_on_every_rank_np2", &mut || {
        let o = mpirun(2, "bad_input", &[], LIMIT);
        if !o.success {
            return Err(explain(&o, "the workers failed"));
        }
        let lines = lines_with(&o.stdout, "BAD-INPUT");
        let wants = [
            "invalid `shards`: must be at least 1",
            "shard 0 is given to rank 2, but there are 2 ranks",
            "a global batch of 3 examples cannot fill 4 shards",
            "returned a loss of shape [1]; expected one loss per example, [2]",
        ];
        for w in wants {
            let n = lines.iter().filter(|l| l.contains(w)).count();
            if n != 2 {
                return Err(explain(&o, &format!("{n} of 2 ranks reported `{w}`")));
            }
        }
        for l in lines.iter().filter(|l| l.starts_with("BAD-INPUT rank 0")) {
            println!("    {l}");
        }
        Ok(())
    });
    // Traces: one per rank, merged by the diff into a sequence that does not depend on the
    // number of processes (docs/debugging.md).
    let dir = |name: &str| {
        let d =
            std::env::temp_dir().join(format!("exactgrad-ddp-trace-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).expect("a temporary directory");
        d
    };
    let (one, three, changed) = (dir("np1"), dir("np3"), dir("np3-lr"));
    let traced = |np: usize,
                  d: &std::path::Path,
                  change: &str|
     -> std::result::Result<Vec<std::path::PathBuf>, String> {
        let o = mpirun(np, "trace", &[&d.to_string_lossy(), change], LIMIT);
        if !o.success {
            return Err(explain(&o, "a traced run failed"));
        }
        exactgrad::trace::run_files(&d.to_string_lossy()).map_err(|e| e.to_string())
    };
    test("trace_at_1_and_3_processes_is_identical", &mut || {
        let a = traced(1, &one, "")?;
        let b = traced(3, &three, "")?;
        if b.len() != 3 {
            return Err(format!("{} trace files for 3 ranks", b.len()));
        }
        let report = exactgrad::trace::diff::diff(&a, &b).map_err(|e| e.to_string())?;
        if !report.identical() || report.steps != 3 {
            return Err(format!("1 and 3 processes differ:\n{report}"));
        }
        if !report.notes.is_empty() {
            return Err(format!("the ranks disagree:\n{report}"));
        }
        Ok(())
    });
    test("trace_names_a_rate_changed_at_step_2_np3", &mut || {
        let a = exactgrad::trace::run_files(&one.to_string_lossy()).map_err(|e| e.to_string())?;
        let b = traced(3, &changed, "lr")?;
        let report = exactgrad::trace::diff::diff(&a, &b).map_err(|e| e.to_string())?;
        let rc = report
            .root_cause
            .as_ref()
            .ok_or_else(|| format!("no root cause:\n{report}"))?;
        let r = &rc.records.a;
        if (r.kind, r.id.step) != (exactgrad::trace::Kind::Optimizer, 2)
            || !rc.state.iter().any(|(k, ..)| k == "lr")
        {
            return Err(format!("another root cause:\n{report}"));
        }
        Ok(())
    });
    test("panic_on_one_rank_ends_all_np3", &mut || {
        check_fault(
            3,
            "panic",
            &["injected panic in shard 6", "aborting every rank"],
        )
    });
    test("error_in_a_step_ends_all_np3", &mut || {
        check_fault(
            3,
            "error",
            &["injected error in shard 6", "aborting every rank"],
        )
    });
    test("error_before_a_collective_ends_all_np2", &mut || {
        check_fault(
            2,
            "error_outside",
            &["injected error before the first collective"],
        )
    });
    println!("{passed} passed, {} failed", failed.len());
    if !failed.is_empty() {
        println!("failed: {}", failed.join(", "));
    }
    failed.len()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--worker") {
        if let Err(e) = worker(&args[1..]) {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
        return;
    }
    // libtest's arguments (filters, --nocapture) are accepted and ignored.
    if driver() > 0 {
        std::process::exit(1);
    }
}
