//! Two runs with one difference: the diff names the record where they parted.

use super::*;
use exactgrad::backends::Isa;
use exactgrad::core::backend::{
    BinaryArgs, Checked, CopyStridedArgs, MatmulArgs, SelectArgs, SoftmaxArgs, SoftmaxBackwardArgs,
    SumArgs, UnaryArgs, UnaryBackwardArgs,
};
use exactgrad::core::{BackendImpl, Result as CoreResult};
use exactgrad::nn::checkpoint::TrainingCheckpoint;
use exactgrad::trace::diff::CauseKind;
use exactgrad::trace::replay::Verdict;
use exactgrad::trace::{Section, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A backend of a downstream crate's kind: the scalar reference, except that call
/// number `bad_call` (from 1) of the matrix-product kernel writes its first output one
/// ulp higher.
#[derive(Clone, Debug)]
struct OneUlpOff {
    calls: Arc<AtomicUsize>,
    bad_call: usize,
}

impl OneUlpOff {
    fn new(bad_call: usize) -> Self {
        Self {
            calls: Arc::new(AtomicUsize::new(0)),
            bad_call,
        }
    }
}

impl BackendImpl for OneUlpOff {
    type Storage = Vec<f32>;
    exactgrad::core::host_views!();

    fn name(&self) -> String {
        "one-ulp-off".into()
    }
    fn mode(&self) -> ComputeMode {
        ComputeMode::Exact
    }
    fn zeros(&self, len: usize) -> CoreResult<Vec<f32>> {
        BackendImpl::zeros(&ScalarRefBackend, len)
    }
    fn storage_from_vec(&self, data: Vec<f32>) -> CoreResult<Vec<f32>> {
        Ok(data)
    }
    fn copy_strided_impl(&self, args: Checked<CopyStridedArgs<'_>>) -> CoreResult<()> {
        ScalarRefBackend.copy_strided_impl(args)
    }
    fn unary_impl(&self, args: Checked<UnaryArgs<'_>>) -> CoreResult<()> {
        ScalarRefBackend.unary_impl(args)
    }
    fn unary_backward_impl(&self, args: Checked<UnaryBackwardArgs<'_>>) -> CoreResult<()> {
        ScalarRefBackend.unary_backward_impl(args)
    }
    fn binary_impl(&self, args: Checked<BinaryArgs<'_>>) -> CoreResult<()> {
        ScalarRefBackend.binary_impl(args)
    }
    fn select_impl(&self, args: Checked<SelectArgs<'_>>) -> CoreResult<()> {
        ScalarRefBackend.select_impl(args)
    }
    fn sum_impl(&self, args: Checked<SumArgs<'_>>) -> CoreResult<()> {
        ScalarRefBackend.sum_impl(args)
    }
    fn matmul_impl(&self, args: Checked<MatmulArgs<'_>>) -> CoreResult<()> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed) + 1;
        let MatmulArgs { spec, a, b, out } = args.into_inner();
        ScalarRefBackend.matmul(spec, a, b, &mut *out)?;
        if n == self.bad_call {
            if let Some(v) = out.first_mut() {
                *v = f32::from_bits(v.to_bits() + 1);
            }
        }
        Ok(())
    }
    fn softmax_impl(&self, args: Checked<SoftmaxArgs<'_>>) -> CoreResult<()> {
        ScalarRefBackend.softmax_impl(args)
    }
    fn softmax_backward_impl(&self, args: Checked<SoftmaxBackwardArgs<'_>>) -> CoreResult<()> {
        ScalarRefBackend.softmax_backward_impl(args)
    }
}

#[test]
fn one_ulp_in_one_kernel_call_is_named_as_that_operation() -> exactgrad::Result<()> {
    // The MLP makes five products a step: forward the layers `0` and `2`, backward the
    // rule of layer `2` (input, then weight gradient) and of layer `0` (its weight
    // gradient; the data needs none). Call 7 is step 2's forward product of layer `2`,
    // call 9 step 2's weight gradient of layer `2`.
    let run = Run {
        values_up_to: 1 << 12,
        ..Run::new(Arch::Mlp)
    };
    let good = temp("ulp-good.trace");
    train(&ScalarRefBackend, &run, &good)?;
    for (call, kind, step) in [(7, Kind::Forward, 2), (9, Kind::Backward, 2)] {
        let bad = temp(&format!("ulp-bad-{call}.trace"));
        train(&OneUlpOff::new(call), &run, &bad)?;
        let report = diff(&good, &bad);
        assert!(!report.identical());
        let rc = report.root_cause.as_ref().expect("a root cause");
        let r = &rc.records.b;
        assert_eq!(rc.kind, CauseKind::InputsMatched, "{report}");
        assert_eq!(
            (r.kind, r.op.as_str(), r.id.step),
            (kind, "matmul", step),
            "{report}"
        );
        assert_eq!(r.module.as_deref(), Some("2"), "{report}");
        assert!(r.params().contains(&"2.weight"), "{:?}", r.params());
        // The first differing record of the traces, found independently, is this one.
        let (first, _) = first_differing(&good, &bad).expect("the runs differ");
        assert_eq!(first.id, r.id);
        // One ulp in one element: what the kept values show.
        let out = rc
            .outputs
            .iter()
            .find(|o| o.max_ulp.is_some())
            .expect("values kept");
        assert_eq!(out.max_ulp, Some(1), "{report}");
        // Everything after it is a consequence (here few records: the loss and the update
        // round the ulp away).
        assert!(report.spread.records >= 2, "{report}");
        // The text names it, so a person reading a CI log finds it.
        let text = report.to_string();
        assert!(
            text.contains(&format!(
                "root cause: step {step}, {} `matmul`",
                kind.name()
            )),
            "{text}"
        );
        assert!(text.contains("module   2"), "{text}");
    }
    Ok(())
}

#[test]
fn a_captured_record_replays_on_the_reference_and_blames_the_kernel() -> exactgrad::Result<()> {
    let run = Run::new(Arch::Mlp);
    let good = temp("replay-good.trace");
    train(&ScalarRefBackend, &run, &good)?;
    let bad = temp("replay-bad.trace");
    train(&OneUlpOff::new(9), &run, &bad)?;
    let report = diff(&good, &bad);
    let rc = report.root_cause.as_ref().expect("a root cause");
    let backward = rc.records.b.clone();
    let forward = backward
        .forward
        .expect("a backward rule names its forward record");
    // The run again, capturing the rule and its forward record (what the report's
    // `capture` line says to set); the capture file is self-contained.
    let capture = temp("replay-bad.capture");
    let again = Run {
        capture: vec![forward, backward.id],
        ..run.clone()
    };
    let cfg_path = temp("replay-bad-2.trace");
    {
        // Captures go next to the trace by default.
        train(&OneUlpOff::new(9), &again, &cfg_path)?;
        let mut p = cfg_path.clone().into_os_string();
        p.push(".capture");
        std::fs::rename(PathBuf::from(p), &capture).expect("the capture file");
    }
    let reports = exactgrad::trace::replay_file(&capture, &[backward.id])?;
    assert_eq!(reports.len(), 1);
    let rep = &reports[0];
    assert_eq!((rep.kind, rep.op.as_str()), (Kind::Backward, "matmul"));
    // The scalar reference computes other bits from the captured inputs: one element,
    // one ulp — the kernel is at fault.
    match &rep.exact {
        Verdict::Differs(checks) => {
            let c = checks
                .iter()
                .find(|c| c.differing > 0)
                .expect("a differing output");
            assert_eq!((c.differing, c.max_ulp), (1, 1), "{checks:?}");
        }
        v => panic!("expected a difference, got {v:?}"),
    }
    assert!(
        rep.conclusion().contains("is at fault"),
        "{}",
        rep.conclusion()
    );
    // The same record of the good run replays to its captured bits.
    let good_capture = temp("replay-good-2.trace");
    train(&ScalarRefBackend, &again, &good_capture)?;
    let mut p = good_capture.into_os_string();
    p.push(".capture");
    let reps = exactgrad::trace::replay_file(Path::new(&p), &[])?;
    assert_eq!(reps.len(), 2, "the forward record and the rule");
    for r in &reps {
        assert_eq!(r.exact, Verdict::Reproduced, "{} {}", r.id, r.op);
    }
    // A rule without its forward record's capture says what is missing.
    let only_rule = exactgrad::trace::replay::replay(
        &ScalarRefBackend,
        &exactgrad::trace::read_captures(&capture)?
            .into_iter()
            .find(|c| c.record.id == backward.id)
            .expect("captured"),
        None,
    )?;
    assert!(matches!(only_rule, Verdict::NotReplayable(ref why) if why.contains("forward record")));
    Ok(())
}

#[test]
fn exact_mode_against_fast_mode_names_the_first_operation_that_rounds_otherwise(
) -> exactgrad::Result<()> {
    let run = Run::new(Arch::ConvNet);
    let (exact, fast) = (temp("mode-exact.trace"), temp("mode-fast.trace"));
    train(&ScalarRefBackend, &run, &exact)?;
    train(&FastScalarRefBackend, &run, &fast)?;
    let report = diff(&exact, &fast);
    let rc = report.root_cause.as_ref().expect("the modes differ");
    // The first product of the step is the convolution of layer `0`: its multiply-adds
    // are fused in fast mode. Nothing before it (the batch, rearrangements) differs.
    let r = &rc.records.a;
    assert_eq!(
        (r.kind, r.op.as_str(), r.id.step),
        (Kind::Forward, "conv2d", 1),
        "{report}"
    );
    assert_eq!(r.module.as_deref(), Some("0"));
    let (first, _) = first_differing(&exact, &fast).expect("they differ");
    assert_eq!(first.id, r.id);
    assert!(
        report.configuration.iter().any(|(k, ..)| k == "mode"),
        "{report}"
    );
    Ok(())
}

#[test]
fn a_learning_rate_changed_at_step_5_is_the_optimizer_record_of_step_5() -> exactgrad::Result<()> {
    let run = Run::new(Arch::ConvNet);
    let (a, b) = (temp("lr-a.trace"), temp("lr-b.trace"));
    train(&ScalarRefBackend, &run, &a)?;
    train(
        &ScalarRefBackend,
        &Run {
            lr_from_5: Some(0.025),
            ..run.clone()
        },
        &b,
    )?;
    let report = diff(&a, &b);
    let rc = report.root_cause.as_ref().expect("a root cause");
    let r = &rc.records.a;
    assert_eq!(
        (r.kind, r.op.as_str(), r.id.step),
        (Kind::Optimizer, "sgd", 5),
        "{report}"
    );
    // The first parameter the optimizer updates (in `state_dict` order), with its rate.
    assert_eq!(r.params(), ["0.weight"]);
    let lr = rc
        .state
        .iter()
        .find(|(k, ..)| k == "lr")
        .expect("the rate differs");
    assert_eq!(
        (lr.1.clone(), lr.2.clone()),
        (Some(Value::F64(0.05)), Some(Value::F64(0.025)))
    );
    // Steps 1 to 4 are identical.
    assert_eq!(report.spread.steps, 2, "steps 5 and 6 differ: {report}");
    Ok(())
}

#[test]
fn another_shuffle_seed_or_data_order_is_the_batch_record() -> exactgrad::Result<()> {
    let run = Run::new(Arch::Mlp);
    let a = temp("data-a.trace");
    train(&ScalarRefBackend, &run, &a)?;
    for (name, changed) in [
        (
            "seed",
            Run {
                shuffle: 2,
                ..run.clone()
            },
        ),
        (
            "order",
            Run {
                skip: 1,
                ..run.clone()
            },
        ),
    ] {
        let b = temp(&format!("data-{name}.trace"));
        train(&ScalarRefBackend, &changed, &b)?;
        let report = diff(&a, &b);
        let rc = report.root_cause.as_ref().expect("a root cause");
        let r = &rc.records.b;
        assert_eq!(
            (r.kind, r.op.as_str()),
            (Kind::Data, "batch"),
            "{name}: {report}"
        );
        assert_eq!(r.id.step, 1);
        let key = if name == "seed" {
            "shuffle_seed"
        } else {
            "batch"
        };
        assert!(
            rc.state.iter().any(|(k, ..)| k == key),
            "{name}: {:?}",
            rc.state
        );
        assert!(rc.outputs.iter().any(|o| o.name == "inputs"));
    }
    Ok(())
}

/// Trains the conv net (with dropout) for `first` steps, saves a training checkpoint,
/// then in new objects restores it and trains to `total` steps, calling `after_restore`
/// on the model right after the restore; traces both parts into `path` (the second
/// appends, as a resumed run does).
fn interrupted<B: Backend>(
    b: &B,
    first: usize,
    total: usize,
    path: &Path,
    after_restore: impl Fn(&Sequential<B>) -> exactgrad::Result<()>,
) -> exactgrad::Result<()> {
    let data = data()?;
    let ckpt = temp(&format!(
        "{}.ckpt",
        path.file_name().unwrap().to_string_lossy()
    ));
    let step =
        |model: &Sequential<B>, opt: &mut Sgd<B>, batch: Batch<B>| -> exactgrad::Result<()> {
            let x = batch.inputs.reshape([batch.targets.len(), 1, 8, 8])?;
            let loss = model
                .forward(&x)?
                .cross_entropy(&batch.targets, CrossEntropyOptions::default())?;
            opt.clear_grad();
            loss.backward()?;
            opt.step()
        };
    let make = || -> exactgrad::Result<_> {
        let loader = DataLoader::new(b, &data, 16)?.shuffle(1);
        let model = model(b, Arch::ConvNet)?;
        let opt = Sgd::new(
            model.parameters(),
            SgdConfig {
                momentum: 0.9,
                ..SgdConfig::new(0.05)
            },
        )?;
        Ok((loader, model, opt))
    };
    {
        let (loader, model, mut opt) = make()?;
        model.seed_streams(7)?;
        let trace = TraceConfig::new(path)
            .level(TraceLevel::Ops)
            .model(&model)
            .start()?;
        // Uninterrupted: `total` steps. Interrupted: a checkpoint after `first`, and one
        // more step, which the crash loses.
        let stop = if first == total { total } else { first + 1 };
        let mut done = 0;
        'outer: loop {
            for batch in &loader {
                step(&model, &mut opt, batch?)?;
                done += 1;
                if done == first && first < total {
                    TrainingState::new(&model, &mut opt)
                        .loader(&loader)
                        .save(&ckpt)?;
                }
                if done == stop {
                    break 'outer;
                }
            }
        }
        trace.finish()?;
    }
    if first == total {
        return Ok(());
    }
    let (loader, model, mut opt) = make()?;
    model.seed_streams(7)?;
    let trace = TraceConfig::new(path)
        .append(true)
        .level(TraceLevel::Ops)
        .model(&model)
        .start()?;
    TrainingState::new(&model, &mut opt)
        .loader(&loader)
        .load(&ckpt)?;
    after_restore(&model)?;
    let mut done = first;
    'rest: loop {
        for batch in &loader {
            step(&model, &mut opt, batch?)?;
            done += 1;
            if done == total {
                break 'rest;
            }
        }
    }
    trace.finish()?;
    Ok(())
}

/// The uninterrupted run of [`interrupted`].
fn uninterrupted<B: Backend>(b: &B, total: usize, path: &Path) -> exactgrad::Result<()> {
    interrupted(b, total, total, path, |_| Ok(()))
}

#[test]
fn a_resumed_run_appending_to_its_trace_diffs_identical_to_an_uninterrupted_one(
) -> exactgrad::Result<()> {
    let b = ScalarRefBackend;
    let (whole, resumed) = (temp("resume-whole.trace"), temp("resume-parts.trace"));
    uninterrupted(&b, 7, &whole)?;
    interrupted(&b, 3, 7, &resumed, |_| Ok(()))?;
    let report = diff(&whole, &resumed);
    assert!(report.identical(), "{report}");
    assert_eq!(report.steps, 7);
    // The second segment continues at step 4 and replaces the first one's step 4 (the
    // step the crash lost).
    let notes = exactgrad::trace::read_notes(&resumed)?;
    assert!(
        notes.iter().any(|n| n.contains("next step is 4")),
        "{notes:?}"
    );
    let steps = TraceSteps::open(&[&resumed])?;
    assert_eq!(steps.headers().len(), 2);
    Ok(())
}

#[test]
fn seed_streams_after_a_restore_keeps_the_streams_and_a_reseed_is_named() -> exactgrad::Result<()> {
    let b = ScalarRefBackend;
    let whole = temp("streams-whole.trace");
    uninterrupted(&b, 6, &whole)?;
    // The call a resumed program makes by mistake: now a no-op, the run is the same.
    let again = temp("streams-again.trace");
    interrupted(&b, 3, 6, &again, |m| m.seed_streams(7))?;
    let report = diff(&whole, &again);
    assert!(report.identical(), "{report}");
    // Re-keying the streams on purpose (what seed_streams did before it kept restored
    // streams): the diff names the first dropout after the resume, by its module and
    // the key of its mask.
    let reseeded = temp("streams-reseeded.trace");
    interrupted(&b, 3, 6, &reseeded, |m| {
        m.reseed_streams(7);
        Ok(())
    })?;
    let report = diff(&whole, &reseeded);
    let rc = report.root_cause.as_ref().expect("a root cause");
    let r = &rc.records.b;
    assert_eq!(
        (r.kind, r.op.as_str(), r.id.step),
        (Kind::Forward, "dropout", 4),
        "{report}"
    );
    assert_eq!(r.module.as_deref(), Some("5"));
    assert!(rc.state.iter().any(|(k, ..)| k == "key"), "{:?}", rc.state);
    // Another seed after a restore is refused, and changes no stream.
    let model = model(&b, Arch::ConvNet)?;
    let mut opt = Sgd::new(model.parameters(), SgdConfig::new(0.1))?;
    model.seed_streams(7)?;
    let ckpt = temp("streams.ckpt");
    TrainingState::new(&model, &mut opt).save(&ckpt)?;
    TrainingState::new(&model, &mut opt).load(&ckpt)?;
    let before = TrainingCheckpoint::from_file(
        TrainingState::new(&model, &mut opt)
            .capture()?
            .file()
            .clone(),
    );
    let e = model.seed_streams(8).unwrap_err().to_string();
    assert!(
        e.contains("restored") && e.contains("reseed_streams"),
        "{e}"
    );
    let after = TrainingState::new(&model, &mut opt).capture()?;
    assert_eq!(before.file(), after.file());
    model.seed_streams(7)?; // the same seed: kept
    Ok(())
}

#[test]
fn the_same_run_on_every_exact_path_and_thread_count_diffs_identical() -> exactgrad::Result<()> {
    let run = Run {
        steps: 3,
        ..Run::new(Arch::ConvNet)
    };
    let reference = temp("paths-ref.trace");
    train(&ScalarRefBackend, &run, &reference)?;
    let mut compared = 0;
    for isa in Isa::ALL {
        if !isa.is_supported(ComputeMode::Exact) {
            continue;
        }
        for threads in [1, 2] {
            let path = temp(&format!("paths-{}-{threads}.trace", isa.name()));
            train(&ExactBackend::with_isa(isa, threads)?, &run, &path)?;
            let report = diff(&reference, &path);
            assert!(
                report.identical(),
                "{} at {threads} threads: {report}",
                isa.name()
            );
            // The header says where each ran.
            assert!(
                report.configuration.iter().any(|(k, _, b)| k == "backend"
                    && b.as_deref().is_some_and(|b| b.contains(isa.name()))),
                "{report}"
            );
            compared += 1;
        }
    }
    assert!(compared >= 2);
    Ok(())
}

#[test]
fn another_operation_is_a_structural_difference() -> exactgrad::Result<()> {
    let run = Run::new(Arch::Mlp);
    let a = temp("struct-a.trace");
    train(&ScalarRefBackend, &run, &a)?;
    // Another model (another op sequence and parameter set) in the second run.
    let b = temp("struct-b.trace");
    train(&ScalarRefBackend, &Run::new(Arch::ConvNet), &b)?;
    let report = diff(&a, &b);
    let s = report.structure.as_ref().expect("a structural difference");
    assert!(s.what.contains("models differ"), "{}", s.what);
    assert!(!report.identical());
    Ok(())
}

#[test]
fn the_steps_level_records_batches_losses_updates_and_streams_only() -> exactgrad::Result<()> {
    let run = Run {
        level: TraceLevel::Steps,
        ..Run::new(Arch::ConvNet)
    };
    let a = temp("steps-a.trace");
    let summary = train(&ScalarRefBackend, &run, &a)?;
    assert_eq!(summary.steps, 6);
    // Per step: one batch, one backward pass (the loss), one update per parameter (6),
    // the model's one random stream.
    assert_eq!(
        kinds(&a),
        [
            (Kind::Data, 6),
            (Kind::Backward, 6),
            (Kind::Optimizer, 36),
            (Kind::State, 6)
        ]
    );
    let recs = records(&a);
    let loss = recs.iter().find(|r| r.kind == Kind::Backward).unwrap();
    assert!(matches!(loss.state_value("loss"), Some(Value::F32(v)) if v.is_finite()));
    // A kernel difference shows at this level as the first record that reads what it
    // changed: here a weight gradient one ulp off, read by the update of step 2 (which
    // rounds it away), made by operations below the level.
    let mlp = Run {
        level: TraceLevel::Steps,
        ..Run::new(Arch::Mlp)
    };
    let (good, bad) = (temp("steps-good.trace"), temp("steps-bad.trace"));
    train(&ScalarRefBackend, &mlp, &good)?;
    train(&OneUlpOff::new(9), &mlp, &bad)?;
    let report = diff(&good, &bad);
    let rc = report.root_cause.as_ref().expect("a difference");
    assert_eq!(rc.kind, CauseKind::UntracedInput("grad".into()), "{report}");
    let r = &rc.records.a;
    assert_eq!(
        (r.kind, r.id.step, r.params()),
        (Kind::Optimizer, 2, vec!["2.weight"])
    );
    Ok(())
}

#[test]
fn tracing_changes_no_bit_and_records_in_order() -> exactgrad::Result<()> {
    // The same training with and without a trace ends with the same parameters.
    let b = ExactBackend::new();
    let nochange = temp("nochange.trace");
    let final_hash = |traced: bool| -> exactgrad::Result<u64> {
        let data = data()?;
        let loader = DataLoader::new(&b, &data, 16)?.shuffle(1);
        let model = model(&b, Arch::ConvNet)?;
        model.seed_streams(7)?;
        let mut opt = Adam::new(model.parameters(), AdamConfig::new(1e-2))?;
        let trace = if traced {
            Some(
                TraceConfig::new(&nochange)
                    .level(TraceLevel::Ops)
                    .model(&model)
                    .start()?,
            )
        } else {
            None
        };
        for batch in loader.iter().take(4) {
            let batch = batch?;
            let x = batch.inputs.reshape([batch.targets.len(), 1, 8, 8])?;
            let loss = model
                .forward(&x)?
                .cross_entropy(&batch.targets, CrossEntropyOptions::default())?;
            opt.clear_grad();
            loss.backward()?;
            opt.step()?;
        }
        drop(trace);
        hash_tensors(&model.parameters().iter().collect::<Vec<_>>())
    };
    assert_eq!(final_hash(true)?, final_hash(false)?);
    // Record ids run 0, 1, … within each step's section, steps from 1.
    let recs = records(&nochange);
    let mut expect = (1u64, 0u32);
    for r in &recs {
        if r.id.step != expect.0 {
            expect = (r.id.step, 0);
        }
        if r.kind == Kind::State {
            // The streams' positions close the step, after its other records.
            assert_eq!((r.id.section, r.id.index), (Section::After, 0));
            continue;
        }
        assert_eq!(
            (r.id.step, r.id.section, r.id.index),
            (expect.0, Section::Main, expect.1)
        );
        expect.1 += 1;
    }
    assert_eq!(expect.0, 4);
    Ok(())
}
