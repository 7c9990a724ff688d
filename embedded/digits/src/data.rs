//! The images: a fixed subset of the 8×8 digits file shipped with `exactgrad-nn`
//! (`nn/data/digits/digits.bin`, format in `exactgrad_nn::data::Digits`), cut out at
//! compile time so that only the subset reaches the binary (flash on a device).
//!
//! The training set is the file's first [`TRAIN`] images, the held-out set the next
//! [`TEST`]. The file interleaves the classes, so both are close to balanced. The file's
//! header, checksum and the subset's pixel and label ranges are checked when compiling:
//! a different or damaged file does not build.

/// Pixels per image (8 × 8).
pub const PIXELS: usize = 64;
/// Number of classes.
pub const CLASSES: usize = 10;
/// Training images (the file's first).
pub const TRAIN: usize = 512;
/// Held-out images (the ones after the training images).
pub const TEST: usize = 256;
/// The largest pixel value; pixels are scaled by its inverse (a power of two: exact).
pub const MAX_PIXEL: u8 = 16;

const FILE: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../nn/data/digits/digits.bin"
));
const HEADER: usize = 20;

const fn u32_at(at: usize) -> u32 {
    u32::from_le_bytes([FILE[at], FILE[at + 1], FILE[at + 2], FILE[at + 3]])
}

/// Images in the file.
const IMAGES: usize = u32_at(12) as usize;

/// FNV-1a 64 of the file without its last 8 bytes (the format's checksum).
const fn checksum() -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut i = 0;
    while i < FILE.len() - 8 {
        h ^= FILE[i] as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
        i += 1;
    }
    h
}

const fn stored_checksum() -> u64 {
    let at = FILE.len() - 8;
    (u32_at(at) as u64) | ((u32_at(at + 4) as u64) << 32)
}

const fn magic_ok() -> bool {
    let magic = b"EGDIGITS";
    let mut i = 0;
    while i < magic.len() {
        if FILE[i] != magic[i] {
            return false;
        }
        i += 1;
    }
    true
}

const _: () = {
    assert!(FILE.len() > HEADER + 8, "digits file truncated");
    assert!(magic_ok(), "not a digits file");
    assert!(u32_at(8) == 1, "unknown digits file version");
    assert!(
        FILE[16] == 8 && FILE[17] == 8,
        "digits images are not 8 x 8"
    );
    assert!(
        FILE[18] as usize == CLASSES,
        "digits file has another class count"
    );
    assert!(FILE[19] == MAX_PIXEL, "digits file has another pixel range");
    assert!(
        FILE.len() == HEADER + IMAGES * (PIXELS + 1) + 8,
        "digits file length"
    );
    assert!(TRAIN + TEST <= IMAGES, "subset larger than the file");
    assert!(checksum() == stored_checksum(), "digits file checksum");
};

const fn images<const N: usize>(first: usize) -> [[u8; PIXELS]; N] {
    let mut out = [[0u8; PIXELS]; N];
    let mut i = 0;
    while i < N {
        let mut p = 0;
        while p < PIXELS {
            let v = FILE[HEADER + (first + i) * PIXELS + p];
            assert!(v <= MAX_PIXEL, "pixel out of range");
            out[i][p] = v;
            p += 1;
        }
        i += 1;
    }
    out
}

const fn labels<const N: usize>(first: usize) -> [u8; N] {
    let mut out = [0u8; N];
    let mut i = 0;
    while i < N {
        let v = FILE[HEADER + IMAGES * PIXELS + first + i];
        assert!((v as usize) < CLASSES, "label out of range");
        out[i] = v;
        i += 1;
    }
    out
}

/// Pixels (0..=16) of the training images, image after image, row-major.
pub static TRAIN_IMAGES: [[u8; PIXELS]; TRAIN] = images(0);
/// Labels (0..=9) of the training images.
pub static TRAIN_LABELS: [u8; TRAIN] = labels(0);
/// Pixels of the held-out images.
pub static TEST_IMAGES: [[u8; PIXELS]; TEST] = images(TRAIN);
/// Labels of the held-out images.
pub static TEST_LABELS: [u8; TEST] = labels(TRAIN);

/// An image as the network's input: each pixel divided by 16 (exact in `f32`).
pub fn features(image: &[u8; PIXELS], out: &mut [f32; PIXELS]) {
    for (o, &p) in out.iter_mut().zip(image) {
        *o = f32::from(p) / f32::from(MAX_PIXEL);
    }
}
