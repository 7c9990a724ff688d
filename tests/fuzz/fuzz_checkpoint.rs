//! Property-based fuzzing of the checkpoint reader: safetensors files written from random
//! entries (names of the model's tensors and others, every element type, shapes that fit
//! the model or not, extents near `u64::MAX`, data offsets that lie, NaN and ±∞ values,
//! metadata), then often damaged (a byte changed, the file cut, bytes appended, the
//! header length replaced), and plain random bytes. Each file goes through
//! `TensorFile::from_bytes` and `load_state_dict_with` (strict or not, non-finite values
//! allowed or not) into a small model, without panic and within a time limit, and:
//!
//! - a file written correctly is read back exactly (names, shapes, values, metadata);
//! - a load succeeds exactly when `docs/robustness.md` §4 says it should, copies the
//!   file's bits into the entries it names and reports the rest, and a load that fails
//!   changes nothing;
//! - every backend (`fuzz_support::check`) gives the same outcome and the same bits.

use super::fuzz_support::*;
use exactgrad::nn::checkpoint::{load_state_dict_with, LoadOptions, TensorFile};
use exactgrad::prelude::*;
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use std::collections::BTreeMap;
use std::time::Duration;

/// The model every file is loaded into: its entries (parameters and buffers) and shapes.
fn model<B: Backend>(b: &B) -> exactgrad::nn::Result<Sequential<B>> {
    let mut rng = Philox::new(3);
    Ok(Sequential::new()
        .push(Conv2d::new(b, Conv2dConfig::new(1, 2, [2, 2]), &mut rng)?)
        .push(BatchNorm2d::new(b, 2)?)
        .push(Flatten)
        .push(Linear::new(b, 8, 3, &mut rng)?))
}

/// The model's entries and their shapes, in `state_dict` order.
const ENTRIES: [(&str, &[usize]); 8] = [
    ("0.weight", &[2, 1, 2, 2]),
    ("0.bias", &[2]),
    ("1.weight", &[2]),
    ("1.bias", &[2]),
    ("3.weight", &[3, 8]),
    ("3.bias", &[3]),
    ("1.running_mean", &[2]),
    ("1.running_var", &[2]),
];

/// Element types as the format names them, with their sizes in bytes; the reader reads
/// all of them (F16 and F64 converted to f32, `docs/checkpoints.md`).
const DTYPES: [(&str, usize); 7] = [
    ("F32", 4),
    ("I64", 8),
    ("I32", 4),
    ("U8", 1),
    ("BOOL", 1),
    ("F16", 2),
    ("F64", 8),
];

/// One entry of a file's header.
#[derive(Clone, Debug)]
struct Entry {
    name: String,
    dtype: usize,
    shape: Vec<u64>,
    /// Replaces the true data offsets (relative to the entry's start and end).
    lie: Option<(u64, u64)>,
    fill: Fill,
    seed: u64,
}

/// How a written file is damaged afterwards.
#[derive(Clone, Debug)]
enum Damage {
    None,
    /// Byte `at` (modulo the length) XOR `mask`.
    Flip(usize, u8),
    /// Cut to `at` bytes (modulo the length).
    Cut(usize),
    /// Bytes appended.
    Append(Vec<u8>),
    /// The 8-byte header length replaced.
    HeaderLength(u64),
}

#[derive(Clone, Debug)]
struct FileSpec {
    entries: Vec<Entry>,
    metadata: Vec<(String, String)>,
    damage: Damage,
}

/// A name: one of the model's (with or without the prefix `m.`), or another.
fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => prop::sample::select(ENTRIES.iter().map(|e| e.0.to_string()).collect::<Vec<_>>()),
        3 => prop::sample::select(ENTRIES.iter().map(|e| format!("m.{}", e.0)).collect::<Vec<_>>()),
        1 => "[a-z0-9._]{0,12}",
        1 => prop::sample::select(vec![
            "m.".to_string(),
            "m.2.weight".to_string(),
            "m.0.weight.extra".to_string(),
            "é\u{1F600}".to_string(),
            "\"quoted\"".to_string(),
            "__metadata__".to_string(),
        ]),
    ]
}

/// A dimension of a file's shape: mostly small, sometimes at the extremes of u64.
fn file_dim() -> impl Strategy<Value = u64> {
    prop_oneof![
        10 => 0u64..=8,
        1 => prop::sample::select(vec![1u64 << 32, 1 << 62, u64::MAX, (1 << 61) + 1]),
    ]
}

fn entry() -> impl Strategy<Value = Entry> {
    (
        name(),
        prop_oneof![16 => Just(0usize), 1 => 1..DTYPES.len()],
        prop::collection::vec(file_dim(), 0..=4),
        any::<bool>(),
        prop::option::of((
            prop_oneof![Just(0u64), any::<u64>()],
            prop_oneof![Just(0u64), any::<u64>()],
        )),
        prop_oneof![8 => Just(false), 1 => Just(true)],
        fill(),
        any::<u64>(),
    )
        .prop_map(|(name, dtype, shape, fit, lie, lies, fill, seed)| {
            // Mostly a model entry with its own shape.
            let bare = name.strip_prefix("m.").unwrap_or(&name);
            let shape = match ENTRIES.iter().find(|e| e.0 == bare) {
                Some((_, s)) if fit => s.iter().map(|&d| d as u64).collect(),
                _ => shape,
            };
            Entry {
                name,
                dtype,
                shape,
                lie: if lies { lie } else { None },
                fill,
                seed,
            }
        })
}

fn file_spec() -> impl Strategy<Value = FileSpec> {
    (
        prop::collection::vec(entry(), 0..=10),
        prop::collection::vec(("[a-z]{0,4}", "[ -~]{0,8}"), 0..=2),
        prop_oneof![
            12 => Just(Damage::None),
            1 => (any::<usize>(), 1u8..).prop_map(|(a, m)| Damage::Flip(a, m)),
            1 => any::<usize>().prop_map(Damage::Cut),
            1 => prop::collection::vec(any::<u8>(), 1..16).prop_map(Damage::Append),
            1 => prop_oneof![any::<u64>(), Just(u64::MAX), Just(0u64), Just(1u64 << 32)]
                .prop_map(Damage::HeaderLength),
        ],
    )
        .prop_map(|(mut entries, metadata, damage)| {
            // Names are unique in a file.
            let mut seen = std::collections::BTreeSet::new();
            entries.retain(|e| seen.insert(e.name.clone()));
            FileSpec {
                entries,
                metadata,
                damage,
            }
        })
}

/// The values of an entry (as written, for F32; as read, for the integer types).
enum Values {
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Other,
}

impl Entry {
    /// The element count and byte size, when small enough to write.
    fn size(&self) -> Option<(usize, usize)> {
        let n = self.shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
        (n <= 512).then(|| (n as usize, n as usize * DTYPES[self.dtype].1))
    }

    /// The entry's data bytes and what a reader must find in them.
    fn data(&self) -> (Vec<u8>, Values) {
        let Some((n, bytes)) = self.size() else {
            return (Vec::new(), Values::Other);
        };
        let mut r = Philox::new(self.seed);
        match DTYPES[self.dtype].0 {
            "F32" => {
                let v = values(n, self.seed, self.fill);
                (
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                    Values::Floats(v),
                )
            }
            "I64" => {
                let v: Vec<i64> = (0..n).map(|_| r.next_u64() as i64).collect();
                (
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                    Values::Ints(v),
                )
            }
            "I32" => {
                let v: Vec<i32> = (0..n).map(|_| r.next_u64() as i32).collect();
                (
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                    Values::Ints(v.iter().map(|&x| i64::from(x)).collect()),
                )
            }
            "U8" | "BOOL" => {
                let bool = DTYPES[self.dtype].0 == "BOOL";
                let v: Vec<u8> = (0..n)
                    .map(|_| r.next_u64() as u8 & if bool { 1 } else { 0xFF })
                    .collect();
                let ints = v.iter().map(|&x| i64::from(x)).collect();
                (v, Values::Ints(ints))
            }
            _ => (
                (0..bytes).map(|_| r.next_u64() as u8).collect(),
                Values::Other,
            ),
        }
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

impl FileSpec {
    /// The file's bytes and, for each entry, what a reader must find.
    fn write(&self) -> (Vec<u8>, Vec<Values>) {
        let mut header = Vec::new();
        let mut data = Vec::new();
        let mut expected = Vec::new();
        if !self.metadata.is_empty() {
            let m: Vec<String> = self
                .metadata
                .iter()
                .map(|(k, v)| format!("{}:{}", json_string(k), json_string(v)))
                .collect();
            header.push(format!("\"__metadata__\":{{{}}}", m.join(",")));
        }
        for e in &self.entries {
            let (bytes, values) = e.data();
            let start = data.len() as u64;
            let end = start + bytes.len() as u64;
            let (s, t) = match e.lie {
                None => (start, end),
                Some((a, b)) => (start.wrapping_add(a), end.wrapping_add(b)),
            };
            let shape: Vec<String> = e.shape.iter().map(|d| d.to_string()).collect();
            header.push(format!(
                "{}:{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{s},{t}]}}",
                json_string(&e.name),
                DTYPES[e.dtype].0,
                shape.join(",")
            ));
            data.extend(bytes);
            expected.push(values);
        }
        let mut header = format!("{{{}}}", header.join(",")).into_bytes();
        while header.len() % 8 != 0 {
            header.push(b' ');
        }
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend(header);
        file.extend(data);
        match &self.damage {
            Damage::None => {}
            Damage::Flip(at, mask) => {
                let i = at % file.len();
                file[i] ^= mask;
            }
            Damage::Cut(at) => file.truncate(at % file.len()),
            Damage::Append(b) => file.extend(b),
            Damage::HeaderLength(l) => file[..8].copy_from_slice(&l.to_le_bytes()),
        }
        (file, expected)
    }

    /// Whether every entry was written as it claims (a valid file, unless a shape is too
    /// large to write).
    fn honest(&self) -> bool {
        matches!(self.damage, Damage::None)
            && self
                .entries
                .iter()
                .all(|e| e.lie.is_none() && e.size().is_some())
            && !self.entries.iter().any(|e| e.name == "__metadata__")
    }
}

// ----- the load and its specification ---------------------------------------------------

#[derive(Clone, Debug)]
struct LoadCase {
    file: Vec<u8>,
    prefix: String,
    options: LoadOptions,
}

impl Case for LoadCase {
    fn call<B: Backend>(&self, b: &B) -> CaseResult<Outcome<B>> {
        let m = model(b)?;
        let f = TensorFile::from_bytes(&self.file)?;
        load_state_dict_with(&m, &f, &self.prefix, self.options)?;
        let mut state: Vec<Tensor<B>> = m.parameters();
        state.extend(m.named_buffers().into_iter().map(|(_, t)| t));
        Ok(Outcome {
            outputs: Vec::new(),
            state,
            leaves: Vec::new(),
        })
    }
}

/// What `load_state_dict_with` must do with a file that was read: `Some(missing,
/// unexpected)` when it succeeds, `None` when it fails (docs/robustness.md §4).
fn expected_load(
    f: &TensorFile,
    prefix: &str,
    o: LoadOptions,
) -> Option<(Vec<String>, Vec<String>)> {
    let mut missing = Vec::new();
    let mut fatal = false;
    for (n, shape) in ENTRIES {
        let key = format!("{prefix}{n}");
        match f.floats(&key) {
            Ok((s, v)) => {
                fatal |= s != shape || (!o.allow_non_finite && v.iter().any(|x| !x.is_finite()))
            }
            Err(_) if f.dtype(&key).is_some() => fatal = true,
            Err(_) => missing.push(key),
        }
    }
    let unexpected: Vec<String> = f
        .names()
        .into_iter()
        .filter(|n| {
            n.starts_with(prefix) && !ENTRIES.iter().any(|(e, _)| format!("{prefix}{e}") == **n)
        })
        .map(str::to_string)
        .collect();
    if fatal || (o.strict && !(missing.is_empty() && unexpected.is_empty())) {
        None
    } else if o.strict {
        Some((Vec::new(), Vec::new()))
    } else {
        Some((missing, unexpected))
    }
}

fn bits_of<B: Backend>(m: &Sequential<B>) -> BTreeMap<String, Vec<u32>> {
    let mut out = BTreeMap::new();
    let mut all = m.named_parameters();
    all.extend(m.named_buffers());
    for (n, t) in all {
        out.insert(n, t.to_vec().unwrap().iter().map(|v| v.to_bits()).collect());
    }
    out
}

/// Reads and loads `file` on the scalar reference and checks the result against the
/// specification (and, for an honest file, against what was written).
fn check_against_spec(
    spec: Option<&FileSpec>,
    file: &[u8],
    expected: &[Values],
    prefix: &str,
    options: LoadOptions,
) {
    let b = ScalarRefBackend;
    let honest = spec.filter(|s| s.honest());
    let f = match (TensorFile::from_bytes(file), honest) {
        (Ok(f), _) => f,
        // The reader reads every element type of `DTYPES`: a valid file is never refused.
        (Err(e), Some(_)) => panic!("a valid file was refused: {e}"),
        (Err(_), None) => return,
    };
    if let Some(spec) = honest {
        // Read back exactly as written.
        let mut names: Vec<&str> = spec.entries.iter().map(|e| e.name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(f.names(), names, "names");
        for (e, v) in spec.entries.iter().zip(expected) {
            let shape: Vec<usize> = e.shape.iter().map(|&d| d as usize).collect();
            assert_eq!(f.dtype(&e.name).as_deref(), Some(DTYPES[e.dtype].0));
            match v {
                Values::Floats(v) => {
                    let (s, got) = f.floats(&e.name).unwrap();
                    assert_eq!(s, shape, "{}", e.name);
                    assert_eq!(
                        got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        v.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        "{}",
                        e.name
                    );
                }
                Values::Ints(v) => {
                    let (s, got) = f.ints(&e.name).unwrap();
                    assert_eq!((s, got), (&shape[..], &v[..]), "{}", e.name);
                }
                Values::Other => {}
            }
        }
        for (k, _) in &spec.metadata {
            // A repeated key: JSON readers keep the last value.
            let last = spec.metadata.iter().rev().find(|(k2, _)| k2 == k).unwrap();
            assert_eq!(f.metadata(k), Some(last.1.as_str()), "metadata {k}");
        }
    }
    let m = model(&b).unwrap();
    let before = bits_of(&m);
    let r = load_state_dict_with(&m, &f, prefix, options);
    let after = bits_of(&m);
    match (r, expected_load(&f, prefix, options)) {
        (Ok(report), Some((missing, unexpected))) => {
            assert_eq!(report.missing, missing);
            assert_eq!(report.unexpected, unexpected);
            for (n, _) in ENTRIES {
                let key = format!("{prefix}{n}");
                let want: Vec<u32> = match f.floats(&key) {
                    Ok((_, v)) => v.iter().map(|x| x.to_bits()).collect(),
                    Err(_) => before[n].clone(),
                };
                assert_eq!(after[n], want, "{n} after a successful load");
            }
        }
        (Err(e), None) => {
            assert_eq!(after, before, "a failed load ({e}) changed the model");
            assert!(!e.to_string().is_empty());
        }
        (r, want) => panic!("load gave {r:?}, the specification says {want:?}"),
    }
}

fn options() -> impl Strategy<Value = (String, LoadOptions)> {
    (
        prop_oneof![
            Just(String::new()),
            Just("m.".to_string()),
            Just("0.".to_string())
        ],
        any::<bool>(),
        prop::bool::weighted(0.3),
    )
        .prop_map(|(p, strict, allow_non_finite)| {
            (
                p,
                LoadOptions {
                    strict,
                    allow_non_finite,
                },
            )
        })
}

proptest! {
    #![proptest_config(config(2000))]

    #[test]
    fn written_and_damaged_files(spec in file_spec(), (prefix, options) in options()) {
        let (file, expected) = spec.write();
        let case = LoadCase { file: file.clone(), prefix: prefix.clone(), options };
        check(case)?;
        bounded("the specification check", Duration::from_secs(20), move || {
            check_against_spec(Some(&spec), &file, &expected, &prefix, options)
        })?;
    }

    #[test]
    fn random_bytes(
        bytes in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..64),
            // A plausible header length in front of random bytes.
            (0u64..120, prop::collection::vec(any::<u8>(), 0..120)).prop_map(|(n, rest)| {
                let mut v = n.to_le_bytes().to_vec();
                v.extend(rest);
                v
            }),
            // A plausible header length and the start of a JSON object.
            (prop::collection::vec(any::<u8>(), 0..80), "[{}\\[\\]\":,a-zA-Z0-9_ ]{0,80}").prop_map(|(rest, json)| {
                let mut h = format!("{{{json}").into_bytes();
                h.extend(rest);
                let mut v = (h.len() as u64).to_le_bytes().to_vec();
                v.extend(h);
                v
            }),
        ],
        (prefix, options) in options(),
    ) {
        let case = LoadCase { file: bytes.clone(), prefix: prefix.clone(), options };
        check(case)?;
        bounded("the specification check", Duration::from_secs(20), move || {
            check_against_spec(None, &bytes, &[], &prefix, options)
        })?;
    }
}

/// The generator writes files the reader accepts and files it must refuse, and loads
/// that succeed and fail (so that the properties above test both sides).
#[test]
fn the_generator_reaches_both_outcomes() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let (mut read, mut refused, mut loaded, mut rejected) = (0, 0, 0, 0);
    for _ in 0..400 {
        let spec = file_spec().new_tree(&mut runner).unwrap().current();
        let (file, _) = spec.write();
        match TensorFile::from_bytes(&file) {
            Ok(f) => {
                read += 1;
                let m = model(&ScalarRefBackend).unwrap();
                let o = LoadOptions {
                    strict: false,
                    ..LoadOptions::default()
                };
                match load_state_dict_with(&m, &f, "", o) {
                    Ok(_) => loaded += 1,
                    Err(_) => rejected += 1,
                }
            }
            Err(_) => refused += 1,
        }
    }
    assert!(read > 100 && refused > 50, "read {read}, refused {refused}");
    assert!(
        loaded > 20 && rejected > 20,
        "loaded {loaded}, rejected {rejected}"
    );
}
