//! Property-based fuzzing of the shape and view layer: programs decoded from random bytes
//! (`fuzz_support::programs`, shared with the `shape_views` cargo-fuzz target) apply up
//! to 24 reshape, view, permute, transpose, narrow, slice, expand, squeeze, unsqueeze,
//! flatten, split, chunk, index_select, contiguous and sum calls to a leaf of random
//! shape and bits, with sizes and indices at their extremes. Every backend must take the
//! same steps (each succeeds everywhere or fails everywhere), give the same bits for
//! every tensor made and the same gradient of the leaf, without panic or overrun.

use super::fuzz_support::programs::{ShapeProgram, Step, COMPUTE_LIMIT};
use super::fuzz_support::*;
use exactgrad::prelude::*;
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Program(ShapeProgram);

impl Case for Program {
    fn call<B: Backend>(&self, b: &B) -> CaseResult<Outcome<B>> {
        let (leaf, trace) = self.0.run(b)?;
        let mut outputs = Vec::new();
        let mut steps = Vec::new();
        for r in trace {
            steps.push(match r {
                Ok(None) => 0.0,
                Ok(Some(t)) => {
                    outputs.push(t);
                    1.0
                }
                Err(_) => 2.0,
            });
        }
        let n = steps.len();
        Ok(Outcome {
            outputs,
            state: vec![Tensor::from_vec(b, steps, [n])?],
            leaves: vec![leaf],
        })
    }
}

/// Bytes that decode to a program: mostly small numbers (small sizes and in-range
/// indices), sometimes bytes ≥ 0xC0 (the extremes).
fn program_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop_oneof![6 => 0u8..0x40, 1 => any::<u8>()], 0..96)
}

proptest! {
    #![proptest_config(config(6000))]

    #[test]
    fn shape_and_view_programs(bytes in program_bytes()) {
        check(Program(ShapeProgram::decode(&bytes)))?;
    }
}

/// The decoder reaches every kind of step and the extremes (so that the property above
/// exercises them), and a program on an expansion of 2^62 elements only makes views.
#[test]
fn programs_reach_every_step_and_extreme() {
    let mut kinds = std::collections::BTreeSet::new();
    let mut extreme = false;
    let mut rng = Philox::new(5);
    for _ in 0..2000 {
        let bytes: Vec<u8> = (0..64).map(|_| rng.next_u64() as u8).collect();
        let p = ShapeProgram::decode(&bytes);
        for s in &p.steps {
            let name = format!("{s:?}");
            kinds.insert(name.split(['(', ' ']).next().unwrap().to_string());
            extreme |= name.contains(&usize::MAX.to_string());
        }
    }
    assert_eq!(kinds.len(), 21, "{kinds:?}");
    assert!(extreme);
    let p = ShapeProgram {
        shape: vec![1],
        seed: 1,
        steps: vec![Step::Expand(vec![1 << 30, 1 << 30]), Step::Sum],
    };
    let (_, trace) = p.run(&ScalarRefBackend).unwrap();
    let big = trace[0].as_ref().unwrap().as_ref().unwrap();
    assert_eq!(big.numel(), 1 << 60);
    assert!(big.numel() > COMPUTE_LIMIT);
    assert!(matches!(trace[1], Ok(None)), "the sum is skipped");
}
