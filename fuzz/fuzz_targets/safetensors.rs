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
    // The name map depends on the family (Gemma's norms): both are opened.
    let arch = if data.len() % 2 == 0 { kiln_models::Arch::Llama } else { kiln_models::Arch::Gemma3 };
    let Ok(src) = kiln_models::SafetensorsSource::open(dir.path(), arch) else { return };
    for name in ["token_embd.weight", "blk.0.attn_q.weight", "output_norm.weight", "output.weight"] {
        let _ = src.get(name);
    }
});
