//! The diff of two traces: where two runs parted (`docs/debugging.md`, "Reading a diff").
//!
//! The two runs' steps are aligned by number, then each step's records by position. Two
//! records in one position have the same **structure** when their kind, operation,
//! module, arguments, state keys and the roles, paths, types and shapes of their inputs
//! and outputs agree; the first position where they do not is the first **structural
//! difference** (the runs did different things from there on, and the records after it
//! in that step are not compared).
//!
//! Among records of the same structure, a record **differs** when one of its outputs'
//! digests, one of its state values, or an input that no traced record produced differs.
//! The **root cause** is
//! the first differing record all of whose inputs matched: everything it read was the
//! same in both runs and still its result was not, so the difference arose there — in its
//! kernel, or in state it read (a learning rate, a random stream's key) that the report
//! shows. When no differing record has matching inputs, the first differing record that
//! read a differing input no traced record produced (an initial parameter, a tensor
//! made outside the traced operations) is reported instead, as such. Every later
//! differing record is a consequence: the report counts them.

use super::file::{ReadError, Step, TraceSteps};
use super::format::{Header, Kind, Record, TensorInfo, Value};
use std::fmt;
use std::path::Path;

/// One output of the root cause that differs, with the size of the difference where
/// both runs kept the values.
#[derive(Clone, Debug, PartialEq)]
pub struct OutputDifference {
    /// The output's role.
    pub name: String,
    /// Its digest in the first run and the second.
    pub digests: (Option<u64>, Option<u64>),
    /// The largest absolute difference, its element and the two values, when both runs
    /// kept the values.
    pub max_abs: Option<(f64, usize, f32, f32)>,
    /// The largest difference in units in the last place (the distance of the two bit
    /// patterns on the ordered line of f32 values), when both runs kept the values.
    pub max_ulp: Option<u64>,
}

/// A record of the first run and its counterpart in the second.
#[derive(Clone, Debug, PartialEq)]
pub struct RecordPair {
    /// The first run's record.
    pub a: Record,
    /// The second run's record.
    pub b: Record,
}

/// Why the root cause is one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CauseKind {
    /// Its outputs differ while every input matched.
    InputsMatched,
    /// It read a differing input that no traced record produced (its role given).
    UntracedInput(String),
}

/// The record where the runs parted.
#[derive(Clone, Debug, PartialEq)]
pub struct RootCause {
    /// The two records.
    pub records: RecordPair,
    /// Why it is the root cause.
    pub kind: CauseKind,
    /// The outputs that differ.
    pub outputs: Vec<OutputDifference>,
    /// The state values that differ: key, first run's, second run's.
    pub state: Vec<(String, Option<Value>, Option<Value>)>,
}

/// The first place where the runs did different things.
#[derive(Clone, Debug, PartialEq)]
pub struct StructuralDifference {
    /// The step.
    pub step: u64,
    /// The position in the step's merged sequence.
    pub position: usize,
    /// The first run's record there (`None` past its last record).
    pub a: Option<Record>,
    /// The second run's record there.
    pub b: Option<Record>,
    /// What differs, in words.
    pub what: String,
}

/// How far the difference spread after the root cause.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spread {
    /// Differing records, the root cause included.
    pub records: u64,
    /// Differing records per kind.
    pub by_kind: Vec<(Kind, u64)>,
    /// Steps with at least one differing record.
    pub steps: u64,
    /// The first step whose optimizer updates wrote differing parameters.
    pub first_parameter_step: Option<u64>,
    /// Whether the last compared step's optimizer updates wrote differing parameters.
    pub parameters_differ_at_end: bool,
}

/// The result of [`diff`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiffReport {
    /// Steps compared (present in both runs).
    pub steps: u64,
    /// Records compared.
    pub records: u64,
    /// Header facts that differ (backend, CPU, threads, …): key, first run's, second
    /// run's. Context, not differences of the computation.
    pub configuration: Vec<(String, Option<String>, Option<String>)>,
    /// Parameters whose values differed when the traces started.
    pub initial_parameters: Vec<String>,
    /// The first structural difference.
    pub structure: Option<StructuralDifference>,
    /// The root cause.
    pub root_cause: Option<RootCause>,
    /// A differing record before the root cause that read a differing input no traced
    /// record produced (reported beside a root cause whose inputs matched).
    pub earlier_untraced: Option<RecordPair>,
    /// How the difference spread.
    pub spread: Spread,
    /// Steps only one run has: the first such step and which run has it.
    pub extra_steps: Option<(u64, &'static str)>,
    /// Steps a crash cut short, and other remarks about the files.
    pub notes: Vec<String>,
}

impl DiffReport {
    /// Whether the two runs are identical: same structure, same digests everywhere, the
    /// same steps.
    pub fn identical(&self) -> bool {
        self.structure.is_none()
            && self.root_cause.is_none()
            && self.spread.records == 0
            && self.extra_steps.is_none()
            && self.initial_parameters.is_empty()
    }
}

/// Whether a record differs: an output's digest, a state value (a rate, a random key, a
/// loss: what decides or reports the result besides the tensors), or an input that no
/// traced record produced (the difference entered there, even if the outputs absorbed
/// it: a gradient whose last bit the update rounds away).
fn outputs_differ(a: &Record, b: &Record) -> bool {
    a.state != b.state
        || a.outputs
            .iter()
            .zip(&b.outputs)
            .any(|(x, y)| x.digest != y.digest)
        || a.inputs
            .iter()
            .zip(&b.inputs)
            .any(|(x, y)| x.from.is_none() && x.digest != y.digest)
}

/// The role of the first input that differs, and whether a traced record produced it.
fn first_differing_input<'a>(a: &'a Record, b: &Record) -> Option<&'a TensorInfo> {
    a.inputs
        .iter()
        .zip(&b.inputs)
        .find(|(x, y)| x.digest != y.digest)
        .map(|(x, _)| x)
}

/// The distance of two f32 bit patterns on the ordered line of values.
pub fn ulp_distance(a: f32, b: f32) -> u64 {
    let key = |x: f32| -> i64 {
        let bits = x.to_bits() as i32;
        i64::from(if bits < 0 { i32::MIN - bits } else { bits })
    };
    (key(a) - key(b)).unsigned_abs()
}

fn output_differences(a: &Record, b: &Record) -> Vec<OutputDifference> {
    a.outputs
        .iter()
        .zip(&b.outputs)
        .filter(|(x, y)| x.digest != y.digest)
        .map(|(x, y)| {
            let (mut max_abs, mut max_ulp) = (None, None);
            if let (Some(va), Some(vb)) = (&x.values, &y.values) {
                if va.len() == vb.len() {
                    let mut best: Option<(f64, usize, f32, f32)> = None;
                    let mut ulp = 0u64;
                    for (i, (&p, &q)) in va.iter().zip(vb).enumerate() {
                        let d = (f64::from(p) - f64::from(q)).abs();
                        let d = if d.is_nan() {
                            if p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()) {
                                0.0
                            } else {
                                f64::INFINITY
                            }
                        } else {
                            d
                        };
                        if best.is_none_or(|b| d > b.0) {
                            best = Some((d, i, p, q));
                        }
                        if !(p.is_nan() && q.is_nan()) {
                            ulp = ulp.max(ulp_distance(p, q));
                        }
                    }
                    max_abs = best;
                    max_ulp = Some(ulp);
                }
            }
            OutputDifference {
                name: x.name.clone(),
                digests: (x.digest, y.digest),
                max_abs,
                max_ulp,
            }
        })
        .collect()
}

fn state_differences(a: &Record, b: &Record) -> Vec<(String, Option<Value>, Option<Value>)> {
    let mut out = Vec::new();
    for (k, v) in &a.state {
        let w = b.state_value(k);
        if w != Some(v) {
            out.push((k.clone(), Some(v.clone()), w.cloned()));
        }
    }
    for (k, w) in &b.state {
        if a.state_value(k).is_none() {
            out.push((k.clone(), None, Some(w.clone())));
        }
    }
    out
}

/// What differs in the structure of two records of one position, in words.
fn describe_structure(a: &Record, b: &Record) -> String {
    if a.kind != b.kind || a.op != b.op {
        return format!(
            "another operation: {} `{}` in the first run, {} `{}` in the second",
            a.kind.name(),
            a.op,
            b.kind.name(),
            b.op
        );
    }
    if a.module != b.module {
        return format!(
            "another module: {:?} in the first run, {:?} in the second",
            a.module, b.module
        );
    }
    if a.attrs != b.attrs {
        let diffs: Vec<String> = a
            .attrs
            .iter()
            .filter(|(k, v)| b.attr(k) != Some(v))
            .map(|(k, v)| match b.attr(k) {
                Some(w) => format!("{k} = {v} vs {w}"),
                None => format!("{k} = {v} vs absent"),
            })
            .chain(
                b.attrs
                    .iter()
                    .filter(|(k, _)| a.attr(k).is_none())
                    .map(|(k, w)| format!("{k} absent vs {w}")),
            )
            .collect();
        return format!("other arguments: {}", diffs.join(", "));
    }
    let side = |list_a: &[TensorInfo], list_b: &[TensorInfo], what: &str| -> Option<String> {
        if list_a.len() != list_b.len() {
            return Some(format!(
                "{} {what}s in the first run, {} in the second",
                list_a.len(),
                list_b.len()
            ));
        }
        list_a
            .iter()
            .zip(list_b)
            .find(|(x, y)| !x.same_structure(y))
            .map(|(x, y)| {
                format!(
                    "{what} `{}`: {} {:?}{} in the first run, `{}`: {} {:?}{} in the second",
                    x.name,
                    x.dtype.name(),
                    x.shape,
                    x.param
                        .as_deref()
                        .map(|p| format!(" ({p})"))
                        .unwrap_or_default(),
                    y.name,
                    y.dtype.name(),
                    y.shape,
                    y.param
                        .as_deref()
                        .map(|p| format!(" ({p})"))
                        .unwrap_or_default(),
                )
            })
    };
    side(&a.inputs, &b.inputs, "input")
        .or_else(|| side(&a.outputs, &b.outputs, "output"))
        .unwrap_or_else(|| "other state keys".to_string())
}

/// Compares two headers: the facts that differ (context) and the initial parameters.
fn compare_headers(a: &[Header], b: &[Header], report: &mut DiffReport) {
    let (Some(ha), Some(hb)) = (a.first(), b.first()) else {
        return;
    };
    let skip = ["started"];
    let mut keys: Vec<&str> = ha.fields.iter().map(|(k, _)| k.as_str()).collect();
    for (k, _) in &hb.fields {
        if !keys.contains(&k.as_str()) {
            keys.push(k);
        }
    }
    for k in keys {
        if skip.contains(&k) {
            continue;
        }
        let (x, y) = (ha.field(k), hb.field(k));
        if x != y {
            report
                .configuration
                .push((k.to_string(), x.map(String::from), y.map(String::from)));
        }
    }
    // Initial parameters: only when both first segments start at the same step.
    if ha.field("first_step") == hb.field("first_step") {
        for p in &ha.params {
            if let Some(q) = hb.params.iter().find(|q| q.name == p.name) {
                if q.shape == p.shape && q.digest != p.digest {
                    report.initial_parameters.push(p.name.clone());
                }
            }
        }
    }
}

/// The parameter set of a header as text lines, for the structural comparison.
fn parameter_set(h: &Header) -> Vec<String> {
    h.params
        .iter()
        .map(|p| format!("{} {} {:?}", p.role, p.name, p.shape))
        .collect()
}

/// Compares two runs' traces, each given as its files (one, or one per rank in rank
/// order); see the [module documentation](self).
pub fn diff<P: AsRef<Path>, Q: AsRef<Path>>(a: &[P], b: &[Q]) -> Result<DiffReport, ReadError> {
    let mut ta = TraceSteps::open(a)?;
    let mut tb = TraceSteps::open(b)?;
    diff_steps(&mut ta, &mut tb)
}

/// [`diff`] over two opened traces.
pub fn diff_steps(ta: &mut TraceSteps, tb: &mut TraceSteps) -> Result<DiffReport, ReadError> {
    let mut report = DiffReport::default();
    compare_headers(ta.headers(), tb.headers(), &mut report);
    report
        .notes
        .extend(ta.notes().iter().map(|n| format!("first run: {n}")));
    report
        .notes
        .extend(tb.notes().iter().map(|n| format!("second run: {n}")));
    if let (Some(ha), Some(hb)) = (ta.headers().first(), tb.headers().first()) {
        let (pa, pb) = (parameter_set(ha), parameter_set(hb));
        if !pa.is_empty() && !pb.is_empty() && pa != pb {
            let i = (0..pa.len().max(pb.len()))
                .find(|&i| pa.get(i) != pb.get(i))
                .unwrap_or(0);
            report.structure = Some(StructuralDifference {
                step: 0,
                position: i,
                a: None,
                b: None,
                what: format!(
                    "the models differ: parameter {} is {} in the first run and {} in the second",
                    i,
                    pa.get(i).map_or("absent", |s| s.as_str()),
                    pb.get(i).map_or("absent", |s| s.as_str())
                ),
            });
        }
    }
    let mut by_kind = [0u64; 6];
    let mut weak: Option<RecordPair> = None;
    let mut sa = ta.next_step()?;
    let mut sb = tb.next_step()?;
    loop {
        let (a, b) = match (sa.take(), sb.take()) {
            (None, None) => break,
            (Some(a), None) => {
                report.extra_steps.get_or_insert((a.step, "first"));
                break;
            }
            (None, Some(b)) => {
                report.extra_steps.get_or_insert((b.step, "second"));
                break;
            }
            (Some(a), Some(b)) if a.step < b.step => {
                report.extra_steps.get_or_insert((a.step, "first"));
                sa = ta.next_step()?;
                sb = Some(b);
                continue;
            }
            (Some(a), Some(b)) if b.step < a.step => {
                report.extra_steps.get_or_insert((b.step, "second"));
                sa = Some(a);
                sb = tb.next_step()?;
                continue;
            }
            (Some(a), Some(b)) => (a, b),
        };
        compare_step(&a, &b, &mut report, &mut by_kind, &mut weak);
        sa = ta.next_step()?;
        sb = tb.next_step()?;
    }
    report.spread.by_kind = Kind::ALL
        .iter()
        .zip(by_kind)
        .filter(|(_, n)| *n > 0)
        .map(|(&k, n)| (k, n))
        .collect();
    if report.root_cause.is_none() {
        if let Some(w) = weak.take() {
            let kind = CauseKind::UntracedInput(
                first_differing_input(&w.a, &w.b)
                    .map(|t| t.name.clone())
                    .unwrap_or_default(),
            );
            report.root_cause = Some(RootCause {
                outputs: output_differences(&w.a, &w.b),
                state: state_differences(&w.a, &w.b),
                records: w,
                kind,
            });
        }
    } else {
        report.earlier_untraced = weak;
    }
    report.notes.extend(
        ta.rank_disagreements()
            .iter()
            .map(|n| format!("first run: ranks disagree: {n}")),
    );
    report.notes.extend(
        tb.rank_disagreements()
            .iter()
            .map(|n| format!("second run: ranks disagree: {n}")),
    );
    Ok(report)
}

fn compare_step(
    a: &Step,
    b: &Step,
    report: &mut DiffReport,
    by_kind: &mut [u64; 6],
    weak: &mut Option<RecordPair>,
) {
    report.steps += 1;
    if !a.complete {
        report
            .notes
            .push(format!("first run: step {} is incomplete", a.step));
    }
    if !b.complete {
        report
            .notes
            .push(format!("second run: step {} is incomplete", b.step));
    }
    let mut step_differs = false;
    let mut params_differ = false;
    let n = a.records.len().max(b.records.len());
    for i in 0..n {
        let (ra, rb) = (a.records.get(i), b.records.get(i));
        let (ra, rb) = match (ra, rb) {
            (Some(ra), Some(rb)) if ra.same_structure(rb) => (ra, rb),
            _ => {
                if report.structure.is_none() {
                    let what = match (ra, rb) {
                        (Some(x), Some(y)) => describe_structure(x, y),
                        (Some(x), None) => format!(
                            "the second run's step ends here; the first has {} more records, from {} `{}`",
                            a.records.len() - i,
                            x.kind.name(),
                            x.op
                        ),
                        (None, Some(y)) => format!(
                            "the first run's step ends here; the second has {} more records, from {} `{}`",
                            b.records.len() - i,
                            y.kind.name(),
                            y.op
                        ),
                        (None, None) => unreachable!("i < the longer length"),
                    };
                    report.structure = Some(StructuralDifference {
                        step: a.step,
                        position: i,
                        a: ra.cloned(),
                        b: rb.cloned(),
                        what,
                    });
                }
                step_differs = true;
                break;
            }
        };
        report.records += 1;
        if !outputs_differ(ra, rb) {
            continue;
        }
        step_differs = true;
        report.spread.records += 1;
        let k = Kind::ALL.iter().position(|&k| k == ra.kind).unwrap_or(0);
        by_kind[k] += 1;
        if ra.kind == Kind::Optimizer
            && ra
                .outputs
                .iter()
                .zip(&rb.outputs)
                .any(|(x, y)| x.param.is_some() && x.digest != y.digest)
        {
            params_differ = true;
        }
        if report.root_cause.is_some() {
            continue;
        }
        match first_differing_input(ra, rb) {
            None => {
                report.root_cause = Some(RootCause {
                    records: RecordPair {
                        a: ra.clone(),
                        b: rb.clone(),
                    },
                    kind: CauseKind::InputsMatched,
                    outputs: output_differences(ra, rb),
                    state: state_differences(ra, rb),
                });
            }
            Some(input) if input.from.is_none() && weak.is_none() => {
                *weak = Some(RecordPair {
                    a: ra.clone(),
                    b: rb.clone(),
                });
            }
            Some(_) => {}
        }
    }
    if step_differs {
        report.spread.steps += 1;
    }
    if params_differ {
        report.spread.first_parameter_step.get_or_insert(a.step);
    }
    report.spread.parameters_differ_at_end = params_differ;
}

// ----- the report in words ---------------------------------------------------------------

fn hex(d: Option<u64>) -> String {
    match d {
        Some(d) => format!("{d:016x}"),
        None => "none".to_string(),
    }
}

fn describe_record(f: &mut fmt::Formatter<'_>, r: &Record) -> fmt::Result {
    writeln!(f, "  record   {} ({} `{}`)", r.id, r.kind.name(), r.op)?;
    if let Some(m) = &r.module {
        writeln!(f, "  module   {m}")?;
    }
    let params = r.params();
    if !params.is_empty() {
        writeln!(f, "  params   {}", params.join(", "))?;
    }
    if let Some(fw) = r.forward {
        writeln!(f, "  forward  record {fw}")?;
    }
    if let Some(o) = r.outputs.first() {
        writeln!(f, "  shape    {:?} {}", o.shape, o.dtype.name())?;
    }
    for (k, v) in &r.attrs {
        writeln!(f, "  arg      {k} = {v}")?;
    }
    Ok(())
}

fn describe_inputs(f: &mut fmt::Formatter<'_>, a: &Record, b: &Record) -> fmt::Result {
    for (x, y) in a.inputs.iter().zip(&b.inputs) {
        let from = x
            .from
            .map(|id| format!("from record {id}"))
            .unwrap_or_else(|| "untraced".to_string());
        let same = if x.digest == y.digest {
            "same".to_string()
        } else {
            format!("DIFFERS: {}", hex(y.digest))
        };
        writeln!(
            f,
            "  input    {:<22} {} {:?} {} ({from}) {same}",
            x.name,
            x.dtype.name(),
            x.shape,
            hex(x.digest)
        )?;
    }
    Ok(())
}

impl fmt::Display for DiffReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.identical() {
            writeln!(
                f,
                "identical: {} steps, {} records, every digest equal",
                self.steps, self.records
            )?;
        } else {
            writeln!(
                f,
                "the runs differ ({} steps, {} records compared)",
                self.steps, self.records
            )?;
        }
        for (k, x, y) in &self.configuration {
            writeln!(
                f,
                "  config   {k}: {} | {}",
                x.as_deref().unwrap_or("-"),
                y.as_deref().unwrap_or("-")
            )?;
        }
        for n in &self.notes {
            writeln!(f, "  note     {n}")?;
        }
        if !self.initial_parameters.is_empty() {
            writeln!(
                f,
                "\nthe initial values of {} parameter(s) differ: {}",
                self.initial_parameters.len(),
                self.initial_parameters.join(", ")
            )?;
        }
        if let Some(rc) = &self.root_cause {
            let (a, b) = (&rc.records.a, &rc.records.b);
            match &rc.kind {
                CauseKind::InputsMatched => writeln!(
                    f,
                    "\nroot cause: step {}, {} `{}` — {} while every input matched",
                    a.id.step,
                    a.kind.name(),
                    a.op,
                    if rc.outputs.is_empty() {
                        "its state differs"
                    } else {
                        "its outputs differ"
                    }
                )?,
                CauseKind::UntracedInput(name) => writeln!(
                    f,
                    "\nfirst difference: step {}, {} `{}` — it read input `{name}`, which differs and which no traced record produced (an initial parameter, a tensor made outside the traced operations, or work below the trace's level)",
                    a.id.step,
                    a.kind.name(),
                    a.op
                )?,
            }
            describe_record(f, a)?;
            describe_inputs(f, a, b)?;
            for (k, x, y) in &rc.state {
                writeln!(
                    f,
                    "  state    {k} DIFFERS: {} | {}",
                    x.as_ref().map_or("-".into(), |v| v.to_string()),
                    y.as_ref().map_or("-".into(), |v| v.to_string())
                )?;
            }
            for o in &rc.outputs {
                write!(
                    f,
                    "  output   {:<22} {} | {}",
                    o.name,
                    hex(o.digests.0),
                    hex(o.digests.1)
                )?;
                if let (Some((d, i, x, y)), Some(u)) = (o.max_abs, o.max_ulp) {
                    write!(
                        f,
                        "; largest difference {d:e} at element {i} ({x:e} vs {y:e}), {u} ulp at most"
                    )?;
                }
                writeln!(f)?;
            }
            if let Some(fw) = a.forward {
                writeln!(
                    f,
                    "  capture  EXACTGRAD_TRACE_CAPTURE={fw},{} (then `exactgrad trace replay FILE.capture`)",
                    a.id
                )?;
            } else if a.kind == Kind::Forward || a.kind == Kind::Optimizer {
                writeln!(
                    f,
                    "  capture  EXACTGRAD_TRACE_CAPTURE={} (then `exactgrad trace replay FILE.capture`)",
                    a.id
                )?;
            }
        }
        if let Some(w) = &self.earlier_untraced {
            writeln!(
                f,
                "\nearlier, record {} ({} `{}`) read an input that differs and that no traced record produced",
                w.a.id,
                w.a.kind.name(),
                w.a.op
            )?;
        }
        if let Some(s) = &self.structure {
            writeln!(
                f,
                "\nstructural difference at step {}, position {}: {}",
                s.step, s.position, s.what
            )?;
            if let Some(a) = &s.a {
                writeln!(
                    f,
                    "  first run:  record {} ({} `{}`)",
                    a.id,
                    a.kind.name(),
                    a.op
                )?;
            }
            if let Some(b) = &s.b {
                writeln!(
                    f,
                    "  second run: record {} ({} `{}`)",
                    b.id,
                    b.kind.name(),
                    b.op
                )?;
            }
        }
        if let Some((step, which)) = self.extra_steps {
            writeln!(
                f,
                "\nonly the {which} run has step {step} (and maybe later ones)"
            )?;
        }
        if self.spread.records > 0 {
            let kinds: Vec<String> = self
                .spread
                .by_kind
                .iter()
                .map(|(k, n)| format!("{n} {}", k.name()))
                .collect();
            writeln!(
                f,
                "\nspread: {} differing records ({}) in {} step(s)",
                self.spread.records,
                kinds.join(", "),
                self.spread.steps
            )?;
            match self.spread.first_parameter_step {
                Some(s) => writeln!(
                    f,
                    "  parameters differ from step {s} on{}",
                    if self.spread.parameters_differ_at_end {
                        ", and at the end"
                    } else {
                        ""
                    }
                )?,
                None => writeln!(f, "  no optimizer update wrote differing parameters")?,
            }
        }
        Ok(())
    }
}
