#!/usr/bin/env python3
"""Writes nn/data/digits/digits.bin from scikit-learn's bundled 8x8 digits.

The source is `sklearn.datasets.load_digits()`: 1,797 images of 8x8 pixels with
integer values 0..16 and labels 0..9 (the test set of the UCI "Optical Recognition
of Handwritten Digits" data set by E. Alpaydin and C. Kaynak, as scikit-learn ships
it). The output format is described in nn/data/digits/README.md and parsed by
`exactgrad_nn::data::Digits`:

    offset  size        field
    0       8           magic b"EGDIGITS"
    8       4           format version, u32 little-endian = 1
    12      4           image count N, u32 little-endian
    16      1           image height (8)
    17      1           image width (8)
    18      1           number of classes (10)
    19      1           largest pixel value (16)
    20      N*64        pixels, u8, image after image, each row-major
    20+N*64 N           labels, u8
    end-8   8           FNV-1a 64 of every byte before it, u64 little-endian

Run with: .venv/bin/python tools/make_digits.py [output path]
The output is byte-for-byte reproducible.
"""

import pathlib
import struct
import sys

import numpy as np
from sklearn.datasets import load_digits

MAGIC = b"EGDIGITS"
VERSION = 1
HEIGHT, WIDTH, CLASSES, MAX_VALUE = 8, 8, 10, 16


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main() -> None:
    root = pathlib.Path(__file__).resolve().parent.parent
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else root / "nn" / "data" / "digits" / "digits.bin"

    digits = load_digits()
    data = np.asarray(digits.data)
    target = np.asarray(digits.target)
    n = data.shape[0]
    assert data.shape == (n, HEIGHT * WIDTH), data.shape
    assert target.shape == (n,), target.shape
    # The features are integers 0..16 stored as float64: check before narrowing to u8.
    assert np.all(data == np.round(data)) and data.min() >= 0 and data.max() <= MAX_VALUE
    assert target.min() >= 0 and target.max() < CLASSES
    pixels = data.astype(np.uint8)
    labels = target.astype(np.uint8)

    body = bytearray()
    body += MAGIC
    body += struct.pack("<II", VERSION, n)
    body += struct.pack("<BBBB", HEIGHT, WIDTH, CLASSES, MAX_VALUE)
    body += pixels.tobytes(order="C")
    body += labels.tobytes()
    body += struct.pack("<Q", fnv1a64(bytes(body)))

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(bytes(body))
    counts = np.bincount(labels, minlength=CLASSES)
    print(f"wrote {out} ({len(body)} bytes): {n} images, per-class counts {counts.tolist()}")


if __name__ == "__main__":
    main()
