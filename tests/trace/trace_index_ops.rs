//! The records of the integer-data operators (`autograd/src/ops/index.rs`): gather,
//! one_hot and argmax are written like the other operators' records, with their
//! arguments, and a captured gather — forward and backward rule — replays to its bits.

use super::*;
use exactgrad::trace::replay::Verdict;
use exactgrad::trace::Value;

/// One step over gather, one_hot and argmax, traced to `path` at the operation level,
/// capturing `capture`; the step's records.
fn traced_step(path: &Path, capture: &[RecordId]) -> exactgrad::Result<Vec<Record>> {
    let b = ScalarRefBackend;
    let mut config = TraceConfig::new(path).level(TraceLevel::Ops);
    for &id in capture {
        config = config.capture(id);
    }
    let trace = config.start()?;
    let x = Tensor::from_vec(&b, vec![0.5, -1.0, 2.0, 1.5, 0.25, -3.0], [2, 3])?;
    let x = x.requires_grad()?;
    let y = x.gather(1, &(vec![2i64, 0, 1, 1], [2, 2]))?;
    let h = Tensor::one_hot(&b, &[1, 0], 2)?;
    (&y * &h)?.sum()?.backward()?;
    assert_eq!(x.argmax(1, false)?.to_indices()?, [2, 0]);
    exactgrad::trace::end_step();
    trace.finish()?;
    let mut steps = TraceSteps::open(&[path])?;
    Ok(steps.next_step()?.expect("one step").records)
}

#[test]
fn gather_one_hot_and_argmax_are_recorded_and_gather_replays() -> exactgrad::Result<()> {
    let records = traced_step(&temp("index-ops.trace"), &[])?;
    let find = |kind: Kind, op: &str| {
        records
            .iter()
            .find(|r| r.kind == kind && r.op == op)
            .unwrap_or_else(|| panic!("a {kind:?} record of {op}"))
    };
    let gather = find(Kind::Forward, "gather");
    assert_eq!(gather.attr("dim"), Some(&Value::Int(1)));
    assert_eq!(
        find(Kind::Forward, "one_hot").attr("num_classes"),
        Some(&Value::Int(2))
    );
    assert_eq!(
        find(Kind::Forward, "argmax").attr("keepdim"),
        Some(&Value::Bool(false))
    );
    let rule = find(Kind::Backward, "gather");
    assert_eq!(rule.forward, Some(gather.id));
    // Captured, the forward record and its rule replay to the captured bits.
    let path = temp("index-ops-capture.trace");
    traced_step(&path, &[gather.id, rule.id])?;
    let mut capture = path.into_os_string();
    capture.push(".capture");
    let reports = exactgrad::trace::replay_file(Path::new(&capture), &[])?;
    assert_eq!(reports.len(), 2);
    for r in &reports {
        assert_eq!(r.op, "gather");
        assert_eq!(r.exact, Verdict::Reproduced, "{:?} {}", r.kind, r.op);
    }
    Ok(())
}
