//! Trace files as a crash or a hostile hand leaves them: a torn tail is cut off with a
//! note, corruption before the end is an error naming the byte, a file that is not a
//! trace is refused; a trace of many steps streams through a bounded buffer.

use super::*;
use exactgrad::trace::{ReadError, TraceError, BUFFER_BYTES};

fn bytes(path: &Path) -> Vec<u8> {
    std::fs::read(path).expect("the trace file")
}

#[test]
fn a_torn_tail_is_ignored_with_a_note_and_the_complete_steps_read() -> exactgrad::Result<()> {
    let path = temp("torn.trace");
    train(&ScalarRefBackend, &Run::new(Arch::Mlp), &path)?;
    let full = bytes(&path);
    let whole = records(&path);
    // Cut inside the last frame (a step's end): steps 1–5 complete, step 6 incomplete.
    for cut in [3, 9, 20] {
        let torn = temp(&format!("torn-{cut}.trace"));
        std::fs::write(&torn, &full[..full.len() - cut]).unwrap();
        let mut steps = TraceSteps::open(&[&torn])?;
        assert!(steps.is_torn());
        assert!(
            steps.notes()[0].contains("incomplete frame"),
            "{:?}",
            steps.notes()
        );
        let mut n = 0;
        let mut last = None;
        while let Some(s) = steps.next_step()? {
            n += s.records.len();
            last = Some((s.step, s.complete));
        }
        assert_eq!(last, Some((6, false)));
        assert!(
            n <= whole.len() && n + 40 > whole.len(),
            "{n} of {}",
            whole.len()
        );
        // The diff says which step is incomplete.
        let report = diff(&path, &torn);
        assert!(
            report
                .notes
                .iter()
                .any(|n| n.contains("step 6 is incomplete")),
            "{report}"
        );
    }
    Ok(())
}

#[test]
fn corruption_before_the_end_is_an_error_naming_the_byte() -> exactgrad::Result<()> {
    let path = temp("corrupt.trace");
    train(&ScalarRefBackend, &Run::new(Arch::Mlp), &path)?;
    let full = bytes(&path);
    let mut flipped = 0;
    for at in (16..full.len() - 200).step_by(997) {
        let mut bad = full.clone();
        bad[at] ^= 0x04;
        let p = temp("corrupt-1.trace");
        std::fs::write(&p, &bad).unwrap();
        let result = (|| -> Result<usize, ReadError> {
            let mut steps = TraceSteps::open(&[&p])?;
            let mut n = 0;
            while let Some(s) = steps.next_step()? {
                n += s.records.len();
            }
            Ok(n)
        })();
        match result {
            Err(ReadError::Format {
                offset, message, ..
            }) => {
                assert!(offset <= at as u64, "{offset} > {at}");
                assert!(!message.is_empty());
                flipped += 1;
            }
            other => panic!("a flip at byte {at} was read as {other:?}"),
        }
    }
    assert!(flipped > 3);
    // Not a trace at all.
    let junk = temp("junk.trace");
    std::fs::write(&junk, b"PK\x03\x04 not a trace file at all").unwrap();
    let e = TraceSteps::open(&[&junk]).unwrap_err().to_string();
    assert!(e.contains("not a trace file"), "{e}");
    let e = TraceSteps::open(&[temp("missing.trace")]).unwrap_err();
    assert!(matches!(e, ReadError::Io { .. }));
    // Another format version.
    let mut v2 = full.clone();
    v2[8] = 2;
    let p = temp("v2.trace");
    std::fs::write(&p, &v2).unwrap();
    let e = TraceSteps::open(&[&p]).unwrap_err().to_string();
    assert!(e.contains("format version 2"), "{e}");
    Ok(())
}

#[test]
fn a_second_trace_on_one_thread_is_refused_and_a_bad_capture_id_too() -> exactgrad::Result<()> {
    let first = TraceConfig::new(temp("one.trace")).start()?;
    let e = TraceConfig::new(temp("two.trace")).start().unwrap_err();
    assert!(matches!(e, TraceError::AlreadyRecording), "{e}");
    first.finish()?;
    // After the first finishes, another may start; a directory is not a file.
    let e = TraceConfig::new(std::env::temp_dir()).start().unwrap_err();
    assert!(matches!(e, TraceError::Io { .. }), "{e}");
    let ok = TraceConfig::new(temp("three.trace")).start()?;
    assert_eq!(ok.summary().records, 0);
    assert_eq!(ok.finish()?.steps, 0);
    Ok(())
}

#[test]
fn a_long_run_streams_with_a_bounded_buffer() -> exactgrad::Result<()> {
    // One long step that writes many times the buffer (every output's values kept):
    // the file grows while the step runs, and the recorder never holds more than a
    // buffer (and one record) of what it wrote.
    let b = ScalarRefBackend;
    let model = model(&b, Arch::Mlp)?;
    let x = Tensor::randn(&b, [64, 64], 0.0, 1.0, &mut Philox::new(1))?;
    let path = temp("long.trace");
    let trace = TraceConfig::new(&path)
        .level(TraceLevel::Ops)
        .model(&model)
        .values_up_to(1 << 12)
        .start()?;
    let mut most_held = 0;
    for _ in 0..400 {
        model.forward(&x)?;
        let on_disk = std::fs::metadata(&path).unwrap().len();
        let held = trace.summary().bytes - on_disk;
        most_held = most_held.max(held);
        assert!(held <= BUFFER_BYTES as u64 + (1 << 16), "{held} bytes held");
    }
    assert!(
        std::fs::metadata(&path).unwrap().len() > 4 * BUFFER_BYTES as u64,
        "the file grew while the step ran"
    );
    assert!(most_held > 0);
    exactgrad::trace::end_step();
    let summary = trace.finish()?;
    // Seven records a forward pass: per layer the transposed weight, the product and the
    // bias; the ReLU.
    assert_eq!((summary.steps, summary.records), (1, 2800));
    let len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(summary.bytes, len);
    let mut steps = TraceSteps::open(&[&path])?;
    let step = steps.next_step()?.expect("one step");
    assert_eq!(
        (step.step, step.records.len(), step.complete),
        (1, 2800, true)
    );
    assert!(steps.next_step()?.is_none());
    Ok(())
}
