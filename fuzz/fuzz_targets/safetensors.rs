//! A safetensors file (header and data offsets), opened the way the loader
//! opens a model directory, then every tensor looked up.
#![no_main]
use kiln_models::TensorSource;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(dir) = tempfile::tempdir() else { return };
    if std::fs::write(dir.path().join("model.safetensors"), data).is_err() {
        return;
    }
    let Ok(src) = kiln_models::SafetensorsSource::open(dir.path()) else { return };
    for name in ["token_embd.weight", "blk.0.attn_q.weight", "output_norm.weight", "output.weight"] {
        let _ = src.get(name);
    }
});
