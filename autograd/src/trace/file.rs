//! Trace files: the streaming writer with its bounded buffer, and the reader that yields
//! a run's steps in order — across the segments of a file that a resumed run appended
//! to, and across the files of the ranks of a data-parallel run.

use super::format::{
    frame_check, step_end_payload, Capture, Decoder, Encoder, FrameType, Header, Record, Section,
    StepEnd, FORMAT_VERSION, MAGIC,
};
use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The size of the writer's buffer: when it holds this many bytes it goes to the file, so
/// a trace of any length holds at most this much in memory.
pub const BUFFER_BYTES: usize = 1 << 20;

/// Bytes of a frame around its payload: type, length, the head's check, the payload's
/// check.
const FRAME_OVERHEAD: usize = 1 + 4 + 4 + 4;

/// The check of a frame's head: the bitwise complement of the length rotated by eight
/// bits, xored with the type byte. Any change to the length or the type alone changes it,
/// so a corrupt length is told from a torn tail.
fn head_check(ty: u8, len: u32) -> u32 {
    !(len.rotate_left(8) ^ u32::from(ty))
}

/// The largest payload a reader accepts (a corrupt length must not allocate without
/// bound).
const MAX_PAYLOAD: u32 = 1 << 30;

/// Writes frames to a file through a bounded buffer. The first write error is kept and
/// reported by [`FileWriter::finish`]; later frames are dropped.
pub(crate) struct FileWriter {
    file: File,
    buf: Vec<u8>,
    enc: Encoder,
    scratch: Vec<u8>,
    bytes: u64,
    error: Option<io::Error>,
}

impl fmt::Debug for FileWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileWriter")
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl FileWriter {
    /// A new file at `path` (replacing one that is there), or, with `append`, the end of
    /// an existing trace file (whose torn tail, if a crash left one, is cut off first); a
    /// missing file is created either way.
    pub(crate) fn open(path: &Path, append: bool) -> io::Result<Self> {
        let exists = append && path.exists();
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(!exists)
            .open(path)?;
        let mut bytes = 0;
        if exists {
            let len = file.metadata()?.len();
            let scan = scan(&mut BufReader::new(&mut file), path, len)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
            bytes = scan.valid_len;
            file.set_len(scan.valid_len)?;
            file.seek(SeekFrom::Start(scan.valid_len))?;
        }
        let mut w = Self {
            file,
            buf: Vec::with_capacity(BUFFER_BYTES + 4096),
            enc: Encoder::default(),
            scratch: Vec::new(),
            bytes,
            error: None,
        };
        if bytes == 0 {
            w.buf.extend_from_slice(MAGIC);
            w.buf.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
            w.bytes = 12;
        }
        Ok(w)
    }

    /// The bytes written so far (including what the buffer holds).
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    fn frame(&mut self, ty: FrameType, payload: &[u8]) {
        let len = payload.len() as u32;
        self.buf.push(ty as u8);
        self.buf.extend_from_slice(&len.to_le_bytes());
        self.buf
            .extend_from_slice(&head_check(ty as u8, len).to_le_bytes());
        self.buf.extend_from_slice(payload);
        self.buf
            .extend_from_slice(&frame_check(payload).to_le_bytes());
        self.bytes += (payload.len() + FRAME_OVERHEAD) as u64;
        if self.buf.len() >= BUFFER_BYTES {
            self.flush();
        }
    }

    /// Starts a segment.
    pub(crate) fn header(&mut self, h: &Header) {
        self.enc.reset();
        let mut p = std::mem::take(&mut self.scratch);
        p.clear();
        Encoder::header(&mut p, h);
        self.frame(FrameType::Header, &p);
        self.scratch = p;
    }

    /// Writes a record (after the string-table entries it introduces).
    pub(crate) fn record(&mut self, r: &Record) {
        let mut p = std::mem::take(&mut self.scratch);
        p.clear();
        self.enc.record(&mut p, r);
        for s in self.enc.take_new() {
            self.frame(FrameType::Str, s.as_bytes());
        }
        self.frame(FrameType::Record, &p);
        self.scratch = p;
    }

    /// Closes a step.
    pub(crate) fn step_end(&mut self, s: &StepEnd) {
        let mut p = Vec::new();
        step_end_payload(&mut p, s);
        self.frame(FrameType::StepEnd, &p);
    }

    /// Writes a line of text.
    pub(crate) fn note(&mut self, text: &str) {
        self.frame(FrameType::Note, text.as_bytes());
    }

    /// Writes a captured record.
    pub(crate) fn capture(&mut self, c: &Capture) {
        let mut p = Vec::new();
        Encoder::capture(&mut p, c);
        self.frame(FrameType::Capture, &p);
    }

    /// Sends the buffer to the file.
    pub(crate) fn flush(&mut self) {
        if self.error.is_none() {
            if let Err(e) = self.file.write_all(&self.buf) {
                self.error = Some(e);
            }
        }
        self.buf.clear();
    }

    /// Flushes and syncs; the first error of the writer's life, if any.
    pub(crate) fn finish(&mut self) -> io::Result<()> {
        self.flush();
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.file.sync_data()
    }
}

/// Why a trace file could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The file could not be opened or read.
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        error: io::Error,
    },
    /// The file is not a trace, or a frame inside it is corrupt.
    Format {
        /// The file.
        path: PathBuf,
        /// The byte offset of the bad frame.
        offset: u64,
        /// What is wrong.
        message: String,
    },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            ReadError::Format {
                path,
                offset,
                message,
            } => write!(f, "{}: at byte {offset}: {message}", path.display()),
        }
    }
}

impl std::error::Error for ReadError {}

fn format_error(path: &Path, offset: u64, message: impl Into<String>) -> ReadError {
    ReadError::Format {
        path: path.to_path_buf(),
        offset,
        message: message.into(),
    }
}

/// One frame as read: its type, payload and offset.
struct RawFrame {
    ty: FrameType,
    payload: Vec<u8>,
    offset: u64,
}

/// Reads frames from the start of a trace file (after checking its magic).
struct Frames<R: Read> {
    r: R,
    path: PathBuf,
    at: u64,
    /// The file's length: a frame that fails its check before the end is corruption,
    /// not a torn tail.
    len: u64,
    /// The frames end in a torn tail (an incomplete or unreadable last frame).
    torn: bool,
}

impl<R: Read> Frames<R> {
    fn new(mut r: R, path: &Path, len: u64) -> Result<Self, ReadError> {
        let mut head = [0u8; 12];
        read_exact_or_eof(&mut r, &mut head)
            .map_err(|e| ReadError::Io {
                path: path.to_path_buf(),
                error: e,
            })?
            .then_some(())
            .ok_or_else(|| format_error(path, 0, "not a trace file: too short"))?;
        if &head[..8] != MAGIC {
            return Err(format_error(
                path,
                0,
                "not a trace file (no EXGTRACE magic)",
            ));
        }
        let version = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
        if version != FORMAT_VERSION {
            return Err(format_error(
                path,
                8,
                format!(
                    "trace format version {version}; this build reads version {FORMAT_VERSION}"
                ),
            ));
        }
        Ok(Self {
            r,
            path: path.to_path_buf(),
            at: 12,
            len,
            torn: false,
        })
    }

    /// The next frame; `None` at the end of the file or at a torn tail (a frame cut short,
    /// or a last frame whose check fails), which sets `torn`.
    fn next_frame(&mut self) -> Result<Option<RawFrame>, ReadError> {
        let io = |e| ReadError::Io {
            path: self.path.clone(),
            error: e,
        };
        let mut head = [0u8; 9];
        let offset = self.at;
        if !read_exact_or_eof(&mut self.r, &mut head).map_err(io)? {
            // A clean end reads nothing; a partial head is a torn tail.
            self.torn = offset < self.len;
            return Ok(None);
        }
        let len = u32::from_le_bytes(head[1..5].try_into().expect("4 bytes"));
        let check = u32::from_le_bytes(head[5..9].try_into().expect("4 bytes"));
        if check != head_check(head[0], len) {
            return Err(format_error(
                &self.path,
                offset,
                "a frame's head fails its check: the file is corrupt",
            ));
        }
        let Some(ty) = FrameType::from_byte(head[0]) else {
            return Err(format_error(
                &self.path,
                offset,
                format!("unknown frame type {}: the file is corrupt", head[0]),
            ));
        };
        if len > MAX_PAYLOAD {
            return Err(format_error(
                &self.path,
                offset,
                format!("a frame of {len} bytes, more than a trace writes"),
            ));
        }
        if offset + (len as usize + FRAME_OVERHEAD) as u64 > self.len {
            // The file ends inside this frame: a torn tail (read nothing of it).
            self.torn = true;
            return Ok(None);
        }
        let mut payload = vec![0u8; len as usize];
        let mut check = [0u8; 4];
        let io = |e| ReadError::Io {
            path: self.path.clone(),
            error: e,
        };
        if !read_exact_or_eof(&mut self.r, &mut payload).map_err(io)?
            || !read_exact_or_eof(&mut self.r, &mut check).map_err(|e| ReadError::Io {
                path: self.path.clone(),
                error: e,
            })?
        {
            self.torn = true;
            return Ok(None);
        }
        if u32::from_le_bytes(check) != frame_check(&payload) {
            let end = offset + (len as usize + FRAME_OVERHEAD) as u64;
            if end < self.len {
                return Err(format_error(
                    &self.path,
                    offset,
                    "a frame fails its check: the file is corrupt",
                ));
            }
            self.torn = true;
            return Ok(None);
        }
        self.at += (len as usize + FRAME_OVERHEAD) as u64;
        Ok(Some(RawFrame {
            ty,
            payload,
            offset,
        }))
    }
}

/// Reads exactly `buf.len()` bytes: `Ok(true)`, or `Ok(false)` when the input ends first
/// (after any number of bytes).
fn read_exact_or_eof(r: &mut impl Read, buf: &mut [u8]) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => return Ok(false),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// What a scan of a whole file found: the segments and where the readable part ends.
struct Scan {
    segments: Vec<SegmentScan>,
    valid_len: u64,
    torn: bool,
}

/// One segment: its header, its first step and the steps that ended in it.
struct SegmentScan {
    header: Header,
    first_step: u64,
}

fn scan(r: &mut impl Read, path: &Path, len: u64) -> Result<Scan, ReadError> {
    scan_frames(&mut Frames::new(r, path, len)?, path)
}

fn scan_frames<R: Read>(frames: &mut Frames<R>, path: &Path) -> Result<Scan, ReadError> {
    let mut segments = Vec::new();
    let mut valid_len = 12;
    while let Some(f) = frames.next_frame()? {
        if f.ty == FrameType::Header {
            let header =
                Decoder::header(&f.payload).map_err(|e| format_error(path, f.offset, e.0))?;
            let first_step = first_step_of(&header);
            segments.push(SegmentScan { header, first_step });
        }
        valid_len = frames.at;
    }
    Ok(Scan {
        segments,
        valid_len,
        torn: frames.torn,
    })
}

fn first_step_of(h: &Header) -> u64 {
    h.field("first_step")
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

/// The records of one step of one run (all sections, in the merged order), with its end.
#[derive(Clone, Debug, Default)]
pub struct Step {
    /// The step.
    pub step: u64,
    /// Its records in order: main section, shards in shard order, after-shard section.
    pub records: Vec<Record>,
    /// Whether the trace closed the step (false for a step a crash cut short).
    pub complete: bool,
}

/// A trace as a sequence of steps: one file, or the files of a data-parallel run's ranks,
/// read step by step with bounded memory.
///
/// Within a file, a later segment (a resumed run appending) replaces the steps from its
/// first step on. Across the files of several ranks, each step's records are merged: the
/// main and after-shard sections from the first file (the other ranks' must agree, or
/// [`TraceSteps::rank_disagreements`] lists them), every shard from the rank that computed
/// it, in shard order — a sequence that does not depend on the number of processes.
pub struct TraceSteps {
    files: Vec<FileSteps>,
    headers: Vec<Header>,
    notes: Vec<String>,
    disagreements: Vec<String>,
}

impl fmt::Debug for TraceSteps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TraceSteps")
            .field("files", &self.files.len())
            .finish()
    }
}

/// The step reader of one file.
struct FileSteps {
    path: PathBuf,
    frames: Frames<BufReader<File>>,
    decoder: Decoder,
    /// The first step of each segment (in order), to skip the steps a later one replaces.
    firsts: Vec<u64>,
    segment: usize,
    /// A record read ahead of its step.
    pending: Option<Record>,
    /// The step read ahead by [`FileSteps::peek`].
    peeked: Option<Option<Step>>,
    done: bool,
    torn: bool,
}

impl FileSteps {
    fn open(path: &Path) -> Result<(Self, Vec<Header>, Vec<String>), ReadError> {
        let mut first = open_frames(path)?;
        let s = scan_frames(&mut first, path)?;
        let frames = open_frames(path)?;
        let mut notes = Vec::new();
        if s.torn {
            notes.push(format!(
                "{}: the file ends in an incomplete frame at byte {} (the run stopped while writing); it is ignored",
                path.display(),
                s.valid_len
            ));
        }
        if s.segments.is_empty() && s.valid_len > 12 {
            return Err(format_error(path, 12, "frames before the first header"));
        }
        for w in s.segments.windows(2) {
            if w[1].first_step <= w[0].first_step {
                notes.push(format!(
                    "{}: a segment starting at step {} follows one starting at step {}; the later one replaces steps from {} on",
                    path.display(),
                    w[1].first_step,
                    w[0].first_step,
                    w[1].first_step
                ));
            }
        }
        let headers = s.segments.iter().map(|g| g.header.clone()).collect();
        let firsts = s.segments.iter().map(|g| g.first_step).collect();
        Ok((
            Self {
                path: path.to_path_buf(),
                frames,
                decoder: Decoder::default(),
                firsts,
                segment: 0,
                pending: None,
                peeked: None,
                done: false,
                torn: s.torn,
            },
            headers,
            notes,
        ))
    }

    /// Whether a record of `step` in segment `seg` is replaced by a later segment.
    fn replaced(&self, seg: usize, step: u64) -> bool {
        self.firsts[seg + 1..].iter().any(|&f| step >= f)
    }

    /// The step number of the next step, read ahead.
    fn peek(&mut self) -> Result<Option<u64>, ReadError> {
        if self.peeked.is_none() {
            let s = self.read_step()?;
            self.peeked = Some(s);
        }
        Ok(self
            .peeked
            .as_ref()
            .and_then(|s| s.as_ref().map(|s| s.step)))
    }

    /// The next step (the one [`FileSteps::peek`] saw).
    fn take(&mut self) -> Result<Option<Step>, ReadError> {
        match self.peeked.take() {
            Some(s) => Ok(s),
            None => self.read_step(),
        }
    }

    /// The next step that no later segment replaces, or `None` at the end.
    fn read_step(&mut self) -> Result<Option<Step>, ReadError> {
        let mut cur: Option<Step> = None;
        let mut seg_of_cur = 0usize;
        loop {
            if let Some(r) = self.pending.take() {
                let step = r.id.step;
                match &mut cur {
                    None => {
                        cur = Some(Step {
                            step,
                            records: vec![r],
                            complete: false,
                        });
                        seg_of_cur = self.segment.saturating_sub(1);
                    }
                    Some(c) if c.step == step => c.records.push(r),
                    Some(_) => {
                        // A record of a later step without a step end before it: the
                        // current step ends here, incomplete.
                        self.pending = Some(r);
                        return Ok(cur);
                    }
                }
            }
            if self.done {
                return Ok(cur);
            }
            let Some(f) = self.frames.next_frame()? else {
                self.done = true;
                continue;
            };
            let fmt_err = |e: super::format::DecodeError| format_error(&self.path, f.offset, e.0);
            match f.ty {
                FrameType::Header => {
                    self.decoder = Decoder::default();
                    self.segment += 1;
                    if cur.is_some() {
                        // A new segment ends whatever step was open.
                        return Ok(cur);
                    }
                }
                FrameType::Str => {
                    let s = String::from_utf8(f.payload).map_err(|_| {
                        format_error(&self.path, f.offset, "a string that is not UTF-8")
                    })?;
                    self.decoder.strings.push(s);
                }
                FrameType::Record => {
                    let r = self.decoder.record(&f.payload).map_err(fmt_err)?;
                    let seg = self.segment.saturating_sub(1);
                    if !self.replaced(seg, r.id.step) {
                        self.pending = Some(r);
                    }
                }
                FrameType::StepEnd => {
                    let e = Decoder::step_end(&f.payload).map_err(fmt_err)?;
                    let seg = self.segment.saturating_sub(1);
                    match &mut cur {
                        Some(c) if c.step == e.step && seg == seg_of_cur => {
                            c.complete = true;
                            return Ok(cur);
                        }
                        _ if self.replaced(seg, e.step) => {}
                        None => {
                            // A step without records.
                            return Ok(Some(Step {
                                step: e.step,
                                records: Vec::new(),
                                complete: true,
                            }));
                        }
                        Some(_) => return Ok(cur),
                    }
                }
                FrameType::Note | FrameType::Capture => {}
            }
        }
    }
}

impl TraceSteps {
    /// Opens a run's trace: one file, or one file per rank (in rank order).
    pub fn open<P: AsRef<Path>>(paths: &[P]) -> Result<Self, ReadError> {
        if paths.is_empty() {
            return Err(format_error(Path::new(""), 0, "no trace file given"));
        }
        let mut files = Vec::new();
        let mut headers = Vec::new();
        let mut notes = Vec::new();
        for p in paths {
            let (f, h, n) = FileSteps::open(p.as_ref())?;
            files.push(f);
            headers.extend(h);
            notes.extend(n);
        }
        Ok(Self {
            files,
            headers,
            notes,
            disagreements: Vec::new(),
        })
    }

    /// The headers of every segment of every file, in order.
    pub fn headers(&self) -> &[Header] {
        &self.headers
    }

    /// Remarks about the files: torn tails, segments that replace steps.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Where the ranks' records outside shards differ (they should be the same on every
    /// rank), as found so far.
    pub fn rank_disagreements(&self) -> &[String] {
        &self.disagreements
    }

    /// Whether a file ends in a torn tail.
    pub fn is_torn(&self) -> bool {
        self.files.iter().any(|f| f.torn)
    }

    /// The next step of the run (merged across ranks), or `None` after the last.
    pub fn next_step(&mut self) -> Result<Option<Step>, ReadError> {
        let mut next = None;
        for f in &mut self.files {
            if let Some(s) = f.peek()? {
                next = Some(next.map_or(s, |n: u64| n.min(s)));
            }
        }
        let Some(first) = next else {
            return Ok(None);
        };
        let mut merged: BTreeMap<(Section, u32), Record> = BTreeMap::new();
        let mut complete = true;
        for rank in 0..self.files.len() {
            if self.files[rank].peek()? != Some(first) {
                if self.files.len() > 1 && self.disagreements.len() < 100 {
                    self.disagreements.push(format!(
                        "{}: has no step {first}",
                        self.files[rank].path.display()
                    ));
                }
                continue;
            }
            let Some(part) = self.files[rank].take()? else {
                continue;
            };
            complete &= part.complete;
            for r in part.records {
                let key = (r.id.section, r.id.index);
                match r.id.section {
                    Section::Shard(_) => {
                        if merged.insert(key, r).is_some() && self.disagreements.len() < 100 {
                            self.disagreements.push(format!(
                                "step {first}: shard record {} appears in more than one file",
                                merged[&key].id
                            ));
                        }
                    }
                    _ => match merged.get(&key) {
                        None => {
                            merged.insert(key, r);
                        }
                        Some(have) if have == &r => {}
                        Some(have) => {
                            if self.disagreements.len() < 100 {
                                self.disagreements.push(format!(
                                    "step {first}: record {} ({} `{}`) differs between the first file and file {}",
                                    have.id,
                                    have.kind.name(),
                                    have.op,
                                    rank + 1
                                ));
                            }
                        }
                    },
                }
            }
        }
        Ok(Some(Step {
            step: first,
            records: merged.into_values().collect(),
            complete,
        }))
    }
}

/// The frames of the trace file at `path`, from its start.
fn open_frames(path: &Path) -> Result<Frames<BufReader<File>>, ReadError> {
    let io = |error| ReadError::Io {
        path: path.to_path_buf(),
        error,
    };
    let file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    Frames::new(BufReader::with_capacity(1 << 16, file), path, len)
}

/// Every capture in a trace or capture file.
pub fn read_captures(path: &Path) -> Result<Vec<Capture>, ReadError> {
    let mut frames = open_frames(path)?;
    let mut out = Vec::new();
    while let Some(f) = frames.next_frame()? {
        if f.ty == FrameType::Capture {
            out.push(Decoder::capture(&f.payload).map_err(|e| format_error(path, f.offset, e.0))?);
        }
    }
    Ok(out)
}

/// Every note (a line of text: a resume, a warning) in a trace file, in order.
pub fn read_notes(path: &Path) -> Result<Vec<String>, ReadError> {
    let mut frames = open_frames(path)?;
    let mut out = Vec::new();
    while let Some(f) = frames.next_frame()? {
        if f.ty == FrameType::Note {
            out.push(String::from_utf8_lossy(&f.payload).into_owned());
        }
    }
    Ok(out)
}
