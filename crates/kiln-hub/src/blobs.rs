//! Uploaded files and the LoRA adapters of created models.
//!
//! Ollama's clients upload a Modelfile's local files before `/api/create`
//! (`POST /api/blobs/sha256:<hex>`) and then name them by digest; kiln keeps
//! them content-addressed:
//!
//! ```text
//! $KILN_HOME/blobs/sha256-<hex>           an uploaded file, checked against its digest
//! $KILN_HOME/adapters/sha256-<id>/<name>  an alias's adapter files under their own names
//! ```
//!
//! An adapter directory is named by the SHA-256 of its file list (each
//! `name digest` line, sorted), so two aliases with the same adapter share
//! one copy, and a reader (the PEFT reader wants `adapter_config.json` next
//! to `adapter_model.safetensors`) finds the files under the names it
//! expects. Files are linked from their blob when the filesystem allows it
//! (copied otherwise). Both are written under `tmp/` and renamed into place:
//! a reader sees all of one or nothing.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::error::{io_err, HubError, Result};
use crate::fsutil::{rename_into_place, TempDir, TempFile};

/// The adapter of an alias: its files by name, each with its blob's digest
/// (`sha256:<hex>`), as Ollama's `/api/create` sends them in `adapters`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AliasAdapter {
    /// File name (`adapter_config.json`, `adapter_model.safetensors`, or
    /// one `*.gguf`) to digest.
    pub files: BTreeMap<String, String>,
}

impl AliasAdapter {
    /// The store's name for it: `sha256-<hex>` of its sorted file list.
    pub fn id(&self) -> String {
        let mut h = Sha256::new();
        for (name, digest) in &self.files {
            h.update(format!("{name} {digest}\n").as_bytes());
        }
        format!("sha256-{}", hex(&h.finalize()))
    }

    /// The GGUF files among the adapter's files.
    pub fn gguf_names(&self) -> impl Iterator<Item = &str> {
        self.files.keys().map(String::as_str).filter(|n| n.to_ascii_lowercase().ends_with(".gguf"))
    }

    /// The one GGUF file of a GGUF LoRA, if it is one (other files, such as
    /// the JSON files `ollama create` sends along, are kept but not read).
    fn gguf_name(&self) -> Option<&str> {
        let mut g = self.gguf_names();
        match (g.next(), g.next()) {
            (Some(one), None) => Some(one),
            _ => None,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn bad_digest(digest: &str, reason: &str) -> HubError {
    HubError::InvalidName { name: digest.to_string(), reason: reason.to_string() }
}

/// `sha256:<64 lowercase hex>` (or `sha256-`, Ollama's file spelling) → the hex.
pub fn parse_digest(digest: &str) -> Result<&str> {
    let hex = digest
        .strip_prefix("sha256:")
        .or_else(|| digest.strip_prefix("sha256-"))
        .ok_or_else(|| bad_digest(digest, "a digest is sha256:<64 hex digits>"))?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(bad_digest(digest, "a digest is sha256:<64 lowercase hex digits>"));
    }
    Ok(hex)
}

/// The digest (`sha256:<hex>`) of the file at `path`, as `/api/blobs`
/// names it.
pub fn file_digest(path: &Path) -> Result<String> {
    let mut f = fs::File::open(path).map_err(io_err("cannot read", path))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).map_err(io_err("cannot read", path))?;
    Ok(format!("sha256:{}", hex(&h.finalize())))
}

/// Checks an adapter file name: a relative path of at most four plain
/// parts (letters, digits, '-', '_', '.'; none starting with '.'), as
/// `ollama create` names a directory's files.
pub fn check_file_name(name: &str) -> Result<()> {
    let plain = |p: &str| {
        !p.is_empty() && !p.starts_with('.') && p.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    if name.len() <= 255 && name.split('/').count() <= 4 && name.split('/').all(plain) {
        Ok(())
    } else {
        Err(HubError::InvalidName {
            name: name.to_string(),
            reason: "an adapter file is named by a relative path of plain names (letters, digits, '-', '_', '.')"
                .into(),
        })
    }
}

/// Hashes `reader` into a temporary file in `tmp`, at most `max_bytes`.
fn hashed_copy(tmp: &Path, reader: &mut dyn Read, max_bytes: u64) -> Result<(TempFile, String, u64)> {
    struct Hashing<'a> {
        inner: &'a mut dyn Read,
        hash: Sha256,
        seen: u64,
        max: u64,
    }
    impl Read for Hashing<'_> {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let n = self.inner.read(buf)?;
            self.seen += n as u64;
            if self.seen > self.max {
                return Err(std::io::Error::other(format!("larger than the {} bytes a blob may have", self.max)));
            }
            self.hash.update(buf.get(..n).unwrap_or_default());
            Ok(n)
        }
    }
    let mut tmpf = TempFile::new_in(tmp, "blob")?;
    let mut r = Hashing { inner: reader, hash: Sha256::new(), seen: 0, max: max_bytes };
    let path = tmpf.path().to_path_buf();
    let n = tmpf.copy_from(&mut r, &mut |_| {}).map_err(io_err("cannot write", path))?;
    Ok((tmpf, hex(&r.hash.finalize()), n))
}

/// The blob and adapter store under a cache root.
pub(crate) struct Store<'a> {
    pub(crate) root: &'a Path,
}

impl Store<'_> {
    fn blobs(&self) -> PathBuf {
        self.root.join("blobs")
    }
    fn adapters(&self) -> PathBuf {
        self.root.join("adapters")
    }
    fn tmp(&self) -> PathBuf {
        self.root.join("tmp")
    }

    pub(crate) fn blob_path(&self, digest: &str) -> Result<PathBuf> {
        Ok(self.blobs().join(format!("sha256-{}", parse_digest(digest)?)))
    }

    /// Writes `reader` as the blob `digest`; refused (nothing kept) when
    /// its SHA-256 differs or it is larger than `max_bytes`.
    pub(crate) fn put_blob(&self, digest: &str, reader: &mut dyn Read, max_bytes: u64) -> Result<u64> {
        let want = parse_digest(digest)?.to_string();
        let dest = self.blob_path(digest)?;
        let (tmpf, got, n) = hashed_copy(&self.tmp(), reader, max_bytes)?;
        if got != want {
            return Err(HubError::BlobMismatch { digest: digest.to_string(), got });
        }
        tmpf.persist(&dest)?;
        Ok(n)
    }

    /// Removes blobs older than `max_age` that no adapter in `keep` names:
    /// uploads no model was made from.
    pub(crate) fn sweep_blobs(&self, keep: &[AliasAdapter], max_age: std::time::Duration) {
        let Ok(entries) = fs::read_dir(self.blobs()) else { return };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let used = keep.iter().any(|k| k.files.values().any(|d| d.replacen(':', "-", 1) == name));
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|a| a > max_age);
            if old && !used {
                let _ = fs::remove_file(e.path());
            }
        }
    }

    /// Copies the file at `path` into the blobs; returns its digest.
    pub(crate) fn add_file(&self, path: &Path) -> Result<String> {
        let mut f = fs::File::open(path).map_err(io_err("cannot read", path))?;
        let (tmpf, hex, _) = hashed_copy(&self.tmp(), &mut f, u64::MAX)?;
        let digest = format!("sha256:{hex}");
        tmpf.persist(&self.blob_path(&digest)?)?;
        Ok(digest)
    }

    /// Where the adapter's files are: its directory, or its GGUF file.
    pub(crate) fn adapter_path(&self, a: &AliasAdapter) -> PathBuf {
        let dir = self.adapters().join(a.id());
        match a.gguf_name() {
            Some(f) => dir.join(f),
            None => dir,
        }
    }

    /// Puts the adapter's files (from their blobs) in their directory,
    /// unless it is there already; returns [`Store::adapter_path`].
    pub(crate) fn assemble(&self, a: &AliasAdapter) -> Result<PathBuf> {
        if a.files.is_empty() {
            return Err(HubError::InvalidName {
                name: String::new(),
                reason: "an adapter needs at least one file".into(),
            });
        }
        let dir = self.adapters().join(a.id());
        if !dir.is_dir() {
            let tmp = TempDir::new_in(&self.tmp(), "adapter")?;
            for (name, digest) in &a.files {
                check_file_name(name)?;
                let blob = self.blob_path(digest)?;
                if !blob.is_file() {
                    return Err(HubError::NotAModel {
                        path: blob,
                        reason: format!("no blob {digest} for {name}: upload it first (POST /api/blobs/{digest})"),
                    });
                }
                let to = tmp.path().join(name);
                if let Some(parent) = to.parent() {
                    fs::create_dir_all(parent).map_err(io_err("cannot create directory", parent))?;
                }
                if fs::hard_link(&blob, &to).is_err() {
                    fs::copy(&blob, &to).map_err(io_err("cannot copy", &blob))?;
                }
            }
            match rename_into_place(tmp.path(), &dir) {
                Ok(()) => {}
                // Another request assembled the same adapter meanwhile.
                Err(_) if dir.is_dir() => {}
                Err(e) => return Err(e),
            }
        }
        Ok(self.adapter_path(a))
    }

    /// Removes the adapter's directory and the blobs it came from, keeping
    /// those `keep` (adapters still in use) need.
    pub(crate) fn remove_adapter(&self, a: &AliasAdapter, keep: &[AliasAdapter]) {
        if keep.iter().any(|k| k.id() == a.id()) {
            return;
        }
        let _ = fs::remove_dir_all(self.adapters().join(a.id()));
        for digest in a.files.values() {
            if keep.iter().any(|k| k.files.values().any(|d| d == digest)) {
                continue;
            }
            if let Ok(p) = self.blob_path(digest) {
                let _ = fs::remove_file(p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest_of(data: &[u8]) -> String {
        format!("sha256:{}", hex(&Sha256::digest(data)))
    }

    #[test]
    fn digests_and_names() {
        let ok = digest_of(b"x");
        assert!(parse_digest(&ok).is_ok());
        assert!(parse_digest(&ok.replace(':', "-")).is_ok());
        for bad in ["", "sha256:", "md5:00", &ok.to_uppercase(), &format!("{ok}0"), "sha256:../../etc/passwd"] {
            assert!(parse_digest(bad).is_err(), "{bad}");
        }
        check_file_name("adapter_model.safetensors").unwrap();
        check_file_name("sub/config.json").unwrap();
        for bad in ["", "../x", "a/../b", "/a", "a//b", ".hidden", "a/.b", "a b", "a/b/c/d/e"] {
            assert!(check_file_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn blobs_are_checked_and_adapters_assembled_then_removed() {
        let dir = tempfile::tempdir().unwrap();
        let s = Store { root: dir.path() };
        let (cfg, weights) = (b"{\"r\": 2}".as_slice(), b"weights".as_slice());
        // A wrong digest keeps nothing.
        let e = s.put_blob(&digest_of(b"other"), &mut &*cfg, 1 << 20).unwrap_err();
        assert!(e.to_string().contains("SHA-256") && e.to_string().contains("nothing was kept"), "{e}");
        assert!(s.put_blob(&digest_of(weights), &mut &*weights, 3).unwrap_err().to_string().contains("larger"));
        assert_eq!(fs::read_dir(dir.path().join("tmp")).unwrap().count(), 0);
        assert!(!dir.path().join("blobs").exists() || fs::read_dir(dir.path().join("blobs")).unwrap().count() == 0);

        assert_eq!(s.put_blob(&digest_of(cfg), &mut &*cfg, 1 << 20).unwrap(), cfg.len() as u64);
        let a = AliasAdapter { files: [("adapter_config.json".to_string(), digest_of(cfg))].into_iter().collect() };
        let mut b = a.clone();
        b.files.insert("adapter_model.safetensors".into(), digest_of(weights));
        assert!(s.assemble(&b).unwrap_err().to_string().contains("upload it first"));
        let file = dir.path().join("w");
        fs::write(&file, weights).unwrap();
        assert_eq!(s.add_file(&file).unwrap(), digest_of(weights));
        let path = s.assemble(&b).unwrap();
        assert_eq!(fs::read(path.join("adapter_model.safetensors")).unwrap(), weights);
        assert_eq!(s.assemble(&b).unwrap(), path, "assembled once, found again");
        // `a` shares the config blob: removing `b` keeps it.
        s.remove_adapter(&b, std::slice::from_ref(&a));
        assert!(!path.exists());
        assert!(s.blob_path(&digest_of(cfg)).unwrap().exists());
        assert!(!s.blob_path(&digest_of(weights)).unwrap().exists());

        // Old uploads no adapter names are swept; named ones stay.
        s.put_blob(&digest_of(weights), &mut &*weights, 1 << 20).unwrap();
        s.sweep_blobs(std::slice::from_ref(&a), std::time::Duration::ZERO);
        assert!(s.blob_path(&digest_of(cfg)).unwrap().exists());
        assert!(!s.blob_path(&digest_of(weights)).unwrap().exists());
        s.put_blob(&digest_of(weights), &mut &*weights, 1 << 20).unwrap();
        s.sweep_blobs(&[], std::time::Duration::from_secs(3600));
        assert!(s.blob_path(&digest_of(weights)).unwrap().exists(), "young uploads stay");

        let mut g = AliasAdapter { files: [("x.gguf".to_string(), digest_of(cfg))].into_iter().collect() };
        g.files.insert("sub/config.json".into(), digest_of(cfg));
        let p = s.assemble(&g).unwrap();
        assert!(p.ends_with("x.gguf") && p.with_file_name("sub").join("config.json").is_file(), "{}", p.display());
        assert_ne!(g.id(), a.id());
    }
}
