#!/usr/bin/env python3
"""Regenerates testdata/text/pride_and_prejudice.txt, the text that
`examples/char_gpt.rs` learns from, from Debian's `r-cran-janeaustenr` package.

Usage: python3 tools/austen_text.py [--deb FILE.deb] [--book prideprejudice] [--out FILE]

Without --deb it runs `apt-get download r-cran-janeaustenr` in a temporary folder (any
Debian or Ubuntu machine with package lists; no root needed for a download). The package
holds the six novels of Jane Austen (public domain, from Project Gutenberg) as R data:
a lazy-load database (`data/Rdata.rdx`: a gzip-compressed serialized index of offsets;
`data/Rdata.rdb`: one zlib-compressed serialized object per novel, a character vector of
its lines). This script reads that format itself (R's XDR serialization, versions 2 and
3, just the types these files use), so it needs neither R nor any Python package. The
lines are joined with "\\n" and written as UTF-8 with a final newline; nothing else is
changed. The script prints the file's size and SHA-256.
"""

import argparse
import gzip
import hashlib
import io
import os
import struct
import subprocess
import sys
import tarfile
import tempfile
import zlib

PACKAGE = "r-cran-janeaustenr"
DATA = "usr/lib/R/site-library/janeaustenr/data/"


class Unserialize:
    """A reader of R's XDR serialization format ("X\\n"), for the object types of the
    package's data files: NULL, symbols, pairlists, character, integer, logical, double
    and generic vectors, with attributes and back-references."""

    def __init__(self, data):
        self.data, self.pos, self.refs = data, 0, []

    def int(self):
        (v,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return v

    def read(self):
        if self.data[:2] != b"X\n":
            raise ValueError("not R's XDR serialization format")
        self.pos = 2
        version = self.int()
        self.int()  # the writer's R version
        self.int()  # the oldest R version that reads it
        if version == 3:
            length = self.int()  # the native encoding's name
            self.pos += length
        return self.item()

    def item(self):
        flags = self.int()
        kind, has_attr, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind in (242, 253, 254):  # empty environment, base environment, NULL
            return None
        if kind == 255:  # a reference to an earlier symbol
            return self.refs[(flags >> 8) - 1]
        if kind == 1:  # symbol: its name, a CHARSXP
            name = self.item()
            self.refs.append(name)
            return name
        if kind == 9:  # CHARSXP: a string, or NA (-1)
            n = self.int()
            if n == -1:
                return None
            text = self.data[self.pos : self.pos + n].decode("utf-8")
            self.pos += n
            return text
        if kind in (2, 6):  # pairlist (attributes, tag, value, rest)
            if has_attr:
                self.item()
            tag = self.item() if has_tag else None
            value = self.item()
            rest = self.item()
            return [(tag, value)] + (rest or [])
        if kind in (10, 13, 14, 16, 19):  # logical, integer, double, character, list
            n = self.int()
            if kind in (16, 19):
                values = [self.item() for _ in range(n)]
            elif kind == 14:
                values = list(struct.unpack_from(f">{n}d", self.data, self.pos))
                self.pos += 8 * n
            else:
                values = list(struct.unpack_from(f">{n}i", self.data, self.pos))
                self.pos += 4 * n
            attrs = dict(self.item()) if has_attr else {}
            return (values, attrs)
        raise ValueError(f"R object type {kind} is not one this script reads")


def deb_member(deb, name):
    """The bytes of file `name` in the data archive of the Debian package `deb`."""
    with open(deb, "rb") as f:
        blob = f.read()
    if blob[:8] != b"!<arch>\n":
        raise ValueError(f"{deb} is not a Debian package")
    pos = 8
    while pos < len(blob):
        header = blob[pos : pos + 60]
        member, size = header[:16].decode().strip().rstrip("/"), int(header[48:58])
        body = blob[pos + 60 : pos + 60 + size]
        pos += 60 + size + (size & 1)
        if member.startswith("data.tar"):
            with tarfile.open(fileobj=io.BytesIO(body)) as tar:
                return tar.extractfile("./" + name).read()
    raise ValueError(f"{deb} has no data archive")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--deb", help=f"the {PACKAGE} package (default: apt-get download it)")
    p.add_argument("--book", default="prideprejudice", help="the novel's name in the package")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p.add_argument("--out", default=os.path.join(root, "testdata/text/pride_and_prejudice.txt"))
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        deb = args.deb
        if deb is None:
            subprocess.run(["apt-get", "download", PACKAGE], cwd=tmp, check=True)
            deb = os.path.join(tmp, next(f for f in os.listdir(tmp) if f.endswith(".deb")))
        index = Unserialize(gzip.decompress(deb_member(deb, DATA + "Rdata.rdx"))).read()
        database = deb_member(deb, DATA + "Rdata.rdb")
    # The index is a named list; its "variables" a named list of [offset, length] pairs.
    (values, attrs) = index
    (offsets, attrs) = values[attrs["names"][0].index("variables")]
    names = attrs["names"][0]
    if args.book not in names:
        sys.exit(f"no novel `{args.book}` in the package; it has {', '.join(names)}")
    start, length = offsets[names.index(args.book)][0]
    chunk = database[start : start + length]
    lines, _ = Unserialize(zlib.decompress(chunk[4:])).read()
    text = ("\n".join(line or "" for line in lines) + "\n").encode("utf-8")
    with open(args.out, "wb") as f:
        f.write(text)
    print(f"{args.out}: {len(text)} bytes, sha256 {hashlib.sha256(text).hexdigest()}")


if __name__ == "__main__":
    main()
