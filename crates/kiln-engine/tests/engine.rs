//! The engine end to end on a tiny random model with a real tokenizer.

use std::time::{Duration, Instant};

use kiln_core::{FinishReason, SamplingParams, StopParams, StreamEvent};
use kiln_engine::{ChatMessage, EngineConfig, EngineError, EngineHandle, Params, Prompt, Request};
use kiln_gguf::GgmlType;
use kiln_models::testing::{reference_forward, tiny_weights, write_tiny_chat_model};

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    spec: kiln_models::testing::TinySpec,
}

fn fixture(ty: GgmlType) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny-chat.gguf");
    let spec = write_tiny_chat_model(&path, ty, 256).unwrap();
    Fixture { _dir: dir, path, spec }
}

fn engine(f: &Fixture, chunk: usize) -> EngineHandle {
    let cfg = EngineConfig { threads: 2, prefill_chunk: chunk, block_size: 4, ..Default::default() };
    EngineHandle::start(&f.path, cfg).unwrap()
}

fn greedy(prompt: Prompt, n: usize) -> Request {
    let stop = StopParams { max_tokens: n, ignore_eos: true, ..Default::default() };
    Request {
        prompt,
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

#[test]
fn greedy_tokens_match_the_dense_reference() {
    let f = fixture(GgmlType::F32);
    let e = engine(&f, 512);
    let prompt: Vec<u32> = "hello there, tiny model".bytes().map(u32::from).collect();
    let out = e.generate(greedy(Prompt::Tokens(prompt.clone()), 8)).unwrap();
    assert_eq!(out.finish_reason, FinishReason::Length);
    assert_eq!(out.tokens.len(), 8);
    let w = tiny_weights(&f.spec);
    let cfg = e.info().config.clone();
    let mut seq = prompt.clone();
    for _ in 0..8 {
        let logits = reference_forward(&cfg, &w, &seq);
        let last = logits.last().unwrap();
        let arg = last.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).unwrap().0 as u32;
        seq.push(arg);
    }
    assert_eq!(out.tokens, seq[prompt.len()..]);
    assert_eq!(out.timings.prompt_tokens, prompt.len());
    assert_eq!(out.timings.decode_tokens, 8);
}

#[test]
fn chunked_prefill_gives_the_same_tokens() {
    let f = fixture(GgmlType::Q8_0);
    let prompt = Prompt::Text("the quick brown fox jumps over the lazy dog again and again".into());
    let a = engine(&f, 512).generate(greedy(prompt.clone(), 12)).unwrap();
    for chunk in [1, 5, 16] {
        let b = engine(&f, chunk).generate(greedy(prompt.clone(), 12)).unwrap();
        assert_eq!(a.tokens, b.tokens, "prefill chunk {chunk}");
    }
}

#[test]
fn concurrent_requests_equal_each_alone() {
    let f = fixture(GgmlType::Q4_1);
    let e = engine(&f, 7);
    let prompts: Vec<Prompt> =
        (0..6).map(|i| Prompt::Text(format!("request number {i} says {}", "hi ".repeat(i * 3)))).collect();
    let alone: Vec<Vec<u32>> =
        prompts.iter().map(|p| engine(&f, 512).generate(greedy(p.clone(), 10)).unwrap().tokens).collect();
    let handles: Vec<_> = prompts
        .iter()
        .map(|p| {
            let e = e.clone();
            let p = p.clone();
            std::thread::spawn(move || e.generate(greedy(p, 10)).unwrap().tokens)
        })
        .collect();
    for (h, want) in handles.into_iter().zip(alone) {
        assert_eq!(h.join().unwrap(), want);
    }
}

#[test]
fn follow_up_turn_reuses_the_conversation_prefix() {
    let f = fixture(GgmlType::Q8_0);
    let e = engine(&f, 512);
    let mut msgs =
        vec![ChatMessage::new("system", "you are tiny"), ChatMessage::new("user", "tell me a long story about a fox")];
    let first = e.generate(greedy(Prompt::chat(msgs.clone()), 6)).unwrap();
    assert_eq!(first.timings.cached_tokens, 0);
    msgs.push(ChatMessage::new("assistant", first.text.clone()));
    msgs.push(ChatMessage::new("user", "and then?"));
    let second = e.generate(greedy(Prompt::chat(msgs.clone()), 6)).unwrap();
    // Every full block of the first turn's prompt is reused (block size 4).
    let first_prompt = first.timings.prompt_tokens;
    assert!(second.timings.cached_tokens >= first_prompt / 4 * 4 - 4, "{:?}", second.timings);
    assert_eq!(second.timings.prefill_tokens, second.timings.prompt_tokens - second.timings.cached_tokens);
    // Reuse changes nothing in the output.
    let fresh = engine(&f, 512).generate(greedy(Prompt::chat(msgs), 6)).unwrap();
    assert_eq!(fresh.timings.cached_tokens, 0);
    assert_eq!(second.tokens, fresh.tokens);
}

#[test]
fn follow_up_reuses_kv_to_the_token_and_changes_no_output() {
    let f = fixture(GgmlType::Q8_0);
    // 21 tokens: 5 full blocks of 4 and one token in a sixth.
    let prompt: Vec<u32> = "tell me about foxes!!".bytes().map(u32::from).collect();
    assert_eq!(prompt.len() % 4, 1);
    let fresh = |p: &[u32]| engine(&f, 512).generate(greedy(Prompt::Tokens(p.to_vec()), 6)).unwrap();
    // The first request leaves 21 + 5 computed tokens (the 6th generated
    // token was only sampled): 6 full blocks and a tail of 2 in a seventh.
    let first = fresh(&prompt);
    let g = &first.tokens;
    for diverge in [true, false] {
        let e = engine(&f, 512);
        assert_eq!(e.generate(greedy(Prompt::Tokens(prompt.clone()), 6)).unwrap().tokens, *g);
        let mut next = prompt.clone();
        let reusable = if diverge {
            // Diverges inside the tail: reused up to the divergence.
            next.extend(&g[..4]);
            next.extend("no".bytes().map(u32::from));
            prompt.len() + 4
        } else {
            // The whole conversation plus a new message: every computed token.
            next.extend(g);
            next.extend("and?".bytes().map(u32::from));
            prompt.len() + 5
        };
        let second = e.generate(greedy(Prompt::Tokens(next.clone()), 6)).unwrap();
        assert_eq!(second.timings.cached_tokens, reusable, "diverge {diverge}: {:?}", second.timings);
        // Reuse changes nothing in the output.
        let alone = fresh(&next);
        assert_eq!(alone.timings.cached_tokens, 0);
        assert_eq!(second.tokens, alone.tokens, "diverge {diverge}");
    }
}

#[test]
fn seeded_sampling_is_reproducible() {
    let f = fixture(GgmlType::Q8_0);
    let e = engine(&f, 512);
    let req = |seed| Request {
        prompt: Prompt::Text("random words".into()),
        params: Params {
            sampling: SamplingParams { temperature: 1.0, top_k: 50, seed: Some(seed), ..Default::default() },
            stop: StopParams { max_tokens: 16, ignore_eos: true, ..Default::default() },
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
    };
    let a = e.generate(req(7)).unwrap().tokens;
    let b = e.generate(req(7)).unwrap().tokens;
    let c = e.generate(req(8)).unwrap().tokens;
    assert_eq!(a, b);
    assert_ne!(a, c);
}

#[test]
fn stop_strings_end_generation_and_are_not_emitted() {
    let f = fixture(GgmlType::F32);
    let e = engine(&f, 512);
    let p = Prompt::Text("abc".into());
    let full = e.generate(greedy(p.clone(), 24)).unwrap();
    let chars: Vec<char> = full.text.chars().collect();
    assert!(chars.len() > 6, "need some text: {:?}", full.text);
    let stop: String = chars[4..6].iter().collect();
    let mut req = greedy(p, 24);
    req.params.stop.stop = vec![stop.clone()];
    let out = e.generate(req).unwrap();
    assert_eq!(out.finish_reason, FinishReason::Stop);
    let cut = full.text.find(&stop).unwrap();
    assert_eq!(out.text, full.text[..cut]);
}

#[test]
fn bad_requests_are_clear_errors() {
    let f = fixture(GgmlType::Q8_0);
    let e = engine(&f, 512);
    let long = Prompt::Tokens(vec![65; 256]);
    assert!(matches!(e.submit(greedy(long, 4)), Err(EngineError::PromptTooLong { prompt_tokens: 256, max_ctx: 256 })));
    assert!(matches!(e.submit(greedy(Prompt::chat(vec![]), 4)), Err(EngineError::InvalidRequest(_))));
    assert!(matches!(e.submit(greedy(Prompt::Tokens(vec![]), 4)), Err(EngineError::InvalidRequest(_))));
    assert!(matches!(e.submit(greedy(Prompt::Tokens(vec![9999]), 4)), Err(EngineError::InvalidRequest(_))));
    let mut bad = greedy(Prompt::Text("x".into()), 4);
    bad.params.sampling.top_p = 1.5;
    let err = e.submit(bad).err().unwrap().to_string();
    assert!(err.contains("top_p"), "{err}");
    // The engine still serves.
    assert_eq!(e.generate(greedy(Prompt::Text("ok".into()), 3)).unwrap().tokens.len(), 3);
}

#[test]
fn generation_stops_at_the_context_length() {
    let f = fixture(GgmlType::Q8_0);
    let e = engine(&f, 512);
    let out = e.generate(greedy(Prompt::Tokens(vec![65; 250]), 100)).unwrap();
    assert_eq!(out.finish_reason, FinishReason::ContextLength);
    assert_eq!(out.tokens.len(), 6);
}

#[test]
fn dropping_a_stream_cancels_and_frees_kv() {
    let f = fixture(GgmlType::Q8_0);
    let e = engine(&f, 512);
    let mut s = e.submit(greedy(Prompt::Text("count forever".into()), 200)).unwrap();
    // Read a couple of tokens, then walk away.
    for _ in 0..2 {
        assert!(matches!(s.blocking_next(), Some(StreamEvent::Token { .. })));
    }
    drop(s);
    let t0 = Instant::now();
    loop {
        let st = e.stats();
        if st.running == 0 && st.kv_blocks_used == 0 && st.finished == 1 {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "not freed: {st:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(e.stats().generated_tokens < 200);
}

#[test]
fn the_engine_reports_the_kernels_it_runs() {
    let f = fixture(GgmlType::F32);
    // Off when asked.
    let off = EngineConfig { threads: 2, pin_threads: false, bf16_attention: false, ..Default::default() };
    let e = EngineHandle::start(&f.path, off).unwrap();
    assert!(!e.info().pinned_threads && !e.info().bf16_attention);
    let prompt: Vec<u32> = "a prompt long enough for prompt-sized attention tiles".bytes().map(u32::from).collect();
    let want = e.generate(greedy(Prompt::Tokens(prompt.clone()), 4)).unwrap().tokens;
    e.shutdown();
    // On by default, where this machine allows it (bf16 attention also needs
    // a head dimension that is a multiple of 32: not this tiny model's 16;
    // golden_smollm2 checks it on the real model).
    let e = EngineHandle::start(&f.path, EngineConfig { threads: 2, ..Default::default() }).unwrap();
    let cfg = &e.info().config;
    let layout = kiln_kernels::ops::KvLayout {
        block_size: 16,
        n_kv_heads: cfg.num_kv_heads,
        head_dim: cfg.head_dim,
        format: kiln_kernels::ops::KvFormat::Bf16Pairs,
    };
    assert_eq!(e.info().bf16_attention, kiln_kernels::ops::AttnPath::Avx512Bf16.supports(layout));
    assert_eq!(e.info().pinned_threads, kiln_kernels::ThreadPool::pinned(2).is_pinned());
    // Pinned or not, the same tokens.
    assert_eq!(e.generate(greedy(Prompt::Tokens(prompt), 4)).unwrap().tokens, want);
}

/// A tiny chat model with heads of 32 values (whole q8_0/q4_0 blocks).
fn fixture_32(ty: GgmlType) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny-chat-32.gguf");
    let base = kiln_models::testing::TinySpec { heads: 2, kv_heads: 1, ..kiln_models::testing::TinySpec::llama(ty) };
    let spec = kiln_models::testing::write_tiny_chat_model_like(&path, base).unwrap();
    assert_eq!(spec.head_dim(), 32);
    Fixture { _dir: dir, path, spec }
}

fn engine_kv(f: &Fixture, k: kiln_engine::KvType, v: kiln_engine::KvType, block_size: usize) -> EngineHandle {
    let cfg = EngineConfig {
        threads: 2,
        block_size,
        cache_type_k: k,
        cache_type_v: v,
        max_ctx: Some(256),
        ..Default::default()
    };
    EngineHandle::start(&f.path, cfg).unwrap()
}

#[test]
fn a_prefix_hit_in_a_quantized_cache_equals_a_miss() {
    use kiln_engine::KvType::{Q4_0, Q8_0};
    let f = fixture_32(GgmlType::Q8_0);
    let prompt: Vec<u32> = "tell me about foxes and their dens!!".bytes().map(u32::from).collect();
    for (k, v) in [(Q8_0, Q8_0), (Q4_0, Q8_0)] {
        for bs in [4, 16] {
            let e = engine_kv(&f, k, v, bs);
            assert_eq!((e.info().cache_type_k, e.info().cache_type_v), (k, v));
            assert!(e.info().kv_summary().starts_with(&format!("KV cache: {k}/{v}, 256 tokens")));
            let first = e.generate(greedy(Prompt::Tokens(prompt.clone()), 6)).unwrap();
            let mut next = prompt.clone();
            next.extend(&first.tokens);
            next.extend("and?".bytes().map(u32::from));
            let hit = e.generate(greedy(Prompt::Tokens(next.clone()), 6)).unwrap();
            assert!(hit.timings.cached_tokens >= prompt.len() / bs * bs, "{k}/{v} bs {bs}: {:?}", hit.timings);
            let miss = engine_kv(&f, k, v, bs).generate(greedy(Prompt::Tokens(next), 6)).unwrap();
            assert_eq!(miss.timings.cached_tokens, 0);
            assert_eq!(hit.tokens, miss.tokens, "{k}/{v} block size {bs}");
        }
    }
}

#[test]
fn a_quantized_cache_needs_whole_blocks_per_head() {
    // The tiny chat model's heads have 16 values: no q8_0 block fits.
    let f = fixture(GgmlType::Q8_0);
    let cfg = EngineConfig { threads: 1, cache_type_k: kiln_engine::KvType::Q8_0, ..Default::default() };
    let err = EngineHandle::start(&f.path, cfg).err().expect("refused").to_string();
    assert!(err.contains("q8_0 K cache") && err.contains("16"), "{err}");
}
