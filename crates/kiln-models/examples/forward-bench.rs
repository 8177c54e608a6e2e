//! Times raw forward passes of a model: prefill of N tokens and decode steps.
//! `cargo run --release -p kiln-models --example forward-bench -- MODEL [PROMPT_LEN] [GEN] [THREADS]`

use std::time::Instant;

use kiln_models::{load, ForwardBatch, LoadOptions, LogitsWant};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).ok_or("usage: forward-bench MODEL [PROMPT_LEN] [GEN] [THREADS]")?;
    let n: usize = args.get(2).map(|s| s.parse()).transpose()?.unwrap_or(512);
    let gen: usize = args.get(3).map(|s| s.parse()).transpose()?.unwrap_or(128);
    let threads: usize = args.get(4).map(|s| s.parse()).transpose()?.unwrap_or(2);
    let bs = 16;
    let blocks = (n + gen).div_ceil(bs) + 1;
    let opts = LoadOptions {
        max_ctx: Some(n + gen + 1),
        kv_blocks: Some(blocks),
        threads: Some(threads),
        ..Default::default()
    };
    let mut m = load(path.as_ref(), &opts)?;
    let table: Vec<u32> = (0..blocks as u32).collect();
    let vocab = m.config().vocab_size as u32;
    let toks: Vec<u32> = (0..n as u32).map(|i| (i * 7919 + 13) % vocab).collect();
    let mut logits = Vec::new();
    for rep in 0..3 {
        let mut b = ForwardBatch::new();
        let t0 = Instant::now();
        b.push_seq(&toks, 0, &table, bs, LogitsWant::Last)?;
        m.logits(&b, &mut logits)?;
        let pf = t0.elapsed().as_secs_f64();
        let t1 = Instant::now();
        for i in 0..gen {
            b.clear();
            b.push_seq(&[(i as u32 * 31) % vocab], n + i, &table, bs, LogitsWant::Last)?;
            m.logits(&b, &mut logits)?;
        }
        let dc = t1.elapsed().as_secs_f64();
        println!(
            "rep {rep}: prefill {n} tok: {:.1} tok/s | decode {gen} tok: {:.1} tok/s ({:.2} ms/tok)",
            n as f64 / pf,
            gen as f64 / dc,
            dc * 1000.0 / gen as f64
        );
    }
    Ok(())
}
