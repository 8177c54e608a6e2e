//! Decode ms/token at a short and a long context, interleaved step by step
//! so that a noisy machine's slow phases hit both alike, for each KV cache
//! type: two sequences (prompts of `SHORT` and `LONG` tokens) in one cache,
//! then `STEPS` single-token decode steps of each, alternating. Prints the
//! median and the 10th percentile of the per-step times and their ratio.
//!
//! `cargo run --release -p kiln-models --example kv-decode-bench -- MODEL [SHORT] [LONG] [STEPS] [THREADS] [TYPES]`
//! (`TYPES`: comma-separated `K/V` pairs, default `f16/f16,q8_0/q8_0,q4_0/q4_0`;
//! `f16` is bf16 where the CPU has AVX-512 BF16, as in the engine).

use std::time::Instant;

use kiln_models::{load, ForwardBatch, KvType, LoadOptions, LogitsWant};

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let path = args.get(1).ok_or("usage: kv-decode-bench MODEL [SHORT] [LONG] [STEPS] [THREADS] [TYPES]")?;
    let num = |i: usize, d: usize| args.get(i).map(|s| s.parse()).transpose().map(|v| v.unwrap_or(d));
    let (short, long, steps, threads) = (num(2, 128)?, num(3, 2048)?, num(4, 100)?, num(5, 2)?);
    let types = args.get(6).map_or("f16/f16,q8_0/q8_0,q4_0/q4_0", |s| s.as_str());
    let bs = 16;
    let (sb, lb) = ((short + steps).div_ceil(bs) + 1, (long + steps).div_ceil(bs) + 1);
    for pair in types.split(',') {
        let (k, v) = pair.split_once('/').ok_or("a type pair is K/V")?;
        let (type_k, type_v): (KvType, KvType) = (k.parse()?, v.parse()?);
        let opts = LoadOptions {
            max_ctx: Some(long + steps + 1),
            kv_blocks: Some(sb + lb),
            threads: Some(threads),
            bf16_kv: true,
            type_k,
            type_v,
            ..Default::default()
        };
        let mut m = load(path.as_ref(), &opts)?;
        let vocab = m.config().vocab_size as u32;
        let tables: [Vec<u32>; 2] = [(0..sb as u32).collect(), (sb as u32..(sb + lb) as u32).collect()];
        let lens = [short, long];
        let mut logits = Vec::new();
        let mut b = ForwardBatch::new();
        for (t, &n) in tables.iter().zip(&lens) {
            let toks: Vec<u32> = (0..n as u32).map(|i| (i * 7919 + 13) % vocab).collect();
            for start in (0..n).step_by(256) {
                b.clear();
                b.push_seq(&toks[start..(start + 256).min(n)], start, t, bs, LogitsWant::Last)?;
                m.logits(&b, &mut logits)?;
            }
        }
        let mut times = [Vec::new(), Vec::new()];
        for i in 0..steps {
            for s in 0..2 {
                b.clear();
                b.push_seq(&[(i as u32 * 31 + 7) % vocab], lens[s] + i, &tables[s], bs, LogitsWant::Last)?;
                let t0 = Instant::now();
                m.logits(&b, &mut logits)?;
                times[s].push(t0.elapsed().as_secs_f64() * 1e3);
            }
        }
        let [mut a, mut c] = times;
        let (a50, c50, a10, c10) = (pct(&mut a, 0.5), pct(&mut c, 0.5), pct(&mut a, 0.1), pct(&mut c, 0.1));
        println!(
            "{pair}: ctx {short}: {a50:.2} ms (p10 {a10:.2}) | ctx {long}: {c50:.2} ms (p10 {c10:.2}) | ratio {:.3} (p10 {:.3})",
            c50 / a50,
            c10 / a10
        );
    }
    Ok(())
}
