//! The compile-time subset equals the digits file read at run time, and the arena's
//! computed size is what a training run needs.

use tape_digits::data::{self, PIXELS, TEST, TRAIN};
use tape_digits::{train, ARENA_BYTES, GRADIENT_BYTES, RECORD_BYTES};

#[test]
fn the_subset_is_the_files_first_images() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../nn/data/digits/digits.bin"
    );
    let file = std::fs::read(path).unwrap();
    let n = u32::from_le_bytes(file[12..16].try_into().unwrap()) as usize;
    let pixels = &file[20..20 + n * PIXELS];
    let labels = &file[20 + n * PIXELS..20 + n * (PIXELS + 1)];
    for i in 0..TRAIN {
        assert_eq!(
            &data::TRAIN_IMAGES[i][..],
            &pixels[i * PIXELS..(i + 1) * PIXELS]
        );
        assert_eq!(data::TRAIN_LABELS[i], labels[i]);
    }
    for i in 0..TEST {
        let j = TRAIN + i;
        assert_eq!(
            &data::TEST_IMAGES[i][..],
            &pixels[j * PIXELS..(j + 1) * PIXELS]
        );
        assert_eq!(data::TEST_LABELS[i], labels[j]);
    }
}

#[test]
fn features_are_pixels_over_sixteen() {
    let mut x = [0.0f32; PIXELS];
    data::features(&data::TRAIN_IMAGES[0], &mut x);
    for (&p, &v) in data::TRAIN_IMAGES[0].iter().zip(&x) {
        assert_eq!(v * 16.0, f32::from(p));
    }
}

#[test]
fn the_arena_is_exactly_the_peak_use() {
    assert_eq!(ARENA_BYTES, GRADIENT_BYTES + RECORD_BYTES);
    // 2410 parameters and 75 intermediate values, each array rounded up to 8 bytes.
    assert_eq!(GRADIENT_BYTES, 9944);
    let report = train(&mut ());
    assert!(report.status.is_ok());
    assert_eq!(report.peak_bytes, ARENA_BYTES);
}
