//! Perplexity of a model over a text file, with each attention kernel the
//! CPU has (f32, and bf16 dot products where AVX-512 BF16 is there): the
//! text is cut into windows of `CTX` tokens, each computed from an empty
//! cache in prefill chunks of 256 (as the engine computes a prompt), and
//! every token after the window's first is scored.
//!
//! `cargo run --release -p kiln-engine --example perplexity -- MODEL.gguf TEXT [CTX] [WINDOWS] [THREADS]`

use kiln_models::{load, ForwardBatch, LoadOptions, LogitsWant};

const CHUNK: usize = 256;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: perplexity MODEL.gguf TEXT [CTX] [WINDOWS] [THREADS]";
    let (model, text) = (args.get(1).ok_or(usage)?, args.get(2).ok_or(usage)?);
    let arg = |i: usize, d: usize| args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d);
    let (ctx, windows, threads) = (arg(3, 1024), arg(4, 4), arg(5, 2));
    let gguf = kiln_gguf::GgufFile::open(model)?;
    let tok = kiln_tokenize::Tokenizer::from_gguf_metadata(gguf.metadata())?;
    let ids = tok.encode_with(
        &std::fs::read_to_string(text)?,
        kiln_tokenize::EncodeOptions { add_special: false, parse_special: false },
    )?;
    let windows = windows.min(ids.len() / ctx);
    println!("{} tokens of text, {windows} windows of {ctx}", ids.len());
    let blocks = ctx.div_ceil(16);
    let table: Vec<u32> = (0..blocks as u32).collect();
    for bf16 in [false, true] {
        let opts = LoadOptions {
            max_ctx: Some(ctx),
            kv_blocks: Some(blocks),
            threads: Some(threads),
            bf16_kv: bf16,
            ..Default::default()
        };
        let mut m = load(std::path::Path::new(model), &opts)?;
        let vocab = m.config().vocab_size;
        if bf16 && m.kv().attention_path() != kiln_kernels::ops::AttnPath::Avx512Bf16 {
            println!("(no AVX-512 BF16 on this CPU)");
            continue;
        }
        let (mut nll, mut n) = (0f64, 0usize);
        let mut logits = Vec::new();
        for w in 0..windows {
            let win = &ids[w * ctx..(w + 1) * ctx];
            for c0 in (0..ctx).step_by(CHUNK) {
                let chunk = &win[c0..(c0 + CHUNK).min(ctx)];
                let mut b = ForwardBatch::new();
                b.push_seq(chunk, c0, &table, 16, LogitsWant::All)?;
                m.logits(&b, &mut logits)?;
                for (i, row) in logits.chunks(vocab).enumerate() {
                    let Some(&next) = win.get(c0 + i + 1) else { break };
                    let mx = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let lse = mx as f64 + row.iter().map(|&x| ((x - mx) as f64).exp()).sum::<f64>().ln();
                    nll += lse - row[next as usize] as f64;
                    n += 1;
                }
            }
        }
        println!(
            "{:?}: perplexity {:.4} over {n} tokens (mean NLL {:.5})",
            m.kv().attention_path(),
            (nll / n as f64).exp(),
            nll / n as f64
        );
    }
    Ok(())
}
