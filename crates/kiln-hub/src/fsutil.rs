//! Small filesystem helpers that keep the cache consistent under crashes
//! and concurrent pulls: everything is written under a unique temporary
//! name in the cache's `tmp/` directory (same filesystem as `models/`),
//! synced, then renamed into place. A rename is atomic, so a reader sees
//! either no file or a complete one; two concurrent pulls of the same model
//! both write complete copies and the last rename wins.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::error::{io_err, Result};

/// A path in `dir` that no other process or thread will pick.
pub(crate) fn unique_path(dir: &Path, stem: &str) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    dir.join(format!("{stem}.{}.{nanos:08x}.{n}.partial", std::process::id()))
}

/// Creates `dir` and its parents.
pub(crate) fn create_dir_all(dir: &Path) -> Result<()> {
    fs::create_dir_all(dir).map_err(io_err("cannot create directory", dir))
}

/// A temporary directory removed (with its contents) when dropped.
pub(crate) struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Creates a fresh, uniquely named directory inside `parent`.
    pub(crate) fn new_in(parent: &Path, stem: &str) -> Result<TempDir> {
        create_dir_all(parent)?;
        let path = unique_path(parent, stem);
        fs::create_dir(&path).map_err(io_err("cannot create directory", &path))?;
        Ok(TempDir { path })
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Best effort: a leftover only wastes space in `tmp/`.
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// A temporary file removed when dropped unless it was persisted.
pub(crate) struct TempFile {
    path: PathBuf,
    file: Option<File>,
}

impl TempFile {
    /// Creates a new file with a unique name inside `dir`.
    pub(crate) fn new_in(dir: &Path, stem: &str) -> Result<TempFile> {
        create_dir_all(dir)?;
        let path = unique_path(dir, stem);
        let file = File::options().write(true).create_new(true).open(&path).map_err(io_err("cannot create", &path))?;
        Ok(TempFile { path, file: Some(file) })
    }

    /// Copies `reader` into the file, calling `on_chunk` with the number of
    /// bytes of each chunk written. Returns the total.
    pub(crate) fn copy_from(&mut self, reader: &mut dyn Read, on_chunk: &mut dyn FnMut(u64)) -> io::Result<u64> {
        let file = self.file.as_mut().ok_or_else(|| io::Error::other("temporary file already closed"))?;
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let chunk = buf.get(..n).ok_or_else(|| io::Error::other("short buffer"))?;
            file.write_all(chunk)?;
            total += n as u64;
            on_chunk(n as u64);
        }
        Ok(total)
    }

    /// The temporary path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Syncs the data and renames the file to `dest` (creating its parent).
    pub(crate) fn persist(mut self, dest: &Path) -> Result<()> {
        if let Some(file) = self.file.take() {
            file.sync_all().map_err(io_err("cannot sync", &self.path))?;
        }
        rename_into_place(&self.path, dest)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// Renames `src` to `dest` (creating `dest`'s parent) and syncs the
/// parent directory so the rename survives a crash.
pub(crate) fn rename_into_place(src: &Path, dest: &Path) -> Result<()> {
    if let Some(parent) = dest.parent() {
        create_dir_all(parent)?;
    }
    fs::rename(src, dest).map_err(io_err("cannot move file into", dest))?;
    if let Some(parent) = dest.parent() {
        // Directory fsync is not supported everywhere; it is an extra.
        let _ = File::open(parent).and_then(|d| d.sync_all());
    }
    Ok(())
}

/// Removes entries of `dir` not modified for `max_age`: leftovers of
/// pulls that crashed. Best effort; young entries may belong to a pull
/// running right now and are kept.
pub(crate) fn sweep_stale(dir: &Path, max_age: std::time::Duration) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let old = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > max_age);
        if old {
            let path = e.path();
            let _ = if path.is_dir() { fs::remove_dir_all(&path) } else { fs::remove_file(&path) };
        }
    }
}

/// Total size of the regular files directly in `dir` accepted by `keep`.
pub(crate) fn dir_size(dir: &Path, keep: impl Fn(&str) -> bool) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| keep(&e.file_name().to_string_lossy()))
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum()
}

/// Total size of the regular files under `dir`, `depth` levels down.
pub(crate) fn tree_size(dir: &Path, depth: usize) -> u64 {
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let mut total = 0;
    for e in entries.flatten() {
        match e.file_type() {
            Ok(t) if t.is_dir() && depth > 0 => total += tree_size(&e.path(), depth - 1),
            Ok(t) if t.is_file() => total += e.metadata().map(|m| m.len()).unwrap_or(0),
            _ => {}
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_paths_differ() {
        let a = unique_path(Path::new("/x"), "m");
        let b = unique_path(Path::new("/x"), "m");
        assert_ne!(a, b);
        assert!(a.starts_with("/x"));
    }

    #[test]
    fn temp_file_persists_or_vanishes() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = TempFile::new_in(dir.path(), "a").unwrap();
        let mut seen = 0;
        let n = t.copy_from(&mut &b"hello"[..], &mut |k| seen += k).unwrap();
        assert_eq!((n, seen), (5, 5));
        let dest = dir.path().join("sub/a.bin");
        t.persist(&dest).unwrap();
        assert_eq!(fs::read(&dest).unwrap(), b"hello");

        let t = TempFile::new_in(dir.path(), "b").unwrap();
        let tmp = t.path().to_path_buf();
        assert!(tmp.exists());
        drop(t);
        assert!(!tmp.exists());
    }

    #[test]
    fn sweep_keeps_young_entries() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("young"), b"x").unwrap();
        sweep_stale(dir.path(), std::time::Duration::from_secs(3600));
        assert!(dir.path().join("young").exists());
        sweep_stale(dir.path(), std::time::Duration::ZERO);
        assert!(!dir.path().join("young").exists());
    }

    #[test]
    fn temp_dir_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let t = TempDir::new_in(&dir.path().join("tmp"), "pip").unwrap();
        fs::write(t.path().join("f"), b"x").unwrap();
        let p = t.path().to_path_buf();
        drop(t);
        assert!(!p.exists());
    }
}
