//! Sliding-window layers keeping only their window (the default) against
//! `--swa-full` (every layer keeps the whole context), end to end on tiny
//! random Gemma 3 and gpt-oss models whose window (8) is far shorter than
//! their prompts: the same greedy tokens, alone, chunked, in a batch and
//! from the prefix cache (a continuation hits the cache in both), while
//! the window pool holds a few blocks per sequence.
//!
//! `KILN_TEST_DEVICE=cuda` runs them on a GPU (a test binary built with
//! `--features cuda`: `scripts/gpu/window-check.sh`).

use kiln_core::{SamplingParams, StopParams};
use kiln_engine::{EngineConfig, EngineHandle, Params, Prompt, Request, StreamEvent};
use kiln_gguf::GgmlType;
use kiln_models::testing::{write_tiny_chat_model_like, TinySpec};
use kiln_models::Arch;

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

fn fixture(spec: TinySpec) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_tiny_chat_model_like(&path, spec).unwrap();
    Fixture { _dir: dir, path }
}

/// Head dimension 64 (CUDA's smallest).
fn gemma3() -> Fixture {
    fixture(TinySpec { arch: Arch::Gemma3, layers: 6, window: 8, hidden: 256, ..TinySpec::llama(GgmlType::F32) })
}

fn gpt_oss() -> Fixture {
    fixture(TinySpec::gpt_oss(GgmlType::F32))
}

/// The device of `KILN_TEST_DEVICE` (default: the CPU).
fn device() -> kiln_engine::Device {
    std::env::var("KILN_TEST_DEVICE").ok().and_then(|d| d.parse().ok()).unwrap_or(kiln_engine::Device::Cpu)
}

/// Blocks of 4 tokens on the CPU (windows of two blocks), 16 on a GPU (as
/// its tiny cases run).
fn block_size() -> usize {
    if device() == kiln_engine::Device::Cpu {
        4
    } else {
        16
    }
}

fn engine(f: &Fixture, swa_full: bool, prefill_chunk: usize) -> EngineHandle {
    EngineHandle::start(&f.path, engine_config(swa_full, prefill_chunk)).unwrap()
}

fn engine_config(swa_full: bool, prefill_chunk: usize) -> EngineConfig {
    EngineConfig {
        device: device(),
        threads: 2,
        block_size: block_size(),
        prefill_chunk,
        next_turn_prefill: false,
        bf16_attention: false,
        swa_full,
        // Bounded: a GPU's pool otherwise takes what memory is left.
        kv_tokens: Some(2048),
        ..Default::default()
    }
}

/// `n` tokens sampled at temperature 1 from a fixed seed, with the
/// log-probabilities of the four likeliest: a change in a logit shows even
/// where a tiny model's choice does not move.
fn request(tokens: Vec<u32>, n: usize) -> Request {
    let stop = StopParams { max_tokens: n, ignore_eos: true, ..Default::default() };
    let sampling =
        SamplingParams { temperature: 1.0, seed: Some(7), logprobs: true, top_logprobs: 4, ..Default::default() };
    Request { prompt: Prompt::Tokens(tokens), params: Params { sampling, stop, ..Default::default() } }
}

fn prompt(n: usize, salt: u32) -> Vec<u32> {
    (0..n as u32).map(|i| 40 + (i * 7 + salt * 13) % 200).collect()
}

/// Per prompt, per token: the token and its four likeliest alternatives
/// with their log-probabilities.
type Run = Vec<Vec<(u32, Vec<(u32, f32)>)>>;

/// Tokens and log-probabilities of each prompt, generated at once (one batch).
fn batch(e: &EngineHandle, prompts: &[Vec<u32>], n: usize) -> Run {
    let streams: Vec<_> = prompts.iter().map(|p| e.submit(request(p.clone(), n)).unwrap()).collect();
    streams
        .into_iter()
        .map(|mut s| {
            let mut out = Vec::new();
            while let Some(ev) = s.blocking_next() {
                match ev {
                    StreamEvent::Token { token, logprob, .. } => {
                        let top = logprob.map(|l| l.top_logprobs.iter().map(|t| (t.token, t.logprob)).collect());
                        out.push((token, top.unwrap_or_default()));
                    }
                    StreamEvent::Done { .. } => break,
                    StreamEvent::Error(e) => panic!("{e}"),
                }
            }
            out
        })
        .collect()
}

/// The same tokens and alternatives, log-probabilities within 1e-3 of their
/// size: what a prompt computed in other chunks on a GPU (other kernels)
/// keeps. A window read from the wrong blocks moves them by far more.
fn assert_close(a: &Run, b: &Run, what: &str) {
    let ids = |r: &Run| -> Vec<Vec<(u32, Vec<u32>)>> {
        r.iter().map(|s| s.iter().map(|(t, top)| (*t, top.iter().map(|x| x.0).collect())).collect()).collect()
    };
    assert_eq!(ids(a), ids(b), "{what}: tokens differ");
    let lps = |r: &Run| -> Vec<f32> { r.iter().flatten().flat_map(|(_, top)| top.iter().map(|x| x.1)).collect() };
    for (x, y) in lps(a).iter().zip(lps(b)) {
        assert!((x - y).abs() <= 1e-3 * y.abs().max(1.0), "{what}: log-probability {x} against {y}");
    }
}

/// `drafts`: prompt lookup must find proposals (the tiny Gemma 3 repeats
/// one token; the tiny gpt-oss wanders).
fn same_tokens_as_whole_layers(f: &Fixture, drafts: bool) {
    let windowed = engine(f, false, 16);
    let full = engine(f, true, 16);
    assert!(windowed.info().kv_window.is_some(), "{}", windowed.info().kv_summary());
    assert!(full.info().kv_window.is_none());
    assert!(windowed.info().kv_summary().contains("keep a window per sequence"), "{}", windowed.info().kv_summary());
    // Alone, past the window many times over (the prompt in 16-token chunks).
    let p = prompt(50, 0);
    let a = batch(&windowed, std::slice::from_ref(&p), 30);
    let b = batch(&full, std::slice::from_ref(&p), 30);
    assert_close(&a, &b, "alone");
    // The alternatives' log-probabilities vary from token to token.
    let seen: std::collections::HashSet<u32> = a[0].iter().map(|t| t.1[1].1.to_bits()).collect();
    assert!(seen.len() > 5, "a degenerate model shows little: {a:?}");
    // A continuation of it: both hit the prefix cache and still agree.
    let mut next = p.clone();
    next.extend(a[0].iter().map(|t| t.0));
    next.extend(prompt(9, 3));
    let a2 = windowed.generate(request(next.clone(), 12)).unwrap();
    let b2 = full.generate(request(next.clone(), 12)).unwrap();
    assert_eq!(a2.tokens, b2.tokens);
    let (a3, b3) = (batch(&windowed, std::slice::from_ref(&next), 12), batch(&full, std::slice::from_ref(&next), 12));
    assert_close(&a3, &b3, "from the prefix cache");
    assert!(a2.timings.cached_tokens >= 64, "{:?}", a2.timings);
    assert!(b2.timings.cached_tokens >= 64, "{:?}", b2.timings);
    // Several at once, each of its own length.
    let prompts: Vec<Vec<u32>> = (0..4).map(|i| prompt(20 + 9 * i, i as u32 + 1)).collect();
    assert_close(&batch(&windowed, &prompts, 20), &batch(&full, &prompts, 20), "in a batch");
    // A windowed engine that prefills 5 tokens a step agrees too.
    let chunked = engine(f, false, 5);
    assert_close(&batch(&chunked, &[p], 30), &b, "in 5-token chunks");
    // Speculative decoding (prompt lookup) verifies proposals past the
    // window's reserved blocks: greedy tokens equal plain decoding's.
    let greedy = |tokens: Vec<u32>| {
        let mut r = request(tokens, 40);
        r.params.sampling = SamplingParams::default();
        r
    };
    let echo: Vec<u32> = prompt(12, 5).repeat(4);
    let plain = full.generate(greedy(echo.clone())).unwrap();
    let cfg = EngineConfig { spec: kiln_engine::SpecConfig::ngram(4), ..engine_config(false, 16) };
    let spec = EngineHandle::start(&f.path, cfg).unwrap();
    let drafted = spec.generate(greedy(echo)).unwrap();
    assert_eq!(drafted.tokens, plain.tokens);
    assert!(!drafts || drafted.timings.draft_proposed > 0, "{:?}", drafted.timings);
}

#[test]
fn gemma3_window_layers_keep_their_window_and_answer_the_same() {
    same_tokens_as_whole_layers(&gemma3(), true);
}

#[test]
fn gpt_oss_window_layers_keep_their_window_and_answer_the_same() {
    same_tokens_as_whole_layers(&gpt_oss(), false);
}

#[test]
fn the_segment_cache_and_context_shift_need_whole_layers() {
    let f = gemma3();
    let windowed = engine(&f, false, 16);
    let why = windowed.info().segments_unsupported.clone().unwrap_or_default();
    assert!(why.contains("--swa-full"), "{why}");
    // Context shift keeps every layer whole.
    let cfg = EngineConfig {
        device: device(),
        block_size: block_size(),
        context_shift: true,
        bf16_attention: false,
        kv_tokens: Some(2048),
        ..Default::default()
    };
    let shifting = EngineHandle::start(&f.path, cfg).unwrap();
    assert!(shifting.info().kv_window.is_none());
}
