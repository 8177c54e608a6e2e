//! GGUF reading: header, metadata, tensor infos, data offsets — then what the
//! loader derives from it (model config, tokenizer, every tensor's bytes).
//! Any input must give `Ok` or an error, never a panic, abort or huge
//! allocation.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(file) = kiln_gguf::parse(data) else { return };
    for info in file.tensors() {
        let bytes = file.tensor_data(info);
        std::hint::black_box(bytes.first());
    }
    let meta = file.metadata();
    if let Ok(tok) = kiln_tokenize::Tokenizer::from_gguf_metadata(meta) {
        // A tokenizer built from hostile metadata must still encode and decode.
        if let Ok(ids) = tok.encode("Hello, wörld! 12345 <|im_end|>", true) {
            let _ = tok.decode(&ids, false);
        }
    }
    let source = kiln_models::GgufSource::from_file(file, "fuzz.gguf".into());
    let _ = source.config();
});
