//! Atomic file replacement: a temporary file in the same directory, flushed to disk,
//! then renamed over the target.

use crate::error::{Error, Result};
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `bytes` to `path` so that `path` holds either its previous contents or all of
/// `bytes`, never a part: the bytes go to a temporary file in the same directory
/// (`.NAME.tmp-PID-N`), which is flushed to disk (`fsync`) and then renamed over `path`;
/// on Unix the directory is flushed too, so the rename survives a power loss. A crash,
/// kill or error while writing leaves the previous file intact (and at most a temporary
/// file, which an error removes, and which the next save to `path` removes if the
/// process that wrote it no longer runs).
///
/// Fails with [`Error::Write`] naming the file when any step fails.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic_with(path, bytes, |file, bytes| file.write_all(bytes))
}

/// A temporary name next to `path`, unique within this process.
fn temporary_path(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// [`write_atomic`] with the step that writes the bytes into the temporary file given
/// (tests inject a failing one).
pub(crate) fn write_atomic_with(
    path: &Path,
    bytes: &[u8],
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
    let tmp = temporary_path(path);
    let result = (|| -> io::Result<()> {
        let mut file = File::create(&tmp)?;
        write(&mut file, bytes)?;
        file.sync_all()?;
        drop(file);
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
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(err)?;
    remove_stale_temporaries(path);
    Ok(())
}

/// Removes the temporary files that saves to `path` by processes that no longer run left
/// behind (a save killed before its rename): `.NAME.tmp-PID-N` files next to `path` whose
/// `PID` is not this process and, where the running processes can be listed (`/proc`),
/// not a running one; where they cannot, those older than an hour. Best effort: a file
/// that cannot be read or removed is left.
fn remove_stale_temporaries(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = format!(".{}.tmp-", name.to_string_lossy());
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
            .filter(|(_, n)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
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
