//! Continuous batching on a tiny random model: N concurrent requests give
//! exactly the tokens each gives alone (the kernels compute every token row
//! independently, so batching changes no logit), under preemption too, with
//! per-request sampling parameters; one request ending never disturbs the
//! others.

use std::time::Duration;

use kiln_core::{FinishReason, SamplingParams, StopParams, StreamEvent};
use kiln_engine::{EngineConfig, EngineHandle, Params, Prompt, Request};
use kiln_gguf::GgmlType;
use kiln_models::testing::write_tiny_chat_model;

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

fn fixture(ty: GgmlType) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny-chat.gguf");
    write_tiny_chat_model(&path, ty, 256).unwrap();
    Fixture { _dir: dir, path }
}

fn engine(f: &Fixture, cfg: EngineConfig) -> EngineHandle {
    EngineHandle::start(&f.path, EngineConfig { threads: 2, block_size: 4, ..cfg }).unwrap()
}

fn greedy(tokens: Vec<u32>, n: usize) -> Request {
    let stop = StopParams { max_tokens: n, ignore_eos: true, ..Default::default() };
    Request {
        prompt: Prompt::Tokens(tokens),
        params: Params {
            sampling: SamplingParams::default(),
            stop,
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
    }
}

/// Prompt `i`: mixed lengths (1 to ~90 tokens), distinct contents.
fn prompt(i: usize) -> Vec<u32> {
    let len = 1 + (i * 37) % 90;
    (0..len).map(|j| ((i * 131 + j * 17) % 250) as u32 + 1).collect()
}

/// Submits every request at once, then collects each one's tokens.
fn run_together(e: &EngineHandle, reqs: Vec<Request>) -> Vec<(Vec<u32>, FinishReason)> {
    let streams: Vec<_> = reqs.into_iter().map(|r| e.submit(r).unwrap()).collect();
    streams
        .into_iter()
        .map(|mut s| {
            let mut toks = Vec::new();
            loop {
                match s.blocking_next() {
                    Some(StreamEvent::Token { token, .. }) => toks.push(token),
                    Some(StreamEvent::Done { reason, .. }) => return (toks, reason),
                    Some(StreamEvent::Error(e)) => panic!("request failed: {e}"),
                    None => panic!("stream ended without Done"),
                }
            }
        })
        .collect()
}

#[test]
fn greedy_batches_of_1_to_32_equal_each_alone() {
    let f = fixture(GgmlType::Q4_1);
    let alone_engine = engine(&f, EngineConfig { max_running: 1, prefill_chunk: 512, ..Default::default() });
    let alone: Vec<Vec<u32>> =
        (0..32).map(|i| alone_engine.generate(greedy(prompt(i), 10 + i % 7)).unwrap().tokens).collect();
    // A small step budget mixes decodes and prompt chunks in every step.
    let e = engine(&f, EngineConfig { max_running: 32, prefill_chunk: 48, ..Default::default() });
    for n in [1, 2, 4, 8, 16, 32] {
        let reqs = (0..n).map(|i| greedy(prompt(i), 10 + i % 7)).collect();
        let got = run_together(&e, reqs);
        for (i, (toks, reason)) in got.iter().enumerate() {
            assert_eq!(*reason, FinishReason::Length);
            assert_eq!(toks, &alone[i], "N = {n}, request {i}");
        }
    }
    let st = wait_idle(&e);
    assert_eq!((st.running, st.waiting, st.kv_blocks_used), (0, 0, 0), "{st:?}");
}

/// The engine publishes its counters after each step, just after the last
/// events went out: wait (bounded) until it reports itself idle.
fn wait_idle(e: &EngineHandle) -> kiln_engine::EngineStats {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let st = e.stats();
        if (st.running, st.waiting, st.kv_blocks_used) == (0, 0, 0) || std::time::Instant::now() > deadline {
            return st;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn preemption_under_a_small_kv_pool_keeps_outputs_identical() {
    let f = fixture(GgmlType::Q8_0);
    let alone_engine = engine(&f, EngineConfig { max_running: 1, ..Default::default() });
    let alone: Vec<Vec<u32>> = (0..12).map(|i| alone_engine.generate(greedy(prompt(i), 24)).unwrap().tokens).collect();
    // 200 KV slots for 12 requests of up to ~115 tokens each: they cannot
    // all hold their blocks at once, so the newest get preempted.
    let e =
        engine(&f, EngineConfig { max_running: 12, kv_tokens: Some(200), max_ctx: Some(200), ..Default::default() });
    let got = run_together(&e, (0..12).map(|i| greedy(prompt(i), 24)).collect());
    for (i, (toks, _)) in got.iter().enumerate() {
        assert_eq!(toks, &alone[i], "request {i}");
    }
    let st = wait_idle(&e);
    assert!(st.preemptions > 0, "the pool was meant to run out: {st:?}");
    assert_eq!((st.running, st.waiting, st.kv_blocks_used), (0, 0, 0), "{st:?}");
}

#[test]
fn per_request_parameters_in_one_batch() {
    let f = fixture(GgmlType::Q4_0);
    let reqs = |_: ()| -> Vec<Request> {
        vec![
            greedy(prompt(1), 16),
            Request {
                prompt: Prompt::Tokens(prompt(2)),
                params: Params {
                    sampling: SamplingParams { temperature: 0.9, top_k: 20, seed: Some(7), ..Default::default() },
                    stop: StopParams { max_tokens: 12, ignore_eos: true, ..Default::default() },
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
            },
            Request {
                prompt: Prompt::Tokens(prompt(3)),
                params: Params {
                    sampling: SamplingParams {
                        temperature: 0.7,
                        top_p: 0.9,
                        repetition_penalty: 1.3,
                        seed: Some(99),
                        ..Default::default()
                    },
                    stop: StopParams { max_tokens: 20, ignore_eos: true, ..Default::default() },
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
            },
            greedy(prompt(4), 3),
        ]
    };
    let alone_engine = engine(&f, EngineConfig { max_running: 1, ..Default::default() });
    let alone: Vec<Vec<u32>> = reqs(()).into_iter().map(|r| alone_engine.generate(r).unwrap().tokens).collect();
    let e = engine(&f, EngineConfig { max_running: 8, prefill_chunk: 16, ..Default::default() });
    let got = run_together(&e, reqs(()));
    for (i, (toks, _)) in got.iter().enumerate() {
        assert_eq!(toks, &alone[i], "request {i}");
    }
    assert_eq!(got[3].0.len(), 3, "its own max_tokens");
}

#[test]
fn cancelling_one_request_does_not_disturb_the_others() {
    let f = fixture(GgmlType::Q4_1);
    let alone_engine = engine(&f, EngineConfig { max_running: 1, ..Default::default() });
    let want: Vec<Vec<u32>> =
        [0, 2].iter().map(|&i| alone_engine.generate(greedy(prompt(i), 40)).unwrap().tokens).collect();
    let e = engine(&f, EngineConfig { max_running: 8, prefill_chunk: 16, ..Default::default() });
    let a = e.submit(greedy(prompt(0), 40)).unwrap();
    let mut doomed = e.submit(greedy(prompt(1), 10_000)).unwrap();
    let c = e.submit(greedy(prompt(2), 40)).unwrap();
    // Let the doomed one produce a few tokens, then drop it mid-decode.
    let mut seen = 0;
    while seen < 3 {
        if let Some(StreamEvent::Token { .. }) = doomed.blocking_next() {
            seen += 1;
        }
    }
    drop(doomed);
    let got: Vec<Vec<u32>> = [a, c]
        .into_iter()
        .map(|mut s| {
            let mut t = Vec::new();
            while let Some(ev) = s.blocking_next() {
                match ev {
                    StreamEvent::Token { token, .. } => t.push(token),
                    StreamEvent::Done { .. } => break,
                    StreamEvent::Error(e) => panic!("{e}"),
                }
            }
            t
        })
        .collect();
    assert_eq!(got, want);
    assert_eq!(wait_idle(&e).kv_blocks_used, 0);
}

#[test]
fn a_shared_system_prompt_is_computed_once() {
    let f = fixture(GgmlType::Q8_0);
    let e = engine(&f, EngineConfig { max_running: 8, ..Default::default() });
    let system: Vec<u32> = (0..120).map(|j| (j * 7 % 250) as u32 + 1).collect();
    let with_q = |q: u32| {
        let mut t = system.clone();
        t.extend([q, q + 1, q + 2]);
        t
    };
    let first = e.generate(greedy(with_q(3), 2)).unwrap();
    assert_eq!(first.timings.cached_tokens, 0);
    for q in [10, 20, 30] {
        let out = e.generate(greedy(with_q(q), 2)).unwrap();
        assert_eq!(out.timings.cached_tokens, 120, "the whole system prompt (30 blocks of 4) is reused");
        assert_eq!(out.timings.prefill_tokens, 3);
    }
    // Switched off: nothing is reused.
    let off = engine(&f, EngineConfig { prefix_caching: false, ..Default::default() });
    off.generate(greedy(with_q(3), 2)).unwrap();
    assert_eq!(off.generate(greedy(with_q(10), 2)).unwrap().timings.cached_tokens, 0);
}

#[test]
fn evicted_prefixes_come_back_from_the_host_tier_with_identical_outputs() {
    let f = fixture(GgmlType::Q8_0);
    // 50 blocks of 4 tokens: two 150-token prompts evict everything else.
    let small = EngineConfig { kv_tokens: Some(200), max_ctx: Some(200), ..Default::default() };
    let a: Vec<u32> = (0..120).map(|j| (j * 7 % 250) as u32 + 1).collect();
    let other = |k: u32| (0..150).map(|j| (j * 11 + k * 13) % 250 + 1).collect::<Vec<u32>>();
    let run = |e: &EngineHandle| {
        let first = e.generate(greedy(a.clone(), 8)).unwrap();
        e.generate(greedy(other(1), 2)).unwrap();
        e.generate(greedy(other(2), 2)).unwrap();
        let again = e.generate(greedy(a.clone(), 8)).unwrap();
        (first, again)
    };
    let plain = engine(&f, small.clone());
    let (first, again) = run(&plain);
    assert_eq!(again.timings.cached_tokens, 0, "without a tier the prefix was evicted");
    assert_eq!(first.tokens, again.tokens);

    let tiered = engine(&f, EngineConfig { kv_tier_bytes: 1 << 20, ..small });
    assert!(tiered.info().kv_tier_tokens > 0);
    let (t_first, t_again) = run(&tiered);
    assert_eq!(t_first.tokens, first.tokens);
    assert_eq!(t_again.timings.cached_tokens, 116, "29 full blocks restored (the last token is recomputed)");
    assert_eq!(t_again.tokens, first.tokens, "restored KV gives the same greedy tokens");
    let st = wait_idle(&tiered);
    assert!(st.kv_tier_saved_blocks >= 29 && st.kv_tier_restored_blocks == 29, "{st:?}");
}

/// Waits until the engine is idle; returns how many steps ran since
/// `steps_before` and how long it took.
fn steps_until_idle(e: &EngineHandle, steps_before: u64) -> (u64, Duration) {
    let t0 = std::time::Instant::now();
    let st = wait_idle(e);
    assert_eq!((st.running, st.waiting, st.kv_blocks_used), (0, 0, 0), "not freed: {st:?}");
    (st.steps - steps_before, t0.elapsed())
}

#[test]
fn a_dropped_stream_is_freed_within_one_step_in_prefill_and_in_decode() {
    let f = fixture(GgmlType::Q8_0);
    // Decode: drop after a few tokens.
    let e = engine(&f, EngineConfig::default());
    let mut s = e.submit(greedy(prompt(3), 100_000)).unwrap();
    for _ in 0..3 {
        assert!(matches!(s.blocking_next(), Some(StreamEvent::Token { .. })));
    }
    let before = e.stats().steps;
    drop(s);
    let (steps, dt) = steps_until_idle(&e, before);
    // The step running when the stream was dropped finishes (and the step
    // that produced the last token read may not have been counted yet when
    // `before` was read); the next one starts by reaping it.
    assert!(steps <= 2, "{steps} steps ran after the drop");
    eprintln!("decode: freed {steps} step(s), {:.2} ms after the drop", dt.as_secs_f64() * 1e3);

    // Prefill: a 250-token prompt computed 1 token per step; drop it mid-way.
    let e = engine(&f, EngineConfig { prefill_chunk: 1, max_ctx: Some(256), ..Default::default() });
    let long: Vec<u32> = (0..250).map(|j| (j * 13 % 250) as u32 + 1).collect();
    let s = e.submit(greedy(long, 10)).unwrap();
    let t0 = std::time::Instant::now();
    while e.stats().steps < 5 {
        assert!(t0.elapsed() < Duration::from_secs(5), "prefill did not start");
        std::thread::sleep(Duration::from_micros(200));
    }
    let before = e.stats().steps;
    assert!(before < 240, "the prompt was already prefilled ({before} steps)");
    drop(s);
    let (steps, dt) = steps_until_idle(&e, before);
    assert!(steps <= 2, "{steps} steps ran after the drop");
    assert_eq!(e.stats().generated_tokens, 0, "no token is generated for a request cancelled in prefill");
    eprintln!("prefill: freed {steps} step(s), {:.2} ms after the drop", dt.as_secs_f64() * 1e3);
}
