//! The arena tape: programs decoded from the bytes (the decoder of
//! `autograd/tape/tests/fuzz.rs`) make views of every kind, record operations on them
//! and run backward. Nothing may panic or touch memory outside the caller's buffers and
//! the arena (AddressSanitizer watches the raw pointers of the records); a failed
//! operation leaves its output untouched and parameters are never written.
#![no_main]

#[path = "../../autograd/tape/tests/programs/mod.rs"]
mod programs;

use libfuzzer_sys::fuzz_target;
use programs::TapeProgram;

fuzz_target!(|data: &[u8]| {
    let p = TapeProgram::decode(data);
    let t = p.run();
    for (k, out) in t.outputs.iter().enumerate() {
        if k < t.recorded.len() && !t.recorded[k] && k < p.recording_off_from {
            // Not recorded with recording on: the operation failed and wrote nothing.
            assert!(
                out.iter().all(|v| v.to_bits() == TapeProgram::SENTINEL),
                "operation {k} failed but wrote its output: {p:?}"
            );
        }
    }
    for (i, s) in p.params.iter().enumerate() {
        let want = p.values(i as u64, s.buffer);
        let same = t.params_after[i]
            .iter()
            .zip(&want)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "parameter {i} was written: {p:?}");
    }
    assert!(t.used <= t.capacity && t.peak <= t.capacity);
});
