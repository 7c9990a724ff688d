//! `exactgrad`: the command-line tool of exactgrad (`docs/debugging.md`).
//!
//! ```text
//! exactgrad trace diff RUN_A RUN_B     where two runs parted (exit 0: identical, 1: they differ)
//! exactgrad trace show RUN [--step N]  a trace's header and steps, or one step's records
//! exactgrad trace replay CAPTURE [ID…] replay captured records on the scalar references
//! ```
//!
//! A run is a trace file, a directory of trace files (the ranks of a data-parallel run) or
//! a comma-separated list of them. Exit status 2 is an error (a file that cannot be read,
//! a bad argument).

use exactgrad::trace::replay::Verdict;
use exactgrad::trace::{self, RecordId, TraceSteps};
use std::process::ExitCode;

const USAGE: &str = "\
usage:
  exactgrad trace diff RUN_A RUN_B        where two runs parted: the first record whose
                                          outputs differ while its inputs matched
                                          (exit status 0: identical, 1: they differ)
  exactgrad trace show RUN [--step N]     the header and a line per step, or the records
                                          of step N
  exactgrad trace replay CAPTURE [ID...]  replay captured records (all, or those named) on
                                          ScalarRefBackend and FastScalarRefBackend

RUN is a trace file, a directory of .trace files (one per rank of a data-parallel run),
or a comma-separated list of files. Records are named STEP:INDEX (STEP:sK:INDEX in shard
K, STEP:a:INDEX after the shards). Capture a record by running the program again with
EXACTGRAD_TRACE_CAPTURE=ID[,ID...]; the captures go to TRACE.capture.
Exit status 2: an error.";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("exactgrad: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &[String]) -> Result<ExitCode, String> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        [] | ["-h" | "--help" | "help", ..] | ["trace"] | ["trace", "-h" | "--help"] => {
            println!("{USAGE}");
            Ok(ExitCode::SUCCESS)
        }
        ["--version" | "-V"] => {
            println!("exactgrad {}", env!("CARGO_PKG_VERSION"));
            Ok(ExitCode::SUCCESS)
        }
        ["trace", "diff", a, b] => diff(a, b),
        ["trace", "show", run] => show(run, None),
        ["trace", "show", run, "--step", n] => {
            let n = n
                .parse()
                .map_err(|_| format!("--step takes a step number, not `{n}`"))?;
            show(run, Some(n))
        }
        ["trace", "replay", capture, ids @ ..] => replay(capture, ids),
        _ => Err(format!("unknown arguments `{}`\n{USAGE}", words.join(" "))),
    }
}

fn diff(a: &str, b: &str) -> Result<ExitCode, String> {
    let fa = trace::run_files(a).map_err(|e| e.to_string())?;
    let fb = trace::run_files(b).map_err(|e| e.to_string())?;
    let report = trace::diff::diff(&fa, &fb).map_err(|e| e.to_string())?;
    print!("{report}");
    Ok(if report.identical() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn show(run: &str, step: Option<u64>) -> Result<ExitCode, String> {
    let files = trace::run_files(run).map_err(|e| e.to_string())?;
    let mut steps = TraceSteps::open(&files).map_err(|e| e.to_string())?;
    for (i, h) in steps.headers().iter().enumerate() {
        println!("segment {i}:");
        for (k, v) in &h.fields {
            println!("  {k:<14} {v}");
        }
        println!("  parameters     {}", h.params.len());
    }
    for n in steps.notes() {
        println!("note: {n}");
    }
    let mut total = 0u64;
    while let Some(s) = steps.next_step().map_err(|e| e.to_string())? {
        total += s.records.len() as u64;
        match step {
            None => println!(
                "step {:>6}: {:>7} records{}",
                s.step,
                s.records.len(),
                if s.complete { "" } else { " (incomplete)" }
            ),
            Some(n) if n == s.step => {
                for r in &s.records {
                    let digest = r
                        .outputs
                        .first()
                        .and_then(|o| o.digest)
                        .map(|d| format!("{d:016x}"))
                        .unwrap_or_else(|| "-".into());
                    let shape = r
                        .outputs
                        .first()
                        .map(|o| format!("{:?}", o.shape))
                        .unwrap_or_default();
                    println!(
                        "{:<12} {:<9} {:<28} {:<24} {:<18} {digest}",
                        r.id.to_string(),
                        r.kind.name(),
                        r.op,
                        r.module.as_deref().unwrap_or(""),
                        shape
                    );
                }
            }
            Some(_) => {}
        }
    }
    if step.is_none() {
        println!("{total} records");
    }
    Ok(ExitCode::SUCCESS)
}

fn replay(capture: &str, ids: &[&str]) -> Result<ExitCode, String> {
    let ids: Vec<RecordId> = ids
        .iter()
        .map(|s| RecordId::parse(s).ok_or_else(|| format!("`{s}` is not a record id")))
        .collect::<Result<_, _>>()?;
    let reports =
        trace::replay_file(std::path::Path::new(capture), &ids).map_err(|e| e.to_string())?;
    if reports.is_empty() {
        return Err(format!("{capture} holds no captured record"));
    }
    for r in &reports {
        println!(
            "record {} ({} `{}`), captured in {} mode on {}",
            r.id,
            r.kind.name(),
            r.op,
            r.mode,
            r.backend
        );
        for (name, v) in [
            ("ScalarRefBackend", &r.exact),
            ("FastScalarRefBackend", &r.fast),
        ] {
            match v {
                Verdict::Reproduced => println!("  {name:<21} the captured bits"),
                Verdict::Differs(checks) => {
                    for c in checks.iter().filter(|c| c.differing > 0) {
                        let first = c
                            .first
                            .map(|(i, a, b)| {
                                format!(", first at element {i}: captured {a:e}, replayed {b:e}")
                            })
                            .unwrap_or_default();
                        println!(
                            "  {name:<21} `{}`: {} element(s) differ, {} ulp at most{first}",
                            c.name, c.differing, c.max_ulp
                        );
                    }
                }
                Verdict::NotReplayable(why) => println!("  {name:<21} not replayed: {why}"),
            }
        }
        println!("  => {}", r.conclusion());
    }
    Ok(ExitCode::SUCCESS)
}
