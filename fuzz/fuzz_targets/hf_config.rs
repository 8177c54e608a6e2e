//! A Hugging Face `config.json`: any text must parse into a validated
//! `ModelConfig` or give an error.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(cfg) = kiln_models::ModelConfig::from_hf_json(s) {
            let _ = cfg.validate();
        }
    }
});
