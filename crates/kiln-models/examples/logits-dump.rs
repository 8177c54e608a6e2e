//! Writes a model's logits at every position of the given token ids (one
//! pass, f32 little-endian, `vocab` per row) to compare with another
//! implementation's, e.g. llama.cpp's (`scripts/golden-dump.cpp`).
//!
//! `cargo run --release -p kiln-models --example logits-dump -- MODEL.gguf OUT.bin ID...`
//! (`KILN_EXACT=1`: weights in their file's form, K-quants computed in f32)

use std::io::Write;

use kiln_models::{load, ForwardBatch, LoadOptions, LogitsWant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: logits-dump MODEL.gguf OUT.bin ID...";
    let (model, out) = (args.get(1).ok_or(usage)?, args.get(2).ok_or(usage)?);
    let ids: Vec<u32> = args[3..].iter().map(|s| s.parse()).collect::<Result<_, _>>()?;
    let blocks = ids.len().div_ceil(16) + 1;
    let exact = std::env::var("KILN_EXACT").is_ok_and(|v| v == "1");
    let opts = LoadOptions { max_ctx: Some(blocks * 16), kv_blocks: Some(blocks), exact, ..Default::default() };
    let mut m = load(model.as_ref(), &opts)?;
    let mut b = ForwardBatch::new();
    b.push_seq(&ids, 0, &(0..blocks as u32).collect::<Vec<_>>(), 16, LogitsWant::All)?;
    let mut logits = Vec::new();
    m.logits(&b, &mut logits)?;
    let mut f = std::fs::File::create(out)?;
    for v in logits {
        f.write_all(&v.to_le_bytes())?;
    }
    eprintln!("{} rows of {}", ids.len(), m.config().vocab_size);
    Ok(())
}
