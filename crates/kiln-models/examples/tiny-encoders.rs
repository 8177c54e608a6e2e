//! Writes tiny random encoders for device checks: `tiny-encoders OUT_DIR`
//! makes `bert.gguf` (F16), `nomic.gguf` (rotary, SwiGLU; F16) and a BERT
//! reranker directory `rank/` (HF names, with tokenizer). Compare a
//! device's `kiln embed --device D` on them with the CPU's.

use kiln_gguf::GgmlType;
use kiln_models::testing::encoder::TinyEncoder;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = std::path::PathBuf::from(std::env::args().nth(1).ok_or("usage: tiny-encoders OUT_DIR")?);
    std::fs::create_dir_all(&out)?;
    // head_dim 64 (256 / 4): rotary tables and attention at a real width.
    let base = TinyEncoder { hidden: 256, ff: 512, layers: 3, ty: GgmlType::F16, ..Default::default() };
    base.write_gguf_with(&base.weights(), &out.join("bert.gguf"), &base.gguf_tokenizer())?;
    let nomic = TinyEncoder { nomic: true, seed: 5, ..base };
    nomic.write_gguf_with(&nomic.weights(), &out.join("nomic.gguf"), &nomic.gguf_tokenizer())?;
    let rank = TinyEncoder { rank: true, seed: 9, ty: GgmlType::F32, ..base };
    rank.write_servable(&out.join("rank"))?;
    println!("wrote {}", out.display());
    Ok(())
}
