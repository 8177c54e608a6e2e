//! Hugging Face fetching against an unreachable endpoint and a fake Hub
//! on 127.0.0.1 (no real network).

mod support;

use std::fs;
use std::time::{Duration, Instant};

use kiln_hub::{Cache, HubError, ModelFormat, ModelRef, Origin};

#[test]
fn unreachable_hub_fails_fast_and_clearly() {
    let root = tempfile::tempdir().unwrap();
    let cache = Cache::new(root.path()).with_hf_endpoint("http://127.0.0.1:9");
    for name in ["hf:org/repo", "hf:org/repo:m.Q4_0.gguf"] {
        let model = ModelRef::parse_name(name).unwrap();
        let start = Instant::now();
        let e = cache.resolve(&model, true, false).unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(20));
        assert!(matches!(e, HubError::HubUnreachable { .. }), "{e}");
        let msg = e.to_string();
        assert!(msg.starts_with("could not reach the Hugging Face Hub ("), "{msg}");
        assert!(msg.contains("pass the local path"), "{msg}");
        assert!(msg.contains("kiln list --available"), "{msg}");
        assert!(!cache.is_cached(&model));
    }
    assert_eq!(fs::read_dir(root.path().join("tmp")).unwrap().count(), 0);
}

#[test]
fn fetches_a_named_gguf() {
    let gguf = support::tiny_gguf();
    let endpoint = support::fake_hub("org/repo", vec![("m.Q4_1.gguf", gguf.clone())]);
    let root = tempfile::tempdir().unwrap();
    let cache = Cache::new(root.path()).with_hf_endpoint(endpoint);
    let model = ModelRef::parse_name("hf:org/repo:m.Q4_1.gguf").unwrap();
    let r = cache.resolve(&model, true, false).unwrap();
    assert_eq!(r.origin, Origin::Fetched);
    assert_eq!(r.path, root.path().join("models/hf/org--repo/m.Q4_1.gguf"));
    assert_eq!(fs::read(&r.path).unwrap(), gguf);
    assert_eq!(cache.resolve(&model, true, false).unwrap().origin, Origin::Cached);
    assert_eq!(fs::read_dir(root.path().join("tmp")).unwrap().count(), 0);

    let missing = ModelRef::parse_name("hf:org/repo:nope.gguf").unwrap();
    let e = cache.resolve(&missing, true, false).unwrap_err();
    assert!(e.to_string().contains("404"), "{e}");
}

#[test]
fn fetches_a_sharded_safetensors_snapshot() {
    let index = br#"{"metadata":{},"weight_map":{
        "a": "model-00001-of-00002.safetensors",
        "b": "model-00002-of-00002.safetensors",
        "c": "model-00001-of-00002.safetensors"}}"#;
    let endpoint = support::fake_hub(
        "org/big",
        vec![
            ("config.json", br#"{"torch_dtype":"float16"}"#.to_vec()),
            ("tokenizer.json", b"{}".to_vec()),
            ("model.safetensors.index.json", index.to_vec()),
            ("model-00001-of-00002.safetensors", vec![1u8; 3000]),
            ("model-00002-of-00002.safetensors", vec![2u8; 2000]),
            ("README.md", b"not fetched".to_vec()),
        ],
    );
    let root = tempfile::tempdir().unwrap();
    let cache = Cache::new(root.path()).with_hf_endpoint(endpoint);
    let model = ModelRef::parse_name("hf:org/big").unwrap();
    let r = cache.resolve(&model, true, false).unwrap();
    assert_eq!(r.format, ModelFormat::Safetensors);
    let mut files: Vec<String> =
        fs::read_dir(&r.path).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    files.sort();
    assert_eq!(
        files,
        [
            ".kiln-complete",
            "config.json",
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
            "model.safetensors.index.json",
            "tokenizer.json",
        ]
    );
    assert_eq!(fs::read(r.path.join("model-00002-of-00002.safetensors")).unwrap(), vec![2u8; 2000]);
    // The directory is a model directory that loads as a local path too.
    assert_eq!(ModelRef::parse(r.path.to_str().unwrap()).unwrap().format(), ModelFormat::Safetensors);
    let listed = cache.list().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].quantization.as_deref(), Some("F16"));
}

#[test]
fn hostile_shard_names_are_refused() {
    let index = br#"{"weight_map":{"a": "../../escape.safetensors"}}"#;
    let endpoint = support::fake_hub(
        "org/evil",
        vec![("config.json", b"{}".to_vec()), ("model.safetensors.index.json", index.to_vec())],
    );
    let root = tempfile::tempdir().unwrap();
    let cache = Cache::new(root.path().join("home")).with_hf_endpoint(endpoint);
    let e = cache.resolve(&ModelRef::parse_name("hf:org/evil").unwrap(), true, false).unwrap_err();
    assert!(matches!(e, HubError::InvalidName { .. }), "{e}");
    assert!(!root.path().join("escape.safetensors").exists());
}

#[test]
fn gguf_only_repo_gets_a_hint() {
    let endpoint =
        support::fake_hub("org/ggufs", vec![("config.json", b"{}".to_vec()), ("m.Q4_0.gguf", b"GGUF".to_vec())]);
    let root = tempfile::tempdir().unwrap();
    let cache = Cache::new(root.path()).with_hf_endpoint(endpoint);
    let e = cache.resolve(&ModelRef::parse_name("hf:org/ggufs").unwrap(), true, false).unwrap_err();
    assert!(e.to_string().contains("hf:org/ggufs:m.Q4_0.gguf"), "{e}");
}
