//! `kiln bench embed`: load-test the `/v1/embeddings` endpoint of any
//! OpenAI-compatible server (kiln, llama-server, vLLM ...) with the same
//! deterministic texts, and report inputs per second and latency.

use std::time::Instant;

use anyhow::{bail, Context, Result};
use clap::Args;
use serde_json::{json, Value};

use super::stats::percentile;

/// Arguments of `kiln bench embed`.
#[derive(Debug, Clone, Args)]
pub(crate) struct EmbedBenchArgs {
    /// Base URL of the server (without `/v1`).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Model name sent in each request.
    #[arg(long, default_value = "all-minilm")]
    model: String,
    /// Texts per request (the batch a client sends).
    #[arg(long, default_value_t = 1)]
    batch: usize,
    /// Concurrent clients.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Measured requests in total.
    #[arg(long, default_value_t = 64)]
    requests: usize,
    /// Words per text (about 1.2 tokens each for English BERT vocabularies).
    #[arg(long, default_value_t = 16)]
    words: usize,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
}

const WORDS: [&str; 48] = [
    "the", "river", "carried", "small", "boats", "past", "old", "stone", "houses", "while", "children", "watched",
    "from", "bridge", "above", "market", "opened", "early", "every", "morning", "with", "fresh", "bread", "fruit",
    "and", "fish", "brought", "by", "farmers", "who", "lived", "near", "hills", "beyond", "city", "walls", "where",
    "wind", "turned", "mills", "through", "long", "summer", "days", "until", "autumn", "rain", "came",
];

/// Text `i` of the benchmark (the same for every server and run).
fn text(i: usize, words: usize) -> String {
    let mut x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..words.max(1))
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            WORDS[(x % WORDS.len() as u64) as usize]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn request(agent: &ureq::Agent, url: &str, body: &Value) -> Result<usize> {
    let resp = match agent.post(url).set("Content-Type", "application/json").send_string(&body.to_string()) {
        Ok(r) => r,
        Err(ureq::Error::Status(code, r)) => bail!("HTTP {code}: {}", r.into_string().unwrap_or_default()),
        Err(e) => return Err(e).context("sending /v1/embeddings"),
    };
    let v: Value = serde_json::from_str(&resp.into_string()?).context("reading the response")?;
    let n = v["data"].as_array().map_or(0, Vec::len);
    if n == 0 {
        bail!("the server answered without vectors: {v}");
    }
    Ok(n)
}

/// Runs `kiln bench embed`.
pub(crate) fn run(a: EmbedBenchArgs) -> Result<()> {
    if a.batch == 0 || a.concurrency == 0 || a.requests == 0 {
        bail!("--batch, --concurrency and --requests must be positive");
    }
    let url = format!("{}/v1/embeddings", a.url.trim_end_matches('/'));
    let agent = ureq::AgentBuilder::new().max_idle_connections_per_host(a.concurrency.max(1)).build();
    let body = |r: usize| {
        let input: Vec<String> = (0..a.batch).map(|k| text(r * a.batch + k, a.words)).collect();
        json!({"model": a.model, "input": input})
    };
    // Warm-up: load the model, touch every path once.
    for r in 0..a.concurrency.max(2) {
        request(&agent, &url, &body(1_000_000 + r)).context("warm-up request")?;
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let t0 = Instant::now();
    let lat: Vec<Vec<f64>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..a.concurrency)
            .map(|_| {
                s.spawn(|| -> Result<Vec<f64>> {
                    let mut lat = Vec::new();
                    loop {
                        let r = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        if r >= a.requests {
                            return Ok(lat);
                        }
                        let t = Instant::now();
                        request(&agent, &url, &body(r))?;
                        lat.push(t.elapsed().as_secs_f64() * 1e3);
                    }
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|_| Ok(Vec::new()))).collect::<Result<Vec<_>>>()
    })?;
    let secs = t0.elapsed().as_secs_f64();
    let lat: Vec<f64> = lat.into_iter().flatten().collect();
    let inputs = a.requests * a.batch;
    let out = json!({
        "url": a.url, "model": a.model, "batch": a.batch, "concurrency": a.concurrency, "requests": a.requests,
        "words": a.words, "inputs_per_s": inputs as f64 / secs,
        "latency_ms_p50": percentile(&lat, 50.0), "latency_ms_p99": percentile(&lat, 99.0),
    });
    if a.json {
        println!("{out}");
    } else {
        println!(
            "{} inputs in {:.2} s: {:.1} inputs/s (batch {}, {} clients); latency p50 {:.1} ms, p99 {:.1} ms",
            inputs,
            secs,
            inputs as f64 / secs,
            a.batch,
            a.concurrency,
            out["latency_ms_p50"].as_f64().unwrap_or(f64::NAN),
            out["latency_ms_p99"].as_f64().unwrap_or(f64::NAN)
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_deterministic_and_varied() {
        assert_eq!(text(3, 16), text(3, 16));
        assert_ne!(text(3, 16), text(4, 16));
        assert_eq!(text(7, 10).split(' ').count(), 10);
    }
}
