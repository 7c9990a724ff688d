//! The digits file parser, the fixed split and the mini-batch sampler.

use exactgrad_backends::ScalarRefBackend;
use exactgrad_core::Philox;
use exactgrad_nn::data::{
    permutation, BatchSampler, ClassificationData, DataLoader, Digits, LoaderPosition, LoaderState,
};
use exactgrad_nn::{DataError, Error};

fn bundled_bytes() -> Vec<u8> {
    std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/data/digits/digits.bin"
    ))
    .unwrap()
}

fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Rewrites the checksum after editing the body, so that a later check is reached.
fn reseal(bytes: &mut [u8]) {
    let n = bytes.len() - 8;
    let h = fnv1a64(&bytes[..n]);
    bytes[n..].copy_from_slice(&h.to_le_bytes());
}

#[test]
fn bundled_file_has_the_documented_contents() {
    let d = Digits::bundled();
    assert_eq!(d.len(), Digits::LEN);
    assert_eq!(d.image_size(), (8, 8));
    assert_eq!(d.classes(), Digits::CLASSES);
    assert_eq!(d.max_value(), 16);
    let mut counts = [0usize; 10];
    for &l in d.labels() {
        counts[l as usize] += 1;
    }
    assert_eq!(counts, [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]);
    // The first image of scikit-learn's copy is a zero.
    assert_eq!(d.labels()[..10], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    assert_eq!(d.image(0).unwrap()[..8], [0, 0, 5, 13, 9, 1, 0, 0]);
    assert_eq!(
        Digits::load(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/data/digits/digits.bin"
        ))
        .unwrap(),
        d
    );
}

#[test]
fn split_is_fixed_disjoint_and_scaled() {
    let d = Digits::bundled();
    let s = d.split().unwrap();
    assert_eq!(
        (s.train.len(), s.test.len()),
        (Digits::TRAIN_LEN, Digits::TEST_LEN)
    );
    let mut all: Vec<usize> = s
        .train_indices
        .iter()
        .chain(&s.test_indices)
        .copied()
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..Digits::LEN).collect::<Vec<_>>());
    assert_eq!(s, d.split().unwrap());
    assert!(s.train.features().iter().all(|&v| (0.0..=1.0).contains(&v)));
    let i = s.test_indices[0];
    let row: Vec<f32> = d
        .image(i)
        .unwrap()
        .iter()
        .map(|&p| f32::from(p) / 16.0)
        .collect();
    assert_eq!(s.test.row(0).unwrap(), &row[..]);
    assert_eq!(s.test.labels()[0], i64::from(d.labels()[i]));
    // Pinned so that a change of the split (seed, permutation, rounding) is noticed.
    assert_eq!(
        s.train_indices[..5],
        [1332, 715, 661, 564, 308],
        "train head"
    );
    assert_eq!(
        s.test_indices[..5],
        [156, 1618, 1709, 143, 356],
        "test head"
    );
}

#[test]
fn truncated_files_are_rejected_with_the_missing_part() {
    let bytes = bundled_bytes();
    let cases: [(usize, &str); 5] = [
        (3, "the header"),
        (12, "the header"),
        (1000, "the pixels"),
        (20 + 1797 * 64 + 5, "the labels"),
        (bytes.len() - 1, "the checksum"),
    ];
    for (len, part) in cases {
        let err = Digits::parse(&bytes[..len]).unwrap_err();
        match (&err, part) {
            (DataError::Truncated { part: p, got, .. }, _) => {
                assert_eq!((*p, *got), (part, len));
            }
            _ => panic!("{len} bytes: unexpected error {err}"),
        }
        assert!(!err.to_string().is_empty());
    }
    let err = Digits::parse(&bytes[..1000]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "digits file truncated: the pixels needs 115028 bytes in total, the file has 1000"
    );
    assert!(matches!(
        Digits::parse(&[]),
        Err(DataError::Truncated { .. }) | Err(DataError::BadMagic { .. })
    ));
}

#[test]
fn corrupt_files_are_rejected() {
    let bytes = bundled_bytes();

    let mut b = bytes.clone();
    b[0] = b'X';
    assert!(matches!(Digits::parse(&b), Err(DataError::BadMagic { .. })));

    let mut b = bytes.clone();
    b[8] = 2;
    assert!(matches!(
        Digits::parse(&b),
        Err(DataError::UnsupportedVersion {
            found: 2,
            supported: 1,
            ..
        })
    ));

    let mut b = bytes.clone();
    b[500] ^= 1;
    let err = Digits::parse(&b).unwrap_err();
    assert!(matches!(err, DataError::Checksum { .. }), "{err}");
    assert!(err.to_string().contains("corrupt"), "{err}");

    let mut b = bytes.clone();
    b.push(0);
    assert!(matches!(
        Digits::parse(&b),
        Err(DataError::TrailingBytes { extra: 1, .. })
    ));

    let mut b = bytes.clone();
    b[20 + 64 * 3 + 5] = 17;
    reseal(&mut b);
    let err = Digits::parse(&b).unwrap_err();
    assert_eq!(
        err,
        DataError::OutOfRange {
            format: "digits",
            what: "pixel",
            item: 3,
            value: 17,
            max: 16
        }
    );

    let mut b = bytes.clone();
    b[20 + 1797 * 64 + 42] = 10;
    reseal(&mut b);
    assert!(matches!(
        Digits::parse(&b),
        Err(DataError::OutOfRange {
            what: "label",
            item: 42,
            value: 10,
            ..
        })
    ));

    let mut b = bytes.clone();
    b[16] = 0;
    assert!(matches!(
        Digits::parse(&b),
        Err(DataError::BadHeader { .. })
    ));

    // A count that does not match the file size is a truncation.
    let mut b = bytes.clone();
    b[12..16].copy_from_slice(&1798u32.to_le_bytes());
    assert!(matches!(
        Digits::parse(&b),
        Err(DataError::Truncated { .. })
    ));

    let err = Digits::load("/nonexistent/digits.bin").unwrap_err();
    assert!(
        matches!(err, Error::Io { .. }) && err.to_string().contains("/nonexistent/digits.bin"),
        "{err}"
    );
}

#[test]
fn permutation_is_seeded_and_complete() {
    let p = permutation(100, &mut Philox::new(1)).unwrap();
    let mut s = p.clone();
    s.sort_unstable();
    assert_eq!(s, (0..100).collect::<Vec<_>>());
    assert_eq!(p, permutation(100, &mut Philox::new(1)).unwrap());
    assert_ne!(p, permutation(100, &mut Philox::new(2)).unwrap());
    assert_eq!(
        permutation(0, &mut Philox::new(1)).unwrap(),
        Vec::<usize>::new()
    );
    assert_eq!(permutation(1, &mut Philox::new(1)).unwrap(), vec![0]);
}

#[test]
fn batch_sampler_orders_epochs() {
    let s = BatchSampler::new(10, 4).unwrap();
    assert_eq!(
        s.batches(0).unwrap(),
        vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]
    );
    assert_eq!(s.num_batches(), 3);
    let d = s.drop_last(true);
    assert_eq!(
        d.batches(3).unwrap(),
        vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7]]
    );
    assert_eq!(d.num_batches(), 2);

    let sh = BatchSampler::new(50, 8).unwrap().shuffle(9);
    let (e0, e1) = (sh.order(0).unwrap(), sh.order(1).unwrap());
    assert_ne!(e0, e1, "epochs differ");
    assert_eq!(e0, sh.order(0).unwrap(), "an epoch replays");
    assert_ne!(
        e0,
        BatchSampler::new(50, 8)
            .unwrap()
            .shuffle(10)
            .order(0)
            .unwrap(),
        "seeds differ"
    );
    let flat: Vec<usize> = sh.batches(1).unwrap().concat();
    assert_eq!(flat, e1);

    assert!(BatchSampler::new(10, 0).is_err());
}

#[test]
fn loader_builds_batches() {
    let b = ScalarRefBackend;
    let data = ClassificationData::new(
        (0..12).map(|v| v as f32).collect(),
        vec![0, 1, 2, 1, 0, 2],
        2,
        3,
    )
    .unwrap();
    let loader = DataLoader::new(&b, &data, 4).unwrap();
    let batches: Vec<_> = loader.iter().collect::<Result<_, _>>().unwrap();
    assert_eq!(batches.len(), 2);
    assert_eq!(batches[0].inputs.dims(), [4, 2]);
    assert_eq!(
        batches[1].inputs.to_vec().unwrap(),
        vec![8.0, 9.0, 10.0, 11.0]
    );
    assert_eq!(batches[1].targets, vec![0, 2]);

    let shuffled = DataLoader::new(&b, &data, 6).unwrap().shuffle(3);
    let one = shuffled.batches_of_epoch(5).next().unwrap().unwrap();
    assert_eq!(shuffled.position(), LoaderPosition::default(), "untouched");
    let order = shuffled.sampler().order(5).unwrap();
    let want: Vec<f32> = order
        .iter()
        .flat_map(|&i| [2.0 * i as f32, 2.0 * i as f32 + 1.0])
        .collect();
    assert_eq!(one.inputs.to_vec().unwrap(), want);

    assert!(ClassificationData::new(vec![0.0; 5], vec![0, 1], 2, 3).is_err());
    assert!(ClassificationData::new(vec![0.0; 4], vec![0, 3], 2, 3).is_err());
    assert!(data.batch(&b, &[6]).is_err());
    assert_eq!(data.subset(&[5, 0]).unwrap().labels(), &[2, 0]);
}

#[test]
fn the_loader_advances_its_own_position_and_restores_it() {
    let b = ScalarRefBackend;
    let data =
        ClassificationData::new((0..20).map(|v| v as f32).collect(), vec![0; 10], 2, 1).unwrap();
    let loader = DataLoader::new(&b, &data, 4).unwrap().shuffle(9); // 3 batches per epoch
    assert_eq!(loader.iter().next().unwrap().unwrap().targets.len(), 4);
    assert_eq!(loader.position(), LoaderPosition { epoch: 0, batch: 1 });
    // The rest of the epoch, then the end of it moves to the next one.
    assert_eq!(loader.iter().count(), 2);
    assert_eq!(loader.position(), LoaderPosition { epoch: 1, batch: 0 });
    assert_eq!(loader.epoch(), 1);
    let epoch1: Vec<_> = loader
        .iter()
        .take(3)
        .map(|b| b.unwrap().inputs.to_vec().unwrap())
        .collect();
    let want: Vec<_> = loader
        .batches_of_epoch(1)
        .map(|b| b.unwrap().inputs.to_vec().unwrap())
        .collect();
    assert_eq!(epoch1, want);
    assert_eq!(loader.position(), LoaderPosition { epoch: 1, batch: 3 });
    assert_eq!(loader.epoch(), 2, "an epoch used up counts as the next");

    // A state saved mid-epoch restores into a loader built with another seed.
    loader
        .set_position(LoaderPosition { epoch: 4, batch: 2 })
        .unwrap();
    let state = loader.state();
    let next = loader
        .iter()
        .next()
        .unwrap()
        .unwrap()
        .inputs
        .to_vec()
        .unwrap();
    let other = DataLoader::new(&b, &data, 4).unwrap().shuffle(1);
    other.restore_state(&state).unwrap();
    assert_eq!(other.state(), state);
    let got = other
        .iter()
        .next()
        .unwrap()
        .unwrap()
        .inputs
        .to_vec()
        .unwrap();
    assert_eq!(got, next, "same seed, same position, same batch");

    // States of another configuration, or beyond an epoch, are refused unchanged.
    let wrong = DataLoader::new(&b, &data, 5).unwrap();
    let err = wrong.restore_state(&state).unwrap_err().to_string();
    assert!(err.contains("batches of 4"), "{err}");
    assert_eq!(wrong.position(), LoaderPosition::default());
    let beyond = LoaderState {
        position: LoaderPosition { epoch: 0, batch: 4 },
        ..state
    };
    assert!(other.restore_state(&beyond).is_err());
    assert!(other.set_position(beyond.position).is_err());

    // An epoch without batches still ends, so `while loader.epoch() < n` terminates.
    let none = DataLoader::new(&b, &data, 11).unwrap().drop_last(true);
    assert_eq!(none.num_batches(), 0);
    while none.epoch() < 3 {
        assert!(none.iter().next().is_none());
    }
}

/// Set in the child process of the next test.
const BATCHES_CHILD: &str = "EXACTGRAD_BATCHES_CHILD";

/// `BatchSampler::batches` copied the epoch's order into its batches with infallible
/// allocations: an epoch whose order fitted in memory but whose copy did not aborted the
/// process. The child process limits its own address space to what it uses plus 96 MiB
/// (with `prlimit`), then asks for an epoch of 2^23 items (a 64 MiB order): in one batch
/// (now the order itself: the right answer), in two (a copy that no longer fits: an
/// error), and as a loader's batch (whose indices are copied: an error). None may abort.
#[cfg(target_os = "linux")]
#[test]
fn batches_that_memory_cannot_hold_are_an_error_not_an_abort() {
    let n = 1usize << 23;
    if std::env::var_os(BATCHES_CHILD).is_some() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let vm_kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmSize:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap();
        let limit = (vm_kib + 96 * 1024) * 1024;
        let limited = std::process::Command::new("prlimit")
            .arg(format!("--pid={}", std::process::id()))
            .arg(format!("--as={limit}"))
            .status()
            .is_ok_and(|s| s.success());
        let one = BatchSampler::new(n, n).unwrap().batches(0).unwrap();
        assert_eq!(one.len(), 1);
        assert!(one[0].iter().enumerate().all(|(i, &j)| i == j));
        drop(one);
        let two = BatchSampler::new(n, n / 2).unwrap().batches(0);
        match two {
            Err(e) => {
                assert!(limited, "refused without a limit: {e}");
                assert!(e.to_string().contains("BatchSampler::batches"), "{e}");
            }
            Ok(b) => {
                // Without prlimit the copy fits: then it must be right.
                assert!(!limited, "two batches of 32 MiB copied under the limit");
                assert_eq!(b.len(), 2);
                assert!(b[1].iter().enumerate().all(|(i, &j)| j == n / 2 + i));
            }
        }
        // A loader's batch of the whole epoch: the order (64 MiB, kept by the loader) and
        // the batch's indices (another 64 MiB, which no longer fit).
        struct Counting(usize);
        impl exactgrad_nn::data::Dataset for Counting {
            type Item = i64;
            fn len(&self) -> usize {
                self.0
            }
            fn get(&self, index: usize) -> exactgrad_nn::Result<i64> {
                Ok(index as i64)
            }
        }
        let loader = DataLoader::new(&ScalarRefBackend, Counting(n), n).unwrap();
        match loader.iter().next().unwrap() {
            Err(e) => assert!(
                limited && e.to_string().contains("DataLoader::batch"),
                "{e}"
            ),
            Ok(batch) => {
                assert!(!limited, "a batch of 64 MiB built under the limit");
                assert_eq!(batch.len(), n);
            }
        }
        println!("child: batches returned (limited: {limited})");
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "data::batches_that_memory_cannot_hold_are_an_error_not_an_abort",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(BATCHES_CHILD, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("child: batches returned"),
        "child failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn batches_are_the_chunks_of_the_order() {
    for (len, bs, drop_last) in [
        (10, 3, false),
        (10, 3, true),
        (9, 3, true),
        (2, 3, true),
        (2, 3, false),
        (0, 4, false),
        (7, 7, false),
    ] {
        let s = BatchSampler::new(len, bs)
            .unwrap()
            .shuffle(4)
            .drop_last(drop_last);
        let order = s.order(2).unwrap();
        let want: Vec<Vec<usize>> = order
            .chunks(bs)
            .filter(|c| !drop_last || c.len() == bs)
            .map(<[usize]>::to_vec)
            .collect();
        assert_eq!(s.batches(2).unwrap(), want, "{len} {bs} {drop_last}");
        assert_eq!(want.len(), s.num_batches());
    }
}
