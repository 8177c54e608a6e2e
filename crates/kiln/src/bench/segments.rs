//! `kiln bench segments`: the segment cache on a RAG workload. A pool of
//! generated documents (each about a made-up town, with facts a question
//! can ask for, filled to about `--doc-tokens` tokens); every request puts
//! `--docs` of them, picked and ordered at random, before a question about
//! one of them, as chat content marked `"cache": "segment"`. Each request
//! runs once with full prefill (its segments recomputed whole: the same
//! tokens, no copies) and once per `--recompute` value with the segment
//! cache warm, side by side on one engine. Reported per mode: median time
//! to first token, its ratio to full prefill, and agreement with full
//! prefill: the same greedy tokens, and the same extracted answer (the
//! first fact value the answer names, else its first line).

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use kiln_engine::{
    segment_marker, ChatMessage, EngineHandle, Params, Prompt, Request, SamplingParams, SegmentedPrompt, StopParams,
};

/// Arguments of `kiln bench segments`.
#[derive(Debug, Args)]
pub struct SegmentBenchArgs {
    /// Model: `smollm2` (default), a GGUF file, or a Hugging Face directory.
    #[arg(default_value = "smollm2")]
    model: String,
    /// Documents per request.
    #[arg(long, default_value_t = 8)]
    docs: usize,
    /// Documents in the pool the requests draw from.
    #[arg(long, default_value_t = 16)]
    pool: usize,
    /// Tokens per document (about).
    #[arg(long, default_value_t = 500)]
    doc_tokens: usize,
    /// Measured requests.
    #[arg(long, default_value_t = 12)]
    requests: usize,
    /// Segment recompute values to measure (leading tokens per segment).
    #[arg(long, value_delimiter = ',', default_value = "0,4,16,64")]
    recompute: Vec<usize>,
    /// Segment context values to measure (most tokens of the prompt's head
    /// each segment is computed after); every recompute value runs with each.
    #[arg(long, value_delimiter = ',', default_value = "0,64")]
    context: Vec<usize>,
    /// Greedy answer tokens compared.
    #[arg(long, default_value_t = 16)]
    answer_tokens: usize,
    /// Seed of the documents, picks and orders.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print every request's answer per mode (stderr).
    #[arg(long)]
    answers: bool,
    /// Write the results as JSON here too.
    #[arg(long)]
    json: Option<PathBuf>,
    #[command(flatten)]
    engine: crate::args::EngineArgs,
}

/// A small deterministic generator (splitmix64).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[self.below(v.len())]
    }
}

const SYLLABLES: [&str; 16] =
    ["var", "hol", "tes", "min", "dor", "kel", "bra", "sun", "wen", "lor", "gal", "fir", "ost", "ren", "mak", "pel"];
const EXPORTS: [&str; 12] =
    ["copper", "wool", "salt", "timber", "honey", "glass", "cheese", "iron", "linen", "amber", "paper", "wine"];
const RIVERS: [&str; 10] = ["Alder", "Brook", "Crane", "Dusk", "Elm", "Fenn", "Grey", "Heron", "Ivy", "Juniper"];
const FILLER: [&str; 12] = [
    "The streets are narrow and paved with old stones that shine after the rain.",
    "Travellers often stop at the inn near the market square to rest their horses.",
    "In winter the hills around the town are covered with deep snow for many weeks.",
    "The town hall keeps records of every harvest since the first settlers arrived.",
    "Children learn to fish in the shallow pools below the stone bridge.",
    "A small library holds maps, letters and the diaries of old merchants.",
    "Every spring a fair brings musicians and traders from the nearby villages.",
    "The bakers rise before dawn and the smell of bread fills the lanes.",
    "Farmers bring their goods to the market on the first day of each week.",
    "An old watchtower on the hill was once used to warn of approaching storms.",
    "The local school teaches reading, counting and the history of the valley.",
    "Most houses have gardens with apple trees and rows of beans.",
];

/// One generated document and the facts a question can ask for.
struct Doc {
    text: String,
    town: String,
    export: &'static str,
    river: &'static str,
    founded: u32,
}

fn make_docs(n: usize, doc_tokens: usize, rng: &mut Rng, engine: &EngineHandle) -> Result<Vec<Doc>> {
    let mut docs = Vec::new();
    while docs.len() < n {
        let town: String = (0..3).map(|_| rng.pick(&SYLLABLES)).collect();
        let mut town = town;
        town[..1].make_ascii_uppercase();
        if docs.iter().any(|d: &Doc| d.town == town) {
            continue;
        }
        let export = EXPORTS[rng.below(EXPORTS.len())];
        let river = RIVERS[rng.below(RIVERS.len())];
        let founded = 1200 + rng.below(700) as u32;
        let mut text = format!(
            "{town} is a town in the northern valley. It was founded in the year {founded}. \
             The main export of {town} is {export}. The river that runs through {town} is the {river} river."
        );
        while engine.tokenizer().encode(&text, false).map(|t| t.len()).unwrap_or(usize::MAX) < doc_tokens {
            text.push(' ');
            text.push_str(rng.pick(&FILLER));
        }
        docs.push(Doc { text, town, export, river, founded });
    }
    Ok(docs)
}

/// A question about `d` and the fact it asks for.
fn question(d: &Doc, rng: &mut Rng) -> (String, String) {
    match rng.below(3) {
        0 => (format!("What is the main export of {}?", d.town), d.export.to_string()),
        1 => (format!("Which river runs through {}?", d.town), d.river.to_string()),
        _ => (format!("In which year was {} founded?", d.town), d.founded.to_string()),
    }
}

/// The request: the documents as segments, then the question.
fn request(docs: &[&Doc], q: &str, recompute: Option<usize>, context: usize, answer_tokens: usize) -> Request {
    let marked: Vec<String> = (0..docs.len()).map(segment_marker).collect();
    let user = format!("{}\n\nQuestion: {q} Answer in a few words.", marked.join("\n\n"));
    let msgs =
        vec![ChatMessage::new("system", "Answer the question using the documents."), ChatMessage::new("user", user)];
    let segments = docs.iter().map(|d| d.text.clone()).collect();
    let prompt = Prompt::Segmented(SegmentedPrompt { segments, prompt: Box::new(Prompt::chat(msgs)) });
    let params = Params {
        sampling: SamplingParams::default(),
        stop: StopParams { max_tokens: answer_tokens, ignore_eos: true, ..Default::default() },
        segment_recompute: recompute,
        segment_context: Some(context),
        ..Params::default()
    };
    Request { prompt, params }
}

/// The answer as compared: the first fact value any document has that
/// the text names, else its first line.
fn extract(text: &str, values: &[String]) -> String {
    let lower = text.to_lowercase();
    values
        .iter()
        .filter_map(|v| lower.find(&v.to_lowercase()).map(|at| (at, v)))
        .min()
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| lower.lines().next().unwrap_or("").trim().to_string())
}

#[derive(Debug, Default, serde::Serialize)]
struct ModeResult {
    mode: String,
    recompute: Option<usize>,
    context: usize,
    ttft_ms: Vec<f64>,
    ttft_median_ms: f64,
    speedup: f64,
    same_tokens: usize,
    same_answer: usize,
    correct: usize,
    copied_tokens: usize,
    prompt_tokens: usize,
    /// Segments computed again during the measured requests (evicted).
    segment_jobs: u64,
    /// Per request: waiting before the first step, the prompt's steps,
    /// and the engine's time copying segment K/V (ms).
    queue_ms: Vec<f64>,
    prefill_ms: Vec<f64>,
    copy_ms: Vec<f64>,
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        0.0
    } else {
        s[s.len() / 2]
    }
}

/// Runs `kiln bench segments`.
pub fn run(a: SegmentBenchArgs) -> Result<()> {
    let path = crate::models::resolve(&a.model)?;
    let cfg = a.engine.config()?;
    let engine = EngineHandle::start(&path, cfg).with_context(|| format!("loading {}", path.display()))?;
    eprintln!("{}", engine.info().kv_summary());
    let mut rng = Rng(a.seed);
    let pool = make_docs(a.pool.max(a.docs), a.doc_tokens, &mut rng, &engine)?;
    let values: Vec<String> =
        pool.iter().flat_map(|d| [d.export.to_string(), d.river.to_string(), d.founded.to_string()]).collect();
    // Every document computed once apart per context value (a request of
    // each, not measured).
    for &c in &a.context {
        for d in &pool {
            engine.generate(request(&[d], "Which town is this?", Some(0), c, 1))?;
        }
    }
    let mut modes: Vec<ModeResult> = vec![ModeResult { mode: "full prefill".into(), ..Default::default() }];
    for &c in &a.context {
        modes.extend(a.recompute.iter().map(|&k| ModeResult {
            mode: format!("segments, context {c}, recompute {k}"),
            recompute: Some(k),
            context: c,
            ..Default::default()
        }));
    }
    for r in 0..a.requests {
        let mut picked: Vec<&Doc> = Vec::new();
        while picked.len() < a.docs {
            let d = &pool[rng.below(pool.len())];
            if !picked.iter().any(|p| p.town == d.town) {
                picked.push(d);
            }
        }
        let target = picked[rng.below(picked.len())];
        let (q, want) = question(target, &mut rng);
        let mut full: Option<(Vec<u32>, String)> = None;
        for m in &mut modes {
            // Full prefill: every segment recomputed whole (same tokens).
            let k = m.recompute.unwrap_or(usize::MAX);
            let before = engine.stats();
            let out = engine.generate(request(&picked, &q, Some(k), m.context, a.answer_tokens))?;
            let after = engine.stats();
            m.segment_jobs += after.segment_jobs - before.segment_jobs;
            m.copy_ms.push(after.segment_copy_ms - before.segment_copy_ms);
            m.queue_ms.push(out.timings.queue_ms);
            m.prefill_ms.push(out.timings.prefill_ms);
            let answer = extract(&out.text, &values);
            if a.answers {
                eprintln!("  {:<36} {:?} -> {answer}", m.mode, out.text);
            }
            m.ttft_ms.push(out.timings.ttft_ms);
            m.copied_tokens += out.timings.segment_tokens;
            m.prompt_tokens += out.timings.prompt_tokens;
            m.correct += usize::from(answer == want.to_lowercase() || answer == want);
            match &full {
                None => {
                    full = Some((out.tokens.clone(), answer));
                    m.same_tokens += 1;
                    m.same_answer += 1;
                }
                Some((tokens, ans)) => {
                    m.same_tokens += usize::from(&out.tokens == tokens);
                    m.same_answer += usize::from(&answer == ans);
                }
            }
        }
        eprintln!("request {}/{}: {q}", r + 1, a.requests);
    }
    let base = median(&modes[0].ttft_ms);
    for m in &mut modes {
        m.ttft_median_ms = median(&m.ttft_ms);
        m.speedup = if m.ttft_median_ms > 0.0 { base / m.ttft_median_ms } else { 0.0 };
    }
    let n = a.requests.max(1);
    println!(
        "\n{} | {} requests of {} documents (~{} tokens each) + a question | {} threads\n",
        path.file_name().and_then(|f| f.to_str()).unwrap_or("model"),
        a.requests,
        a.docs,
        a.doc_tokens,
        engine.info().threads
    );
    println!(
        "| mode | TTFT median (ms) | vs full prefill | copied / prompt tokens | segments computed again | same greedy tokens | same answer | correct |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    for m in &modes {
        println!(
            "| {} | {:.1} | {:.1}x | {} / {} | {} | {:.0}% | {:.0}% | {:.0}% |",
            m.mode,
            m.ttft_median_ms,
            m.speedup,
            m.copied_tokens / n,
            m.prompt_tokens / n,
            m.segment_jobs,
            100.0 * m.same_tokens as f64 / n as f64,
            100.0 * m.same_answer as f64 / n as f64,
            100.0 * m.correct as f64 / n as f64,
        );
    }
    if let Some(p) = &a.json {
        std::fs::write(p, serde_json::to_string_pretty(&modes)?).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_named_fact_is_the_answer() {
        let values = vec!["copper".to_string(), "Alder".to_string(), "1432".to_string()];
        assert_eq!(extract("It is the Alder river, not copper.", &values), "Alder");
        assert_eq!(extract("Copper!", &values), "copper");
        assert_eq!(extract("I do not know\nreally", &values), "i do not know");
    }
}
