//! Operation traces: record a run, diff two runs, capture and replay the operation where
//! they parted (`docs/debugging.md` walks through it).
//!
//! The recording is [`exactgrad_autograd::trace`] (re-exported here) with what the module
//! tree adds ([`TraceModel`], [`module_scope`]); the command `exactgrad trace` (this
//! package's binary) diffs, shows and replays traces.
//!
//! ```
//! use exactgrad::prelude::*;
//! use exactgrad::trace::{TraceConfig, TraceLevel, TraceModel};
//!
//! fn run(lr: f64, path: &std::path::Path) -> exactgrad::Result<()> {
//!     let b = ScalarRefBackend;
//!     let model = Sequential::new()
//!         .push(Linear::new(&b, 4, 8, &mut Philox::new(0))?)
//!         .push(Relu)
//!         .push(Linear::new(&b, 8, 3, &mut Philox::new(1))?);
//!     let mut opt = Sgd::new(model.parameters(), SgdConfig::new(0.1))?;
//!     let trace = TraceConfig::new(path).level(TraceLevel::Ops).model(&model).start()?;
//!     let x = Tensor::randn(&b, [5, 4], 0.0, 1.0, &mut Philox::new(2))?;
//!     for step in 1..=3 {
//!         if step == 2 {
//!             opt.set_lr(lr)?;
//!         }
//!         let loss = model.forward(&x)?.cross_entropy(&[0, 1, 2, 0, 1], CrossEntropyOptions::default())?;
//!         opt.clear_grad();
//!         loss.backward()?;
//!         opt.step()?; // ends the step in the trace
//!     }
//!     trace.finish()?;
//!     Ok(())
//! }
//!
//! # fn main() -> exactgrad::Result<()> {
//! let dir = std::env::temp_dir();
//! let (a, b) = (dir.join(format!("lr-a-{}.trace", std::process::id())), dir.join(format!("lr-b-{}.trace", std::process::id())));
//! run(0.1, &a)?;
//! run(0.05, &b)?;
//! let report = exactgrad::trace::diff::diff(&[&a], &[&b])?;
//! let cause = report.root_cause.as_ref().expect("the runs differ");
//! assert_eq!((cause.records.a.id.step, cause.records.a.kind), (2, exactgrad::trace::Kind::Optimizer));
//! assert_eq!(cause.state[0].0, "lr");
//! # std::fs::remove_file(&a).ok();
//! # std::fs::remove_file(&b).ok();
//! # Ok(())
//! # }
//! ```

pub use exactgrad_autograd::trace::*;
pub use exactgrad_nn::trace::{module_scope, TraceModel};

use exactgrad_autograd::trace::replay::{replay, Verdict};
use exactgrad_backends::{FastScalarRefBackend, ScalarRefBackend};
use std::path::{Path, PathBuf};

/// The files of one run named by `arg`: a trace file; a directory (its `*.trace` files in
/// name order, the ranks of a data-parallel run); or a comma-separated list of files.
///
/// Fails when a directory cannot be read or holds no trace file.
pub fn run_files(arg: &str) -> Result<Vec<PathBuf>, TraceError> {
    let p = Path::new(arg);
    let io = |error| TraceError::Io {
        path: p.to_path_buf(),
        error,
    };
    if p.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(p)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|f| f.extension().is_some_and(|x| x == "trace"))
            .collect();
        files.sort();
        if files.is_empty() {
            return Err(TraceError::Invalid {
                setting: "run",
                message: format!("the directory {arg} holds no .trace file"),
            });
        }
        return Ok(files);
    }
    Ok(arg
        .split(',')
        .filter(|s| !s.is_empty())
        .map(PathBuf::from)
        .collect())
}

/// The replay of one captured record on the two scalar references.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayReport {
    /// The record.
    pub id: RecordId,
    /// Its kind.
    pub kind: Kind,
    /// Its operation.
    pub op: String,
    /// The compute mode of the run that captured it (`exact` or `fast`).
    pub mode: String,
    /// The backend that ran it.
    pub backend: String,
    /// On `ScalarRefBackend`, the oracle of exact mode.
    pub exact: Verdict,
    /// On `FastScalarRefBackend`, the oracle of fast mode.
    pub fast: Verdict,
}

impl ReplayReport {
    /// What the replay says about the captured run's kernel, in words.
    pub fn conclusion(&self) -> String {
        let (own, other, own_name) = if self.mode == "fast" {
            (&self.fast, &self.exact, "FastScalarRefBackend")
        } else {
            (&self.exact, &self.fast, "ScalarRefBackend")
        };
        match own {
            Verdict::Reproduced => format!(
                "{own_name} gives the captured bits: `{}` computed the reference result from these inputs; if two runs part here, the other run's kernel or its inputs differ",
                self.op
            ),
            Verdict::Differs(_) => {
                let hint = if matches!(other, Verdict::Reproduced) {
                    " (its bits are the other mode's: a kernel rounding as the other mode does)"
                } else {
                    ""
                };
                format!(
                    "{own_name} gives other bits from the same inputs: the kernel of `{}` on {} is at fault{hint}",
                    self.op, self.backend
                )
            }
            Verdict::NotReplayable(why) => format!("not replayed: {why}"),
        }
    }
}

fn verdict_or_error(r: exactgrad_autograd::Result<Verdict>) -> Verdict {
    r.unwrap_or_else(|e| Verdict::NotReplayable(format!("the replay failed: {e}")))
}

/// Replays every capture in `path` (or those named by `ids`) on `ScalarRefBackend` and
/// `FastScalarRefBackend`; a backward rule's forward record must be in the file too.
///
/// Fails when the file cannot be read or an id is not in it.
pub fn replay_file(path: &Path, ids: &[RecordId]) -> Result<Vec<ReplayReport>, TraceError> {
    let captures = read_captures(path)?;
    let mut out = Vec::new();
    for id in ids {
        if !captures.iter().any(|c| c.record.id == *id) {
            return Err(TraceError::Invalid {
                setting: "id",
                message: format!("record {id} is not captured in {}", path.display()),
            });
        }
    }
    for c in &captures {
        if !ids.is_empty() && !ids.contains(&c.record.id) {
            continue;
        }
        let forward = c
            .record
            .forward
            .and_then(|f| captures.iter().find(|x| x.record.id == f));
        out.push(ReplayReport {
            id: c.record.id,
            kind: c.record.kind,
            op: c.record.op.clone(),
            mode: c.header.field("mode").unwrap_or("exact").to_string(),
            backend: c.header.field("backend").unwrap_or("?").to_string(),
            exact: verdict_or_error(replay(&ScalarRefBackend, c, forward)),
            fast: verdict_or_error(replay(&FastScalarRefBackend, c, forward)),
        });
    }
    Ok(out)
}
