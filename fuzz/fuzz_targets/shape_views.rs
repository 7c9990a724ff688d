//! The shape and view layer: shape programs decoded from the bytes (the decoder of
//! `tests/fuzz/fuzz_views.rs`) run on `ScalarRefBackend` and on `ExactBackend` (the best ISA
//! path of this CPU, 1 and 3 threads). Nothing may panic, and every backend must take
//! the same steps (each succeeds everywhere or fails everywhere) with the same shapes and
//! bits, and give the leaf the same gradient.
#![no_main]

#[path = "../../tests/fuzz/fuzz_support/programs.rs"]
mod programs;

use exactgrad::prelude::*;
use libfuzzer_sys::fuzz_target;
use programs::{ShapeProgram, COMPUTE_LIMIT};
use std::sync::OnceLock;

/// Per step: `None` for a failure, else the shape and (for small tensors) the bits; then
/// the leaf's gradient after backward through every small result.
type Outcome = (Vec<Option<(Vec<usize>, Vec<u32>)>>, Option<Vec<u32>>);

fn run<B: Backend>(p: &ShapeProgram, b: &B) -> Outcome {
    let (leaf, trace) = p.run(b).expect("a leaf of at most 5^4 elements");
    let mut steps = Vec::new();
    let mut grads_ok = true;
    for r in &trace {
        steps.push(match r {
            Ok(Some(t)) => {
                let bits = if t.numel() <= COMPUTE_LIMIT {
                    match t.to_vec() {
                        Ok(v) => v.iter().map(|x| x.to_bits()).collect(),
                        Err(_) => vec![u32::MAX],
                    }
                } else {
                    Vec::new()
                };
                if t.numel() <= COMPUTE_LIMIT && t.is_requires_grad() {
                    let seed = Tensor::ones(b, t.shape().clone()).unwrap();
                    grads_ok &= t
                        .backward_with(
                            BackwardOptions::default()
                                .gradient(&seed)
                                .retain_graph(true),
                        )
                        .is_ok();
                }
                Some((t.dims().to_vec(), bits))
            }
            Ok(None) => Some((Vec::new(), vec![0])),
            Err(_) => None,
        });
    }
    let grad = grads_ok.then(|| {
        leaf.grad()
            .map(|g| g.to_vec().unwrap().iter().map(|x| x.to_bits()).collect())
            .unwrap_or_default()
    });
    (steps, grad)
}

fn exact() -> &'static [ExactBackend] {
    static B: OnceLock<Vec<ExactBackend>> = OnceLock::new();
    B.get_or_init(|| {
        let isa = Isa::best(ComputeMode::Exact);
        vec![
            ExactBackend::with_isa(isa, 1).unwrap(),
            ExactBackend::with_isa(isa, 3).unwrap(),
        ]
    })
}

fuzz_target!(|data: &[u8]| {
    let p = ShapeProgram::decode(data);
    let reference = run(&p, &ScalarRefBackend);
    for b in exact() {
        assert_eq!(
            run(&p, b),
            reference,
            "{b:?} differs from ScalarRef on {p:?}"
        );
    }
});
