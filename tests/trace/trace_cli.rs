//! The `exactgrad` command: `trace diff` exits 0 for identical runs and 1 otherwise (what
//! CI scripts assert), 2 on errors; `trace show` and `trace replay` print what they read.

use super::*;
use std::process::Command;

fn exactgrad(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_exactgrad"))
        .args(args)
        .output()
        .expect("the exactgrad binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn trace_diff_exits_0_when_identical_1_when_not_2_on_errors() -> exactgrad::Result<()> {
    let run = Run::new(Arch::Mlp);
    let (a, b, c) = (
        temp("cli-a.trace"),
        temp("cli-b.trace"),
        temp("cli-c.trace"),
    );
    train(&ScalarRefBackend, &run, &a)?;
    train(&ExactBackend::new(), &run, &b)?;
    train(
        &ScalarRefBackend,
        &Run {
            lr_from_5: Some(0.5),
            ..run.clone()
        },
        &c,
    )?;
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let (code, out, _) = exactgrad(&["trace", "diff", &s(&a), &s(&b)]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("identical: 6 steps"), "{out}");
    let (code, out, _) = exactgrad(&["trace", "diff", &s(&a), &s(&c)]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("root cause: step 5, optimizer `sgd`"), "{out}");
    assert!(out.contains("lr DIFFERS"), "{out}");
    let (code, _, err) = exactgrad(&["trace", "diff", &s(&a), "/no/such/file.trace"]);
    assert_eq!(code, 2);
    assert!(err.contains("/no/such/file.trace"), "{err}");
    let (code, _, err) = exactgrad(&["trace", "frobnicate"]);
    assert_eq!(code, 2);
    assert!(err.contains("usage"), "{err}");
    let (code, out, _) = exactgrad(&["--help"]);
    assert_eq!(code, 0);
    assert!(out.contains("trace diff RUN_A RUN_B"), "{out}");
    // A directory is a run of rank files; a comma list too.
    let dir = temp("cli-run");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&a, dir.join("rank0.trace")).unwrap();
    let (code, out, _) = exactgrad(&["trace", "diff", &s(&dir), &format!("{},", s(&b))]);
    assert_eq!(code, 0, "{out}");
    Ok(())
}

#[test]
fn trace_show_lists_steps_and_a_steps_records() -> exactgrad::Result<()> {
    let a = temp("show.trace");
    train(&ScalarRefBackend, &Run::new(Arch::ConvNet), &a)?;
    let s = a.to_string_lossy().into_owned();
    let (code, out, _) = exactgrad(&["trace", "show", &s]);
    assert_eq!(code, 0);
    assert!(out.contains("level          ops"), "{out}");
    assert!(out.contains("step      6:"), "{out}");
    let (code, out, _) = exactgrad(&["trace", "show", &s, "--step", "2"]);
    assert_eq!(code, 0);
    let conv = out
        .lines()
        .find(|l| l.contains("conv2d"))
        .unwrap_or_else(|| panic!("no conv2d record: {out}"));
    assert!(conv.starts_with("2:") && conv.contains("forward"), "{conv}");
    let (code, _, err) = exactgrad(&["trace", "show", &s, "--step", "two"]);
    assert_eq!(code, 2, "{err}");
    Ok(())
}

#[test]
fn trace_replay_prints_each_references_verdict() -> exactgrad::Result<()> {
    let run = Run {
        capture: vec![RecordId::parse("2:1").unwrap()],
        ..Run::new(Arch::Mlp)
    };
    let a = temp("replay-cli.trace");
    train(&ExactBackend::new(), &run, &a)?;
    let mut capture = a.clone().into_os_string();
    capture.push(".capture");
    let capture = capture.to_string_lossy().into_owned();
    let (code, out, err) = exactgrad(&["trace", "replay", &capture]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("record 2:1"), "{out}");
    assert!(
        out.contains("ScalarRefBackend      the captured bits"),
        "{out}"
    );
    assert!(
        out.contains("=> ScalarRefBackend gives the captured bits"),
        "{out}"
    );
    let (code, _, err) = exactgrad(&["trace", "replay", &capture, "9:9"]);
    assert_eq!(code, 2);
    assert!(err.contains("not captured"), "{err}");
    Ok(())
}
