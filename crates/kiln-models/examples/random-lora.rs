//! Writes a random LoRA adapter for a model, for benchmarks and tests:
//! `cargo run --release -p kiln-models --example random-lora -- MODEL OUT [RANK] [SEED]`
//! (`OUT` ending in `.gguf`: a llama.cpp GGUF LoRA file; otherwise a PEFT
//! directory). Every layer's seven projections get factors of `RANK`.

use kiln_gguf::GgmlType;
use kiln_models::lora::Proj;
use kiln_models::testing::lora::TinyLora;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        eprintln!("usage: random-lora MODEL OUT [RANK] [SEED]");
        std::process::exit(2);
    }
    let cfg = kiln_models::open(std::path::Path::new(&args[1]))?.config;
    let rank: usize = args.get(3).map_or(Ok(16), |s| s.parse())?;
    let seed: u64 = args.get(4).map_or(Ok(1), |s| s.parse())?;
    let lora = TinyLora::random(&cfg, rank, &Proj::ALL, seed, false);
    let out = std::path::Path::new(&args[2]);
    if out.extension().is_some_and(|e| e == "gguf") {
        lora.write_gguf(&cfg, out, GgmlType::F16)?;
    } else {
        lora.write_peft(out)?;
    }
    eprintln!("wrote a rank-{rank} adapter of {} layers to {}", cfg.num_layers, out.display());
    Ok(())
}
