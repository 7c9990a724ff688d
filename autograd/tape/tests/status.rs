//! Failure model, storage reuse, recording and reachability of the tape.

use exactgrad_tape::operators::{add, exp, mul, relu, sum, Add, Exp, Mul, Relu, Sum, Tanh};
use exactgrad_tape::{record_size, Arena, RecordingScope, Status, Tape, ALIGN};

fn round(n: usize) -> usize {
    n.div_ceil(ALIGN) * ALIGN
}

#[test]
fn one_byte_arena_is_out_of_memory_and_leaves_buffers_intact() {
    let mut arena = Arena::<1>::new();
    let tape: Tape<f32> = Tape::new(&mut arena);
    assert_eq!(tape.capacity(), 0);
    tape.register_operator::<Relu<f32>>();
    let mut wv = [1.5f32, -2.0];
    let mut yv = [7.0f32, 7.0];
    {
        let mut w = tape.parameter(&mut wv);
        assert_eq!(tape.status(), Status::OutOfMemory);
        assert!(!w.is_valid());
        assert!(w.grad().is_empty());
        assert_eq!(w.values(), &[1.5, -2.0]);
        let mut y = tape.output(&mut yv);
        let mut g = tape.graph();
        let r = relu(&mut g, &w, &mut y);
        assert!(!r.has_producer());
        assert!(!g.backward(r));
    }
    assert_eq!(
        tape.status(),
        Status::OutOfMemory,
        "the first error is kept"
    );
    assert_eq!(wv, [1.5, -2.0]);
    assert_eq!(yv, [7.0, 7.0]);
    assert_eq!(tape.used(), 0);

    // An input needs no arena space, but a record does.
    tape.clear_status();
    let xv = [1.0f32, -1.0];
    let mut gy = [0.0f32; 2];
    let x = tape.input(&xv);
    let mut y = tape.output_with_grad(&mut yv, &mut gy);
    assert!(tape.good());
    let mut g = tape.graph();
    relu(&mut g, &x, &mut y);
    assert_eq!(tape.status(), Status::OutOfMemory);
    assert_eq!(
        y.values(),
        &[7.0, 7.0],
        "an operation that cannot record writes nothing"
    );
}

/// Gradients of a 4-element parameter and outputs, records of relu and sum: the arena that
/// holds exactly that, and the one that lacks one byte.
const GRADS: usize = 16 + 16 + ALIGN; // w, y (4 × f32 each), loss (1 × f32, rounded)
const NEEDED: usize = GRADS + record_size::<f32, Relu<f32>>() + record_size::<f32, Sum<f32>>();

fn relu_sum<const BYTES: usize>(
    wv: &mut [f32; 4],
    yv: &mut [f32; 4],
    lv: &mut [f32; 1],
) -> (Status, usize) {
    let mut arena = Arena::<BYTES>::new();
    let tape: Tape<f32> = Tape::new(&mut arena);
    tape.register_operator::<Relu<f32>>();
    tape.register_operator::<Sum<f32>>();
    let w = tape.parameter(wv);
    let mut y = tape.output(yv);
    let mut loss = tape.output(lv);
    assert!(tape.good(), "views fit in both arenas");
    let mut g = tape.graph();
    let a = relu(&mut g, &w, &mut y);
    let l = sum(&mut g, a, &mut loss);
    let ran = g.backward(l);
    assert_eq!(ran, tape.good());
    (tape.status(), tape.peak())
}

#[test]
fn an_arena_one_record_too_small_is_out_of_memory() {
    assert_eq!(NEEDED % ALIGN, 0);
    let (mut w, mut y, mut l) = ([1.0f32, -2.0, 3.0, -4.0], [0.0f32; 4], [-1.0f32]);
    let (status, peak) = relu_sum::<NEEDED>(&mut w, &mut y, &mut l);
    assert_eq!(status, Status::Ok);
    assert_eq!(peak, NEEDED);
    assert_eq!(l, [4.0]);

    let (mut w, mut y, mut l) = ([1.0f32, -2.0, 3.0, -4.0], [0.0f32; 4], [-1.0f32]);
    let (status, _) = relu_sum::<{ NEEDED - 1 }>(&mut w, &mut y, &mut l);
    assert_eq!(status, Status::OutOfMemory);
    assert_eq!(w, [1.0, -2.0, 3.0, -4.0], "parameters intact");
    assert_eq!(
        l,
        [-1.0],
        "the operation whose record did not fit wrote nothing"
    );
}

#[test]
fn unregistered_operator() {
    let mut arena = Arena::<256>::new();
    let tape: Tape<f32> = Tape::new(&mut arena);
    tape.register_operator::<Sum<f32>>();
    let xv = [1.0f32, 2.0];
    let mut yv = [9.0f32, 9.0];
    let x = tape.input(&xv);
    let mut y = tape.output(&mut yv);
    {
        let mut g = tape.graph();
        let r = exp(&mut g, &x, &mut y);
        assert_eq!(r.values(), &[9.0, 9.0]);
        assert!(!g.backward(r));
    }
    assert_eq!(tape.status(), Status::OperatorNotRegistered);
    assert!(!tape.is_registered::<Exp<f32>>());
    assert!(tape.is_registered::<Sum<f32>>());

    // Also with recording off.
    tape.clear_status();
    let _off = RecordingScope::new(&tape, false);
    let mut g = tape.graph();
    exp(&mut g, &x, &mut y);
    assert_eq!(tape.status(), Status::OperatorNotRegistered);
}

#[test]
fn full_registry_and_registrations_survive_reset() {
    let mut arena = Arena::<256>::new();
    let mut tape: Tape<f32, 2> = Tape::new(&mut arena);
    assert!(tape.register_operator::<Relu<f32>>());
    assert!(
        tape.register_operator::<Relu<f32>>(),
        "registering twice takes no slot"
    );
    assert!(tape.register_operator::<Sum<f32>>());
    assert!(tape.good());
    assert!(!tape.register_operator::<Tanh<f32>>());
    assert_eq!(tape.status(), Status::OperatorRegistryFull);
    assert_eq!(tape.registered(), 2);
    tape.reset();
    assert!(tape.good());
    assert_eq!(tape.registered(), 2);
    assert!(tape.is_registered::<Relu<f32>>() && tape.is_registered::<Sum<f32>>());
}

#[test]
fn invalid_roots() {
    let mut arena = Arena::<1024>::new();
    let tape: Tape<f64> = Tape::new(&mut arena);
    tape.register_operator::<Relu<f64>>();
    tape.register_operator::<Sum<f64>>();
    let mut wv = [1.0, -2.0];
    let (mut yv, mut lv) = ([0.0; 2], [0.0]);
    let w = tape.parameter(&mut wv);
    let mut y = tape.output(&mut yv);
    let mut loss = tape.output(&mut lv);

    // Computed without recording: no producer.
    {
        let g = tape.graph();
        let mut g = g;
        let l = {
            let _off = RecordingScope::new(&tape, false);
            let a = relu(&mut g, &w, &mut y);
            sum(&mut g, a, &mut loss)
        };
        assert_eq!(l.values(), &[1.0]);
        assert!(!l.has_producer());
        assert!(!g.backward(l));
        assert_eq!(tape.status(), Status::InvalidOutput);
    }
    // Never written by an operator.
    tape.clear_status();
    assert!(!tape.graph().backward(&loss));
    assert_eq!(tape.status(), Status::InvalidOutput);
    // A root of two elements needs a seed; a seed of the wrong length is refused.
    tape.clear_status();
    {
        let mut g = tape.graph();
        let a = relu(&mut g, &w, &mut y);
        assert!(!g.backward(a));
        assert_eq!(tape.status(), Status::InvalidOutput);
    }
    tape.clear_status();
    {
        let mut g = tape.graph();
        let a = relu(&mut g, &w, &mut y);
        assert!(!g.backward_with_seed(a, &[1.0, 2.0, 3.0]));
        assert_eq!(tape.status(), Status::InvalidOutput);
    }
    tape.clear_status();
    {
        let mut g = tape.graph();
        let a = relu(&mut g, &w, &mut y);
        assert!(g.backward_with_seed(a, &[1.0, 2.0]));
    }
    // A root recorded in a graph that has ended.
    tape.clear_status();
    {
        let mut g = tape.graph();
        let _a = relu(&mut g, &w, &mut y);
    }
    assert!(!tape.graph().backward(&y));
    assert_eq!(tape.status(), Status::InvalidOutput);
}

#[test]
fn status_is_sticky_until_cleared() {
    let mut arena = Arena::<64>::new();
    let tape: Tape<f32> = Tape::new(&mut arena);
    let mut big = [0.0f32; 32];
    let _p = tape.parameter(&mut big);
    assert_eq!(tape.status(), Status::OutOfMemory);
    let xv = [1.0f32];
    let mut yv = [0.0f32];
    let x = tape.input(&xv);
    let mut y = tape.output(&mut yv);
    {
        let mut g = tape.graph();
        relu(&mut g, &x, &mut y);
    }
    assert_eq!(
        tape.status(),
        Status::OutOfMemory,
        "a later error does not overwrite"
    );
    assert!(!tape.good());
    tape.clear_status();
    assert!(tape.good());
    {
        let mut g = tape.graph();
        relu(&mut g, &x, &mut y);
    }
    assert_eq!(tape.status(), Status::OperatorNotRegistered);
    tape.begin_graph();
    assert!(tape.good(), "begin_graph clears");
    {
        let mut g = tape.graph();
        relu(&mut g, &x, &mut y);
    }
    assert!(!tape.good());
    assert!(tape.rewind_graph());
    assert!(tape.good(), "rewind_graph clears");
}

#[test]
fn reset_clears_status_and_storage() {
    let mut arena = Arena::<64>::new();
    let mut tape: Tape<f32> = Tape::new(&mut arena);
    {
        let mut v = [0.0f32; 4];
        let _p = tape.parameter(&mut v);
        assert_eq!(tape.used(), 16);
        let mut big = [0.0f32; 32];
        let _q = tape.parameter(&mut big);
        assert_eq!(tape.status(), Status::OutOfMemory);
    }
    tape.reset();
    assert!(tape.good());
    assert_eq!(tape.used(), 0);
    assert_eq!(tape.peak(), 16, "the peak is kept for sizing");
    assert!(!tape.rewind_graph(), "reset forgets the mark");
}

#[test]
fn rewind_without_mark_is_invalid_output() {
    let mut arena = Arena::<64>::new();
    let tape: Tape<f32> = Tape::new(&mut arena);
    assert!(!tape.rewind_graph());
    assert_eq!(tape.status(), Status::InvalidOutput);
    tape.begin_graph();
    assert!(tape.good());
    assert!(tape.rewind_graph());
}

#[test]
fn recording_scope_restores_the_previous_setting() {
    let mut arena = Arena::<64>::new();
    let tape: Tape<f32> = Tape::new(&mut arena);
    assert!(tape.is_recording());
    {
        let outer = RecordingScope::new(&tape, false);
        assert!(outer.previous());
        assert!(!tape.is_recording());
        {
            let _inner = RecordingScope::new(&tape, true);
            assert!(tape.is_recording());
        }
        assert!(!tape.is_recording());
    }
    assert!(tape.is_recording());

    fn early_return(tape: &Tape<f32>, stop: bool) -> u32 {
        let _s = RecordingScope::new(tape, false);
        if stop {
            return 1;
        }
        2
    }
    assert_eq!(early_return(&tape, true), 1);
    assert!(tape.is_recording());

    let unwound = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _s = RecordingScope::new(&tape, false);
        panic!("inside the scope");
    }));
    assert!(unwound.is_err());
    assert!(tape.is_recording(), "restored while unwinding");
}

#[test]
fn recording_off_uses_no_arena() {
    let mut arena = Arena::<256>::new();
    let tape: Tape<f32> = Tape::new(&mut arena);
    tape.register_operator::<Relu<f32>>();
    let xv = [1.0f32, -1.0];
    let mut yv = [0.0f32; 2];
    let mut gy = [0.0f32; 2];
    let x = tape.input(&xv);
    let mut y = tape.output_with_grad(&mut yv, &mut gy);
    let used = tape.used();
    let mut g = tape.graph();
    let _off = RecordingScope::new(&tape, false);
    let r = relu(&mut g, &x, &mut y);
    assert_eq!(r.values(), &[1.0, 0.0]);
    assert_eq!(tape.used(), used);
    assert_eq!(g.record_bytes(), 0);
}

#[test]
fn backward_visits_only_records_reachable_from_the_root() {
    let mut arena = Arena::<2048>::new();
    let tape: Tape<f64> = Tape::new(&mut arena);
    tape.register_operator::<Exp<f64>>();
    tape.register_operator::<Relu<f64>>();
    tape.register_operator::<Sum<f64>>();
    let (mut pv, mut qv, mut rv) = ([0.5, 1.0], [2.0, -3.0], [1.0, 2.0]);
    let (mut e, mut a, mut b, mut l) = ([0.0; 2], [0.0; 2], [0.0; 2], [0.0]);
    let mut p = tape.parameter(&mut pv);
    let mut q = tape.parameter(&mut qv);
    let mut r = tape.parameter(&mut rv);
    let mut e = tape.output(&mut e);
    let mut a = tape.output(&mut a);
    let mut b = tape.output(&mut b);
    let mut l = tape.output(&mut l);
    {
        let mut g = tape.graph();
        let _before = exp(&mut g, &p, &mut e); // older, unrelated
        let av = relu(&mut g, &q, &mut a);
        let lv = sum(&mut g, av, &mut l);
        let _after = relu(&mut g, &r, &mut b); // newer, unrelated
        assert!(g.backward(lv));
    }
    assert_eq!(q.grad(), &[1.0, 0.0]);
    assert_eq!(p.grad(), &[0.0, 0.0]);
    assert_eq!(r.grad(), &[0.0, 0.0]);
    assert_eq!(
        e.grad(),
        &[0.0, 0.0],
        "unreached outputs keep the zero gradient"
    );
    assert_eq!(b.grad(), &[0.0, 0.0]);
    assert_eq!(a.grad(), &[1.0, 1.0]);
}

#[test]
fn gradients_accumulate_in_a_fixed_order() {
    // y = x·x + x (x used three times): the first contribution to an output's gradient is
    // stored, later ones are added; parameters add every contribution.
    let mut arena = Arena::<2048>::new();
    let tape: Tape<f64> = Tape::new(&mut arena);
    tape.register_operator::<Mul<f64>>();
    tape.register_operator::<Add<f64>>();
    tape.register_operator::<Sum<f64>>();
    let mut xv = [3.0, -1.0];
    let (mut m, mut s, mut l) = ([0.0; 2], [0.0; 2], [0.0]);
    let mut x = tape.parameter(&mut xv);
    let mut m = tape.output(&mut m);
    let mut s = tape.output(&mut s);
    let mut l = tape.output(&mut l);
    for round in 1..=2 {
        let mut g = tape.graph();
        let mv = mul(&mut g, &x, &x, &mut m);
        let sv = add(&mut g, mv, &x, &mut s);
        let lv = sum(&mut g, sv, &mut l);
        assert!(g.backward(lv));
        let expected = [7.0 * round as f64, -(round as f64)];
        assert_eq!(x.grad(), &expected, "round {round}: parameters accumulate");
        assert_eq!(s.grad(), &[1.0, 1.0]);
        assert_eq!(m.grad(), &[1.0, 1.0], "outputs do not");
    }
    x.zero_grad();
    assert_eq!(x.grad(), &[0.0, 0.0]);
}

#[test]
fn views_made_before_begin_graph_survive_rewinds() {
    let mut arena = Arena::<512>::new();
    let tape: Tape<f32> = Tape::new(&mut arena);
    tape.register_operator::<Relu<f32>>();
    tape.register_operator::<Sum<f32>>();
    let mut wv = [1.0f32, -1.0, 2.0];
    let (mut a, mut l) = ([0.0f32; 3], [0.0f32]);
    let mut w = tape.parameter(&mut wv);
    let mut a = tape.output(&mut a);
    let mut l = tape.output(&mut l);
    let persistent = tape.used();
    tape.begin_graph();
    let mut peak_records = 0;
    for step in 0..5 {
        assert!(tape.rewind_graph());
        assert_eq!(tape.used(), persistent, "rewind returns to the mark");
        let mut g = tape.graph();
        let av = relu(&mut g, &w, &mut a);
        let lv = sum(&mut g, av, &mut l);
        peak_records = peak_records.max(g.record_bytes());
        assert!(g.backward(lv));
        assert_eq!(w.grad(), &[1.0, 0.0, 1.0]);
        w.zero_grad();
        w.values_mut()[1] = -1.0 - step as f32; // the optimizer may write between graphs
    }
    assert_eq!(tape.peak(), persistent + peak_records);
}

#[test]
fn caller_owned_gradients_use_no_arena() {
    let mut arena = Arena::<256>::new();
    let tape: Tape<f32> = Tape::new(&mut arena);
    tape.register_operator::<Sum<f32>>();
    let mut wv = [1.0f32, 2.0];
    let mut gw = [5.0f32, 5.0];
    let mut lv = [0.0f32];
    let mut gl = [0.0f32];
    let mut w = tape.parameter_with_grad(&mut wv, &mut gw);
    let mut l = tape.output_with_grad(&mut lv, &mut gl);
    assert_eq!(tape.used(), 0);
    assert_eq!(
        w.grad(),
        &[0.0, 0.0],
        "a new view's gradient starts at zero"
    );
    {
        let mut g = tape.graph();
        let lv = sum(&mut g, &w, &mut l);
        assert!(g.backward_with_seed(lv, &[2.0]));
    }
    assert_eq!(w.grad(), &[2.0, 2.0]);
    assert_eq!(l.grad(), &[2.0]);
    assert_eq!(tape.used(), round(record_size::<f32, Sum<f32>>()));
}

#[test]
fn constructors_check_lengths() {
    let mut arena = Arena::<256>::new();
    let tape: Tape<f32> = Tape::new(&mut arena);
    let mut v = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
    {
        let x = tape.input_with_len(&v, 4);
        assert_eq!(x.len(), 4);
        let m = tape.input_matrix(&v, 2, 3);
        assert_eq!((m.rows(), m.cols(), m.len()), (2, 3, 6));
        assert!(tape.good());
        let bad = tape.input_with_len(&v, 7);
        assert!(!bad.is_valid());
        assert_eq!(tape.status(), Status::TapeMismatch);
        tape.clear_status();
        let bad = tape.input_matrix(&v, 4, 2);
        assert!(!bad.is_valid());
        assert_eq!(tape.status(), Status::TapeMismatch);
        tape.clear_status();
        let bad = tape.input_matrix(&v, usize::MAX, 2);
        assert!(!bad.is_valid());
        tape.clear_status();
    }
    {
        let mut grad = [0.0f32; 5];
        let p = tape.parameter_with_grad(&mut v, &mut grad);
        assert!(!p.is_valid());
        assert_eq!(tape.status(), Status::TapeMismatch);
        tape.clear_status();
    }
    let p = tape.parameter_matrix(&mut v, 3, 2);
    assert!(p.is_valid());
    assert_eq!(p.role(), "parameter");
    assert_eq!(tape.used(), 24);
}

#[test]
fn shapes_other_tapes_and_stale_graphs_are_mismatches() {
    let mut arena = Arena::<512>::new();
    let tape: Tape<f32> = Tape::new(&mut arena);
    let mut other_arena = Arena::<64>::new();
    let other: Tape<f32> = Tape::new(&mut other_arena);
    tape.register_operator::<Add<f32>>();
    let (av, bv, cv) = ([1.0f32, 2.0], [3.0f32, 4.0], [5.0f32]);
    let mut yv = [0.0f32; 2];
    let a = tape.input(&av);
    let b = tape.input(&bv);
    let c = tape.input(&cv);
    let foreign = other.input(&bv);
    let mut y = tape.output(&mut yv);

    {
        let mut g = tape.graph();
        let r = add(&mut g, &a, &c, &mut y); // too short: refused whatever the validation setting
        assert_eq!(r.values(), &[0.0, 0.0]);
    }
    assert_eq!(tape.status(), Status::TapeMismatch);
    tape.clear_status();
    {
        let mut g = tape.graph();
        add(&mut g, &a, &foreign, &mut y);
    }
    assert_eq!(tape.status(), Status::TapeMismatch);
    tape.clear_status();

    let (mut zv, mut wv) = ([0.0f32; 2], [0.0f32; 2]);
    let mut z = tape.output(&mut zv);
    let mut w = tape.output(&mut wv);
    let mut g = tape.graph();
    let zr = add(&mut g, &a, &b, &mut z);
    assert!(tape.good());
    let mut g2 = tape.graph(); // ends `g`
    assert!(!g.is_current());
    add(&mut g, &a, &b, &mut y);
    assert_eq!(tape.status(), Status::TapeMismatch);
    assert!(!g.backward_with_seed(zr, &[1.0, 1.0]));
    tape.clear_status();
    let s = add(&mut g2, &a, &b, &mut w);
    assert_eq!(s.values(), &[4.0, 6.0]);
    assert!(g2.backward_with_seed(s, &[1.0, 1.0]));
    assert!(tape.good());
}

#[cfg(any(debug_assertions, feature = "validation"))]
#[test]
fn validation_requires_exact_shapes() {
    let mut arena = Arena::<512>::new();
    let tape: Tape<f32> = Tape::new(&mut arena);
    tape.register_operator::<Sum<f32>>();
    let xv = [1.0f32, 2.0];
    let mut yv = [0.0f32; 2];
    let x = tape.input(&xv);
    let mut y = tape.output(&mut yv);
    let mut g = tape.graph();
    sum(&mut g, &x, &mut y); // a sum has one element
    assert_eq!(tape.status(), Status::TapeMismatch);
}

#[test]
fn used_and_peak() {
    let mut arena = Arena::<1000>::new();
    let tape: Tape<f64> = Tape::new(&mut arena);
    assert_eq!(tape.capacity(), 1000);
    tape.register_operator::<Relu<f64>>();
    let mut v = [0.0f64; 3];
    let mut y = [0.0f64; 3];
    let p = tape.parameter(&mut v);
    let mut y = tape.output(&mut y);
    assert_eq!(tape.used(), 48);
    tape.begin_graph();
    {
        let mut g = tape.graph();
        relu(&mut g, &p, &mut y);
        assert_eq!(g.record_bytes(), record_size::<f64, Relu<f64>>());
    }
    assert_eq!(tape.used(), 48 + record_size::<f64, Relu<f64>>());
    tape.rewind_graph();
    assert_eq!(tape.used(), 48);
    assert_eq!(tape.peak(), 48 + record_size::<f64, Relu<f64>>());
    assert_eq!(tape.available(), 1000 - 48);
}
