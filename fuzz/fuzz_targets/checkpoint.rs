//! The checkpoint reader: any bytes go through `TensorFile::from_bytes` and, when they
//! are read, through `load_state_dict_with` (strict and not, non-finite values allowed
//! or not) into a small model. Nothing may panic; a load that succeeds holds the file's
//! bits in every entry it names, and a load that fails changes nothing.
#![no_main]

use exactgrad::nn::checkpoint::{load_state_dict_with, LoadOptions, TensorFile};
use exactgrad::nn::ModuleExt;
use exactgrad::prelude::*;
use libfuzzer_sys::fuzz_target;

fn model(b: &ScalarRefBackend) -> Sequential<ScalarRefBackend> {
    let mut rng = Philox::new(3);
    Sequential::new()
        .push(Conv2d::new(b, Conv2dConfig::new(1, 2, [2, 2]), &mut rng).unwrap())
        .push(BatchNorm2d::new(b, 2).unwrap())
        .push(Flatten)
        .push(Linear::new(b, 8, 3, &mut rng).unwrap())
}

fn state(m: &Sequential<ScalarRefBackend>) -> Vec<(String, Vec<u32>)> {
    let mut all = m.named_parameters();
    all.extend(m.named_buffers());
    all.into_iter()
        .map(|(n, t)| (n, t.to_vec().unwrap().iter().map(|v| v.to_bits()).collect()))
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(file) = TensorFile::from_bytes(data) else {
        return;
    };
    // Everything the reader found can be asked for.
    for name in file.names() {
        let _ = (file.floats(name), file.ints(name), file.dtype(name));
        let _ = file.tensor(&ScalarRefBackend, name);
    }
    let b = ScalarRefBackend;
    for (prefix, strict, allow_non_finite) in
        [("", true, false), ("", false, true), ("m.", false, false)]
    {
        let m = model(&b);
        let before = state(&m);
        let options = LoadOptions {
            strict,
            allow_non_finite,
        };
        match load_state_dict_with(&m, &file, prefix, options) {
            Ok(report) => {
                for ((name, after), (_, old)) in state(&m).iter().zip(&before) {
                    let key = format!("{prefix}{name}");
                    let want: Vec<u32> = match file.floats(&key) {
                        Ok((_, v)) => v.iter().map(|x| x.to_bits()).collect(),
                        Err(_) => {
                            assert!(
                                report.missing.contains(&key),
                                "{key} neither loaded nor missing"
                            );
                            old.clone()
                        }
                    };
                    assert_eq!(after, &want, "{key}");
                }
            }
            Err(e) => {
                assert_eq!(state(&m), before, "a failed load ({e}) changed the model");
            }
        }
    }
});
