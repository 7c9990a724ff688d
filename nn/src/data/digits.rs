//! The 8×8 handwritten digits shipped in `nn/data/digits/digits.bin`.

use super::{permutation, ClassificationData};
use crate::error::{DataError, Error, Result};
use exactgrad_core::Philox;
use std::path::Path;

const FORMAT: &str = "digits";
const MAGIC: &[u8; 8] = b"EGDIGITS";
const VERSION: u32 = 1;
const HEADER_LEN: usize = 20;
const CHECKSUM_LEN: usize = 8;

/// The bundled file. It is embedded rather than read from a path so that examples, tests
/// and downstream programs find it from any working directory and without a copy step;
/// it costs 117 KB in binaries that call [`Digits::bundled`] (and nothing in others: the
/// linker drops it when unused). [`Digits::load`] reads another copy from a path. The
/// file lives inside this crate's directory (`data/digits/`), so the published package
/// carries it.
static BUNDLED: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/data/digits/digits.bin"
));

/// The 8×8 handwritten digits: 1,797 grey-scale images with pixel values 0..=16 and
/// labels 0..=9 (the UCI "Optical Recognition of Handwritten Digits" test set by
/// E. Alpaydin and C. Kaynak, as bundled by scikit-learn; CC BY 4.0, see
/// `data/digits/README.md` of this crate).
///
/// # File format (`digits.bin`, little-endian)
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 8 | magic `EGDIGITS` |
/// | 8 | 4 | version, u32 = 1 |
/// | 12 | 4 | image count N, u32 |
/// | 16 | 1 | height (8) |
/// | 17 | 1 | width (8) |
/// | 18 | 1 | classes (10) |
/// | 19 | 1 | largest pixel value (16) |
/// | 20 | N·h·w | pixels, u8, image after image, each row-major |
/// | 20 + N·h·w | N | labels, u8 |
/// | end − 8 | 8 | FNV-1a 64 of all preceding bytes, u64 |
///
/// [`Digits::parse`] rejects a file that is truncated, longer than its header implies,
/// has another magic or version, an impossible header, a checksum mismatch, or a pixel
/// or label outside the declared range.
///
/// # The fixed split
///
/// [`Digits::split`] puts 80 % of the images (rounded down: 1,437 of 1,797) in the
/// training set and the rest (360) in the test set, after shuffling the indices with
/// [`permutation`] from `Philox::new(Digits::SPLIT_SEED)`: the training set is the first
/// 1,437 indices of that permutation, the test set the last 360, each in permutation
/// order. The shuffle makes the test set a sample of the whole file rather than its
/// tail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Digits {
    pixels: Vec<u8>,
    labels: Vec<u8>,
    height: usize,
    width: usize,
    classes: usize,
    max_value: u8,
}

/// The fixed train/test split of [`Digits`] with features scaled to [0, 1].
#[derive(Clone, Debug, PartialEq)]
pub struct DigitsSplit {
    /// The training set (1,437 images of the bundled file).
    pub train: ClassificationData,
    /// The test set (360 images of the bundled file).
    pub test: ClassificationData,
    /// Indices into the file of the training images, in training-set order.
    pub train_indices: Vec<usize>,
    /// Indices into the file of the test images, in test-set order.
    pub test_indices: Vec<usize>,
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// FNV-1a 64 over bytes.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Digits {
    /// Images in the bundled file.
    pub const LEN: usize = 1797;
    /// Features per image (8 × 8).
    pub const FEATURES: usize = 64;
    /// Number of classes (digits 0..=9).
    pub const CLASSES: usize = 10;
    /// Training images in the bundled file's split.
    pub const TRAIN_LEN: usize = 1437;
    /// Test images in the bundled file's split.
    pub const TEST_LEN: usize = 360;
    /// Seed of the Philox stream that shuffles indices before the split.
    pub const SPLIT_SEED: u64 = 0x00d1_6175_5eed_2024;

    /// The bundled copy of the data set (parsed and checked on every call).
    pub fn bundled() -> Self {
        Self::parse(BUNDLED).expect("the bundled digits file is checked by the crate's tests")
    }

    /// Reads and parses a digits file (a regular file: a pipe or device is refused
    /// before it is opened).
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let bytes = crate::checkpoint::read_regular(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Self::parse(&bytes)?)
    }

    /// Parses the bytes of a digits file (format in the type's documentation).
    pub fn parse(bytes: &[u8]) -> Result<Self, DataError> {
        let got = bytes.len();
        let truncated = |part, needed| DataError::Truncated {
            format: FORMAT,
            part,
            needed,
            got,
        };
        let magic_len = got.min(MAGIC.len());
        if bytes[..magic_len] != MAGIC[..magic_len] {
            return Err(DataError::BadMagic {
                format: FORMAT,
                found: bytes[..magic_len].to_vec(),
                expected: MAGIC,
            });
        }
        if got < HEADER_LEN {
            return Err(truncated("the header", HEADER_LEN));
        }
        let version = read_u32(bytes, 8);
        if version != VERSION {
            return Err(DataError::UnsupportedVersion {
                format: FORMAT,
                found: version,
                supported: VERSION,
            });
        }
        let count = read_u32(bytes, 12) as usize;
        let (height, width, classes, max_value) = (
            bytes[16] as usize,
            bytes[17] as usize,
            bytes[18] as usize,
            bytes[19],
        );
        let bad = |message: String| DataError::BadHeader {
            format: FORMAT,
            message,
        };
        if height == 0 || width == 0 {
            return Err(bad(format!("image size {height}x{width} has no pixels")));
        }
        if classes == 0 {
            return Err(bad("the number of classes is 0".into()));
        }
        if max_value == 0 {
            return Err(bad("the largest pixel value is 0".into()));
        }
        let sizes = count
            .checked_mul(height * width)
            .and_then(|p| p.checked_add(HEADER_LEN))
            .and_then(|pe| Some((pe, pe.checked_add(count)?)))
            .and_then(|(pe, le)| Some((pe, le, le.checked_add(CHECKSUM_LEN)?)));
        let Some((pixels_end, labels_end, expected)) = sizes else {
            return Err(bad(format!(
                "{count} images of {height}x{width} pixels do not fit in memory"
            )));
        };
        if got < pixels_end {
            return Err(truncated("the pixels", pixels_end));
        }
        if got < labels_end {
            return Err(truncated("the labels", labels_end));
        }
        if got < expected {
            return Err(truncated("the checksum", expected));
        }
        if got > expected {
            return Err(DataError::TrailingBytes {
                format: FORMAT,
                expected,
                extra: got - expected,
            });
        }
        let stored = u64::from_le_bytes(bytes[labels_end..expected].try_into().expect("8 bytes"));
        let computed = fnv1a64(&bytes[..labels_end]);
        if stored != computed {
            return Err(DataError::Checksum {
                format: FORMAT,
                stored,
                computed,
            });
        }
        let pixels = &bytes[HEADER_LEN..pixels_end];
        let labels = &bytes[pixels_end..labels_end];
        let per_image = height * width;
        if let Some(i) = pixels.iter().position(|&p| p > max_value) {
            return Err(DataError::OutOfRange {
                format: FORMAT,
                what: "pixel",
                item: i / per_image,
                value: u32::from(pixels[i]),
                max: u32::from(max_value),
            });
        }
        if let Some(i) = labels.iter().position(|&l| l as usize >= classes) {
            return Err(DataError::OutOfRange {
                format: FORMAT,
                what: "label",
                item: i,
                value: u32::from(labels[i]),
                max: classes as u32 - 1,
            });
        }
        Ok(Self {
            pixels: pixels.to_vec(),
            labels: labels.to_vec(),
            height,
            width,
            classes,
            max_value,
        })
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no images.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Image height and width in pixels.
    pub fn image_size(&self) -> (usize, usize) {
        (self.height, self.width)
    }

    /// Number of classes.
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// The largest pixel value the file declares (16).
    pub fn max_value(&self) -> u8 {
        self.max_value
    }

    /// The raw pixels of image `index`, row-major.
    pub fn image(&self, index: usize) -> Option<&[u8]> {
        let n = self.height * self.width;
        let start = index.checked_mul(n)?;
        self.pixels.get(start..start.checked_add(n)?)
    }

    /// The labels of all images.
    pub fn labels(&self) -> &[u8] {
        &self.labels
    }

    /// The images at `indices` with pixels divided by the largest pixel value (÷16,
    /// exact in f32), so features lie in [0, 1].
    pub fn to_data(&self, indices: &[usize]) -> Result<ClassificationData> {
        let n = self.height * self.width;
        let scale = f32::from(self.max_value);
        let op = "Digits::to_data";
        let values = indices.len().checked_mul(n).ok_or_else(|| {
            Error::invalid(
                op,
                "indices",
                format!("{} images overflow usize", indices.len()),
            )
        })?;
        let mut features = exactgrad_core::backend::try_vec_with_capacity(op, values)?;
        let mut labels = exactgrad_core::backend::try_vec_with_capacity(op, indices.len())?;
        for &i in indices {
            let img = self.image(i).ok_or_else(|| {
                Error::invalid(
                    "Digits::to_data",
                    "indices",
                    format!("image {i} is out of range for {} images", self.len()),
                )
            })?;
            features.extend(img.iter().map(|&p| f32::from(p) / scale));
            labels.push(i64::from(self.labels[i]));
        }
        ClassificationData::new(features, labels, n, self.classes)
    }

    /// Indices of the fixed split: (train, test), see the type's documentation.
    pub fn split_indices(&self) -> Result<(Vec<usize>, Vec<usize>)> {
        let mut rng = Philox::new(Self::SPLIT_SEED);
        let mut order = permutation(self.len() as u32, &mut rng)?;
        let test = order.split_off(self.len() * 4 / 5);
        Ok((order, test))
    }

    /// The fixed train/test split with features in [0, 1].
    pub fn split(&self) -> Result<DigitsSplit> {
        let (train_indices, test_indices) = self.split_indices()?;
        Ok(DigitsSplit {
            train: self.to_data(&train_indices)?,
            test: self.to_data(&test_indices)?,
            train_indices,
            test_indices,
        })
    }
}
