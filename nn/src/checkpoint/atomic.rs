//! Atomic file replacement: a temporary file in the same directory, flushed to disk,
//! then renamed over the target.
//!
//! The temporary file is created with `create_new` (`O_CREAT | O_EXCL`) under a name with
//! 64 random bits, so an entry already at that name — a file, a directory, or a symlink
//! planted by someone who guessed the name — is never opened or followed: the save tries
//! another name. Only the file this process created is renamed (or removed on error).

use crate::error::{Error, Result};
use std::fs::{self, File, OpenOptions};
use std::hash::{BuildHasher, RandomState};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Names tried for the temporary file before a save gives up: each has 64 random bits, so
/// more than one is needed only when entries were planted at the names.
const TEMPORARY_NAMES: usize = 64;

/// Most bytes of the target's name kept in a temporary name, so that the suffix
/// (`.tmp-PID-` and 16 hex digits) never takes it past a file system's limit of 255.
const NAME_BYTES: usize = 200;

/// Writes `bytes` to `path` so that `path` holds either its previous contents or all of
/// `bytes`, never a part: the bytes go to a new temporary file in the same directory
/// (`.NAME.tmp-PID-RANDOM`, created exclusively, so that nothing already there is opened
/// or followed), which is flushed to disk (`fsync`) and then renamed over `path`; on Unix
/// the directory is flushed too, so the rename survives a power loss. A crash, kill or
/// error while writing leaves the previous file intact (and at most a temporary file,
/// which an error removes, and which the next save to `path` removes if the process that
/// wrote it no longer runs).
///
/// Fails with [`Error::Write`] naming the file when any step fails.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, bytes, |file, bytes| file.write_all(bytes))
}

/// The start of every temporary name of saves to a file named `name`: `.NAME.tmp-`,
/// with `NAME` cut to at most [`NAME_BYTES`] bytes (at a character boundary).
fn temporary_prefix(name: &str) -> String {
    let mut end = name.len().min(NAME_BYTES);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    format!(".{}.tmp-", &name[..end])
}

/// Fresh temporary names next to `path`: `.NAME.tmp-PID-RANDOM`, `RANDOM` 16 hex digits
/// from the standard library's randomly keyed hasher over the process id, a counter and
/// the time, so that no other process (or save of this one) can predict them.
fn temporary_paths(path: &Path) -> impl Iterator<Item = PathBuf> + '_ {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let prefix = temporary_prefix(&name);
    let keys = RandomState::new();
    let pid = std::process::id();
    (0..TEMPORARY_NAMES).map(move |_| {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let random = keys.hash_one((pid, n, now));
        path.with_file_name(format!("{prefix}{pid}-{random:016x}"))
    })
}

/// Creates a new file at the first of `candidates` where nothing exists (`create_new`:
/// an existing entry of any kind, a symlink included, is neither opened nor followed).
fn create_temporary(candidates: impl Iterator<Item = PathBuf>) -> io::Result<(PathBuf, File)> {
    for tmp in candidates {
        match OpenOptions::new().write(true).create_new(true).open(&tmp) {
            Ok(file) => return Ok((tmp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        "every temporary name tried was taken",
    ))
}

/// Whether the entry at `tmp` is still the file this process created and holds open
/// (not a file someone put in its place): same device and inode on Unix.
fn is_ours(tmp: &Path, file: &File) -> io::Result<bool> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let (there, mine) = (fs::symlink_metadata(tmp)?, file.metadata()?);
        Ok(there.file_type().is_file() && there.dev() == mine.dev() && there.ino() == mine.ino())
    }
    #[cfg(not(unix))]
    {
        let _ = file;
        Ok(fs::symlink_metadata(tmp)?.file_type().is_file())
    }
}

/// The bytes of the regular file at `path` (a symlink to one is followed). Anything else
/// is refused before it is opened: a FIFO would block the open until a writer came, and a
/// device such as `/dev/zero` would be read until memory ran out.
pub(crate) fn read_regular(path: &Path) -> io::Result<Vec<u8>> {
    if !fs::metadata(path)?.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a directory, device or pipe is not read)",
        ));
    }
    fs::read(path)
}

/// [`write_atomic`] with the step that writes the bytes into the temporary file given
/// (tests inject a failing one).
pub(crate) fn write_atomic_with(
    path: &Path,
    bytes: &[u8],
    write: impl FnOnce(&mut File, &[u8]) -> io::Result<()>,
) -> Result<()> {
    write_atomic_named(path, bytes, temporary_paths(path), write)
}

/// [`write_atomic_with`] with the temporary names to try given (tests plant entries at
/// them).
fn write_atomic_named(
    path: &Path,
    bytes: &[u8],
    candidates: impl Iterator<Item = PathBuf>,
    write: impl FnOnce(&mut File, &[u8]) -> io::Result<()>,
) -> Result<()> {
    let err = |source: io::Error| Error::Write {
        path: path.to_path_buf(),
        source,
    };
    if path.file_name().is_none() {
        return Err(err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path names no file",
        )));
    }
    let (tmp, mut file) = create_temporary(candidates).map_err(err)?;
    let result = (|| -> io::Result<()> {
        write(&mut file, bytes)?;
        file.sync_all()?;
        // Rename only the file this process created: if the entry at the temporary name
        // was replaced meanwhile, it is someone else's and stays where it is.
        if !is_ours(&tmp, &file)? {
            return Err(io::Error::other(format!(
                "the temporary file {} was replaced by another entry while it was written",
                tmp.display()
            )));
        }
        fs::rename(&tmp, path)?;
        #[cfg(unix)]
        {
            let dir = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() && is_ours(&tmp, &file).unwrap_or(false) {
        let _ = fs::remove_file(&tmp);
    }
    drop(file);
    result.map_err(err)?;
    remove_stale_temporaries(path);
    Ok(())
}

/// Removes the temporary files that saves to `path` by processes that no longer run left
/// behind (a save killed before its rename): regular files `.NAME.tmp-PID-X` (`X` hex
/// digits) next to `path` whose `PID` is not this process and, where the running
/// processes can be listed (`/proc`), not a running one; where they cannot, those older
/// than an hour. Best effort: an entry that cannot be read or removed is left, and so is
/// anything that is not a regular file (a symlink is never followed or removed).
fn remove_stale_temporaries(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = temporary_prefix(&name.to_string_lossy());
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let me = std::process::id();
    let proc_listed = Path::new("/proc/self").exists();
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name
            .to_str()
            .and_then(|f| f.strip_prefix(&prefix))
            .and_then(|rest| rest.split_once('-'))
            .filter(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if !entry.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let stale = pid != me
            && if proc_listed {
                !Path::new(&format!("/proc/{pid}")).exists()
            } else {
                entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age.as_secs() > 3600)
            };
        if stale {
            let _ = fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("exactgrad-atomic-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_failing_writer_leaves_the_previous_file_and_no_temporary() {
        let d = dir("fail");
        let path = d.join("ckpt.safetensors");
        write_atomic(&path, b"first version").unwrap();
        let err = write_atomic_with(&path, b"second version, longer", |f, b| {
            f.write_all(&b[..6])?;
            Err(io::Error::other("disk full"))
        })
        .unwrap_err();
        assert!(matches!(err, Error::Write { .. }), "{err}");
        assert!(
            err.to_string().contains("ckpt.safetensors") && err.to_string().contains("disk full"),
            "{err}"
        );
        assert_eq!(fs::read(&path).unwrap(), b"first version");
        let names: Vec<_> = fs::read_dir(&d)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 1, "{names:?}");
        write_atomic(&path, b"third").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"third");
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_writer_that_dies_mid_write_leaves_the_previous_file() {
        let d = dir("panic");
        let path = d.join("ckpt.safetensors");
        write_atomic(&path, b"first version").unwrap();
        let p = path.clone();
        let crashed = std::thread::spawn(move || {
            let _ = write_atomic_with(&p, b"second version", |f, b| {
                f.write_all(&b[..3])?;
                panic!("the writer dies here");
            });
        })
        .join();
        assert!(crashed.is_err());
        assert_eq!(fs::read(&path).unwrap(), b"first version");
        fs::remove_dir_all(&d).unwrap();
    }

    /// A symlink planted at every name the save could have used before names were
    /// random (`.NAME.tmp-PID-N`, a per-process counter `N`): the save must neither
    /// write through one nor rename one over the checkpoint.
    #[cfg(unix)]
    #[test]
    fn a_symlink_at_a_temporary_name_is_never_followed() {
        use std::os::unix::fs::symlink;
        let d = dir("symlink");
        let path = d.join("ckpt.safetensors");
        let victim = d.join("victim");
        fs::write(&victim, b"not yours").unwrap();
        let pid = std::process::id();
        let links: Vec<PathBuf> = (0..4096)
            .map(|n| d.join(format!(".ckpt.safetensors.tmp-{pid}-{n}")))
            .collect();
        for l in &links {
            symlink(&victim, l).unwrap();
        }
        write_atomic(&path, b"checkpoint").unwrap();
        assert_eq!(
            fs::read(&victim).unwrap(),
            b"not yours",
            "written through a link"
        );
        let meta = fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_file(), "the checkpoint is a link");
        assert_eq!(fs::read(&path).unwrap(), b"checkpoint");
        for l in &links {
            assert!(fs::symlink_metadata(l).unwrap().file_type().is_symlink());
        }
        fs::remove_dir_all(&d).unwrap();
    }

    /// Entries of every kind at the names tried are skipped, left as they are and never
    /// renamed; when every name is taken the save fails and changes nothing.
    #[cfg(unix)]
    #[test]
    fn an_entry_at_the_temporary_name_is_skipped_and_never_renamed() {
        use std::os::unix::fs::symlink;
        let d = dir("taken");
        let path = d.join("ckpt.safetensors");
        write_atomic(&path, b"first").unwrap();
        let victim = d.join("victim");
        fs::write(&victim, b"not yours").unwrap();
        let (link, sub, file, free) = (d.join("t0"), d.join("t1"), d.join("t2"), d.join("t3"));
        symlink(&victim, &link).unwrap();
        fs::create_dir(&sub).unwrap();
        fs::write(&file, b"someone's").unwrap();
        let names = [link.clone(), sub.clone(), file.clone(), free.clone()];
        write_atomic_named(&path, b"second", names.clone().into_iter(), |f, b| {
            f.write_all(b)
        })
        .unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"second");
        assert_eq!(fs::read(&victim).unwrap(), b"not yours");
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(sub.is_dir());
        assert_eq!(fs::read(&file).unwrap(), b"someone's");
        assert!(!free.exists(), "the new temporary file was renamed");
        // Every name taken: an error, and nothing changes.
        let err = write_atomic_named(&path, b"third", names[..3].iter().cloned(), |f, b| {
            f.write_all(b)
        })
        .unwrap_err();
        assert!(err.to_string().contains("temporary name"), "{err}");
        assert_eq!(fs::read(&path).unwrap(), b"second");
        assert!(fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(fs::read(&file).unwrap(), b"someone's");
        fs::remove_dir_all(&d).unwrap();
    }

    /// A temporary file replaced by a symlink while it is written is not renamed over the
    /// checkpoint, and the symlink is left where it is.
    #[cfg(unix)]
    #[test]
    fn a_temporary_file_replaced_while_written_is_not_renamed() {
        use std::os::unix::fs::symlink;
        let d = dir("replaced");
        let path = d.join("ckpt.safetensors");
        write_atomic(&path, b"first").unwrap();
        let victim = d.join("victim");
        fs::write(&victim, b"not yours").unwrap();
        let tmp = d.join("t0");
        let (t, v) = (tmp.clone(), victim.clone());
        let err = write_atomic_named(&path, b"second", [tmp.clone()].into_iter(), move |f, b| {
            f.write_all(b)?;
            fs::remove_file(&t)?;
            symlink(&v, &t)
        })
        .unwrap_err();
        assert!(err.to_string().contains("replaced"), "{err}");
        assert_eq!(fs::read(&path).unwrap(), b"first");
        assert!(fs::symlink_metadata(&path).unwrap().file_type().is_file());
        assert!(fs::symlink_metadata(&tmp).unwrap().file_type().is_symlink());
        assert_eq!(fs::read(&victim).unwrap(), b"not yours");
        fs::remove_dir_all(&d).unwrap();
    }

    /// A target name near the file system's limit of 255 bytes still gets a temporary
    /// name within it.
    #[test]
    fn a_long_file_name_still_saves() {
        let d = dir("long");
        let path = d.join("c".repeat(250));
        write_atomic(&path, b"x").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"x");
        fs::remove_dir_all(&d).unwrap();
    }

    /// A pipe blocked the reading of a checkpoint forever, and a device was read until
    /// memory ran out: both are refused before they are opened, by every reader of files.
    #[cfg(unix)]
    #[test]
    fn only_regular_files_are_read() {
        use crate::checkpoint::{TensorFile, TrainingCheckpoint};
        use crate::data::Digits;
        let d = dir("fifo");
        let fifo = d.join("ckpt.safetensors");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        let (tx, rx) = std::sync::mpsc::channel();
        let (f, z) = (fifo.clone(), PathBuf::from("/dev/zero"));
        std::thread::spawn(move || {
            let errors = [
                TensorFile::load(&f).map(|_| ()),
                TrainingCheckpoint::load(&f).map(|_| ()),
                Digits::load(&f).map(|_| ()),
                TensorFile::load(&z).map(|_| ()),
            ];
            let _ = tx.send(errors.map(|r| r.map_err(|e| e.to_string())));
        });
        let results = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("reading a pipe or a device did not return");
        for r in results {
            let e = r.unwrap_err();
            assert!(e.contains("not a regular file"), "{e}");
        }
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_file() {
        let err = write_atomic(Path::new("/nonexistent-dir/x/ckpt.safetensors"), b"x").unwrap_err();
        assert!(
            err.to_string()
                .contains("/nonexistent-dir/x/ckpt.safetensors"),
            "{err}"
        );
    }
}
