//! Grammar timings at a real vocabulary: token-trie build, compile time of a
//! typical tool list (5 OpenAI-style function tools), and per-token mask time
//! over random JSON-schema generation walks.
//!
//! ```text
//! cargo run --release -p kiln-grammar --example grammar-bench -- [VOCAB.gguf] [WALKS]
//! ```
//! The vocabulary defaults to llama.cpp's qwen2 reference GGUF (151,936 tokens)
//! from `scripts/fetch-vocab-vectors.sh`'s cache.

use kiln_gguf::GgufFile;
use kiln_grammar::{Constraint, GrammarLimits, Grammars, Matcher};
use kiln_tokenize::Tokenizer;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn tool(name: &str, description: &str, properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required, "additionalProperties": false}
        }
    })
}

/// Five tools as a chat request would carry them.
fn tools() -> Vec<Value> {
    vec![
        tool(
            "get_weather",
            "Current weather for a city",
            json!({"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}}),
            &["city"],
        ),
        tool(
            "search_web",
            "Search the web",
            json!({"query": {"type": "string", "maxLength": 200}, "max_results": {"type": "integer", "minimum": 1, "maximum": 20}}),
            &["query"],
        ),
        tool(
            "send_email",
            "Send an email",
            json!({
                "to": {"type": "array", "items": {"type": "string", "format": "email"}, "minItems": 1},
                "subject": {"type": "string"},
                "body": {"type": "string"},
                "priority": {"enum": ["low", "normal", "high"]}
            }),
            &["to", "subject", "body"],
        ),
        tool(
            "create_event",
            "Create a calendar event",
            json!({
                "title": {"type": "string"},
                "start": {"type": "string", "format": "date-time"},
                "duration_minutes": {"type": "integer", "minimum": 5},
                "attendees": {"type": "array", "items": {"type": "string"}},
                "location": {"type": ["string", "null"]}
            }),
            &["title", "start"],
        ),
        tool(
            "run_sql",
            "Run a read-only SQL query",
            json!({"query": {"type": "string"}, "limit": {"type": "integer"}, "params": {"type": "object"}}),
            &["query"],
        ),
    ]
}

/// The schema a server derives from a tool list: one call `{"name", "arguments"}`.
fn tool_call_schema(tools: &[Value]) -> Value {
    let calls: Vec<Value> = tools
        .iter()
        .map(|t| {
            let f = &t["function"];
            json!({
                "type": "object",
                "properties": {"name": {"const": f["name"]}, "arguments": f["parameters"]},
                "required": ["name", "arguments"],
                "additionalProperties": false
            })
        })
        .collect();
    json!({"anyOf": calls})
}

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) % n as u64) as usize
    }
}

/// A random allowed token, preferring tokens that close strings or objects late in the walk.
fn pick(m: &Matcher, tok: &Tokenizer, rng: &mut Rng, late: bool) -> u32 {
    let allowed: Vec<u32> = (0..tok.vocab_size() as u32).filter(|&t| m.allows(t)).collect();
    let eos: Vec<u32> = allowed.iter().copied().filter(|&t| tok.is_eos(t)).collect();
    if !eos.is_empty() {
        return eos[0];
    }
    if late || rng.below(2) == 0 {
        let closing: &[u8] = if late { b"\"}]" } else { b"\"{}[],:" };
        let pool: Vec<u32> = allowed
            .iter()
            .copied()
            .filter(|&t| tok.token_to_bytes(t).unwrap_or_default().iter().any(|b| closing.contains(b)))
            .collect();
        if !pool.is_empty() {
            return pool[rng.below(pool.len())];
        }
    }
    allowed[rng.below(allowed.len())]
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args.next().unwrap_or_else(|| {
        let home = std::env::var("HOME").unwrap_or_default();
        format!("{home}/.cache/kiln/vocab-vectors/11434.0.0/ggml-vocab-qwen2.gguf")
    });
    let walks: u64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(40);
    let file = GgufFile::open(std::path::Path::new(&path))?;
    let tok = Arc::new(Tokenizer::from_gguf_metadata(file.metadata())?);
    println!("vocabulary: {path} ({} tokens)", tok.vocab_size());

    let t0 = Instant::now();
    let uncached = Grammars::new(&tok, GrammarLimits { cache_entries: 0, ..Default::default() })?;
    println!("token trie build: {:.1} ms", t0.elapsed().as_secs_f64() * 1e3);

    let schema = tool_call_schema(&tools());
    let mut compile_times = Vec::new();
    for _ in 0..20 {
        let t0 = Instant::now();
        let c = uncached.compile(&Constraint::JsonSchema(schema.clone()))?;
        compile_times.push(t0.elapsed());
        drop(c);
    }
    compile_times.sort();
    println!(
        "compile 5-tool schema ({} bytes, incl. first mask): p50 {:.2} ms, max {:.2} ms",
        schema.to_string().len(),
        percentile(&compile_times, 0.5).as_secs_f64() * 1e3,
        compile_times[compile_times.len() - 1].as_secs_f64() * 1e3
    );
    let t0 = Instant::now();
    uncached.compile(&Constraint::JsonObject)?;
    println!("compile json_object: {:.2} ms", t0.elapsed().as_secs_f64() * 1e3);

    let compiled = uncached.compile(&Constraint::JsonSchema(schema))?;
    let mut masks = Vec::new();
    let mut apply = Vec::new();
    let mut logits = vec![0.0f32; tok.vocab_size() + 64];
    let mut tokens = 0usize;
    for seed in 0..walks {
        let mut rng = Rng(seed);
        let mut m = compiled.matcher();
        for step in 0..400 {
            if m.is_stopped() {
                break;
            }
            let t0 = Instant::now();
            m.compute_mask()?;
            masks.push(t0.elapsed());
            let t0 = Instant::now();
            m.apply_mask(&mut logits);
            apply.push(t0.elapsed());
            let t = pick(&m, &tok, &mut rng, step > 150);
            m.commit(t)?;
            tokens += 1 + m.forced_tokens().len();
            if tok.is_eos(t) {
                break;
            }
        }
    }
    masks.sort();
    apply.sort();
    let mean = masks.iter().sum::<Duration>() / masks.len() as u32;
    println!(
        "mask ({} masks over {walks} tool-call walks, {tokens} tokens): p50 {:.1} us, p99 {:.1} us, mean {:.1} us, max {:.1} us",
        masks.len(),
        percentile(&masks, 0.5).as_secs_f64() * 1e6,
        percentile(&masks, 0.99).as_secs_f64() * 1e6,
        mean.as_secs_f64() * 1e6,
        masks[masks.len() - 1].as_secs_f64() * 1e6
    );
    println!("apply_mask ({} logits): p50 {:.1} us", logits.len(), percentile(&apply, 0.5).as_secs_f64() * 1e6);
    Ok(())
}
