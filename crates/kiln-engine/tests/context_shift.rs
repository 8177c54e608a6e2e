//! Context shift end to end on tiny random models with a 64-token
//! context: a chat longer than the context loses its oldest turns (a 400
//! without the flag); an answer past the context goes on, and with one
//! layer (whose K/V depend only on each token and its position) the tokens
//! after a shift equal a fresh prefill of the kept tokens; the prefix cache
//! and preemption stay correct; a quantized cache is refused at load.

use kiln_core::{FinishReason, SamplingParams, StopParams};
use kiln_engine::{ChatMessage, Completion, EngineConfig, EngineError, EngineHandle, KvType, Params, Prompt, Request};
use kiln_gguf::GgmlType;
use kiln_models::testing::{write_tiny_chat_model_like, TinySpec};

const CTX: usize = 64;
/// KV blocks (of 4 tokens) of the preemption test: room for one context
/// and a shift, not for three contexts.
const POOL: usize = 36;

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

fn fixture(layers: usize, hidden: usize) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    let spec = TinySpec { layers, hidden, ctx: CTX, ..TinySpec::llama(GgmlType::F32) };
    write_tiny_chat_model_like(&path, spec).unwrap();
    Fixture { _dir: dir, path }
}

fn engine(f: &Fixture, context_shift: bool, kv_tokens: Option<usize>) -> EngineHandle {
    let cfg = EngineConfig {
        threads: 2,
        block_size: 4,
        prefill_chunk: 64,
        next_turn_prefill: false,
        bf16_attention: false,
        context_shift,
        kv_tokens,
        ..Default::default()
    };
    EngineHandle::start(&f.path, cfg).unwrap()
}

fn params(max_tokens: usize, num_keep: Option<usize>) -> Params {
    Params {
        sampling: SamplingParams::default(),
        stop: StopParams { max_tokens, ignore_eos: true, ..Default::default() },
        num_keep,
        ..Params::default()
    }
}

fn tokens_request(tokens: Vec<u32>, max_tokens: usize, num_keep: Option<usize>) -> Request {
    Request { prompt: Prompt::Tokens(tokens), params: params(max_tokens, num_keep) }
}

fn prompt(n: usize) -> Vec<u32> {
    (0..n as u32).map(|i| 40 + (i * 7) % 200).collect()
}

fn msg(role: &str, content: &str) -> ChatMessage {
    ChatMessage { role: role.into(), content: content.into(), ..Default::default() }
}

fn long_chat() -> Vec<ChatMessage> {
    let mut m = vec![msg("system", "Be brief.")];
    for i in 0..6 {
        m.push(msg("user", &format!("Question number {i} about the weather?")));
        m.push(msg("assistant", &format!("Answer {i}: it rains a lot.")));
    }
    m.push(msg("user", "And tomorrow?"));
    m
}

#[test]
fn a_chat_longer_than_the_context_drops_its_oldest_turns_with_the_flag() {
    let f = fixture(2, 64);
    let chat = Request { prompt: Prompt::chat(long_chat()), params: params(8, None) };
    let off = engine(&f, false, None);
    let full = off.prompt_tokens(&chat.prompt).unwrap().len();
    assert!(full > CTX, "the chat has {full} tokens");
    match off.generate(chat.clone()) {
        Err(EngineError::PromptTooLong { max_ctx, .. }) => assert_eq!(max_ctx, CTX),
        other => panic!("expected a prompt-too-long error, got {other:?}"),
    }
    let on = engine(&f, true, None);
    let out = on.generate(chat).unwrap();
    assert_eq!(out.tokens.len(), 8);
    let t = &out.timings;
    assert!(t.dropped_messages >= 2 && t.dropped_messages.is_multiple_of(2), "{t:?}");
    // Room for the answer (8 tokens) was left.
    assert!(t.prompt_tokens + 8 <= CTX, "{t:?}");
    // What was sent equals the conversation without those messages.
    let mut kept = long_chat();
    kept.drain(1..1 + t.dropped_messages);
    assert_eq!(on.prompt_tokens(&Prompt::chat(kept)).unwrap().len(), t.prompt_tokens);
    // The last turn alone does not fit: refused, naming the context.
    let huge = vec![msg("system", "Be brief."), msg("user", &"rain ".repeat(80))];
    let e = on.generate(Request { prompt: Prompt::chat(huge), params: params(8, None) }).unwrap_err();
    assert!(e.to_string().contains(&format!("context holds {CTX}")), "{e}");
}

/// Runs `req`, asserting it ends as `reason`.
fn run(e: &EngineHandle, req: Request, reason: FinishReason) -> Completion {
    let out = e.generate(req).unwrap();
    assert_eq!(out.finish_reason, reason, "{:?}", out.timings);
    out
}

#[test]
fn an_answer_past_the_context_goes_on_and_equals_a_prefill_of_the_kept_tokens() {
    let f = fixture(1, 64);
    let p = prompt(20);
    // Without the flag: ends at the context.
    let off = engine(&f, false, None);
    let stopped = run(&off, tokens_request(p.clone(), 100, None), FinishReason::ContextLength);
    assert_eq!(p.len() + stopped.tokens.len(), CTX);
    // With it: 100 tokens (max_tokens still bounds the answer).
    let on = engine(&f, true, None);
    let out = run(&on, tokens_request(p.clone(), 100, Some(5)), FinishReason::Length);
    assert_eq!(out.tokens.len(), 100);
    assert!(out.timings.context_shifts >= 2, "{:?}", out.timings);
    // Before the shift the two runs agree.
    assert_eq!(out.tokens[..stopped.tokens.len()], stopped.tokens[..]);
    // The first shift: 64 tokens known, 63 computed; keep 5, drop 29.
    let all: Vec<u32> = p.iter().chain(&out.tokens).copied().collect();
    let kept: Vec<u32> = all[..5].iter().chain(&all[34..64]).copied().collect();
    let after = &out.tokens[64 - p.len()..];
    // A fresh prefill of the kept tokens (35 of them) continues the same
    // way until the next shift (at 64 tokens: 29 more).
    let fresh = engine(&f, false, None);
    let scratch = run(&fresh, tokens_request(kept, 28, None), FinishReason::Length);
    let same = scratch.tokens.iter().zip(after).take_while(|(a, b)| a == b).count();
    assert!(same >= 24, "only {same} of 28 tokens agree: {:?} vs {:?}", &scratch.tokens, &after[..28]);
}

#[test]
fn the_prefix_cache_and_preemption_stay_correct_after_shifts() {
    let f = fixture(1, 64);
    let on = engine(&f, true, Some(POOL * 4));
    let reqs: Vec<Vec<u32>> = (0..3).map(|i| prompt(12 + i)).collect();
    // Alone, one after another (each shifts).
    let alone: Vec<Completion> =
        reqs.iter().map(|p| run(&on, tokens_request(p.clone(), 90, Some(2)), FinishReason::Length)).collect();
    // The original prompts still hit the cache and give the same answers
    // as on a fresh engine (the shifted blocks never entered it).
    let fresh = engine(&f, true, Some(POOL * 4));
    for (p, a) in reqs.iter().zip(&alone) {
        let b = run(&fresh, tokens_request(p.clone(), 90, Some(2)), FinishReason::Length);
        assert_eq!(a.tokens, b.tokens);
    }
    let again = run(&on, tokens_request(reqs[0].clone(), 90, Some(2)), FinishReason::Length);
    assert!(again.timings.cached_tokens > 0);
    assert_eq!(again.tokens, alone[0].tokens);
    // Together in a pool of POOL blocks for three 64-token contexts:
    // some are preempted, shifted ones resume from their kept
    // tokens (with one layer, a recomputation equals the moved K/V).
    // Whether the three overlap enough to run out of blocks depends on how
    // the threads are scheduled (a loaded machine can run the first alone
    // before the others arrive), so the round is repeated until one
    // preempted; every round's answers are checked.
    let before = on.stats().preemptions;
    let mut preempted = false;
    for _ in 0..8 {
        let streams: Vec<_> = reqs.iter().map(|p| on.submit(tokens_request(p.clone(), 90, Some(2))).unwrap()).collect();
        let mut outs = Vec::new();
        for mut s in streams {
            let mut toks = Vec::new();
            while let Some(ev) = s.blocking_next() {
                match ev {
                    kiln_core::StreamEvent::Token { token, .. } => toks.push(token),
                    kiln_core::StreamEvent::Done { reason, .. } => {
                        assert_eq!(reason, FinishReason::Length);
                        break;
                    }
                    kiln_core::StreamEvent::Error(e) => panic!("{e}"),
                }
            }
            outs.push(toks);
        }
        for (a, b) in alone.iter().zip(&outs) {
            let same = a.tokens.iter().zip(b).take_while(|(x, y)| x == y).count();
            assert!(same >= 80, "only {same} of 90 tokens agree");
        }
        // The engine publishes its counters after each step.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while on.stats().preemptions == before && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        if on.stats().preemptions > before {
            preempted = true;
            break;
        }
    }
    assert!(preempted, "no preemption happened in 8 rounds");
}

#[test]
fn num_keep_past_the_context_is_refused_and_a_quantized_cache_at_load() {
    let f = fixture(1, 64);
    let on = engine(&f, true, None);
    let e = on.generate(tokens_request(prompt(10), 4, Some(CTX))).unwrap_err();
    assert!(e.to_string().contains("num_keep"), "{e}");
    // Head size 32 (a quantized cache needs multiples of 32).
    let q = fixture(1, 128);
    let cfg = EngineConfig {
        threads: 2,
        context_shift: true,
        cache_type_k: KvType::Q8_0,
        cache_type_v: KvType::Q8_0,
        ..Default::default()
    };
    let e = EngineHandle::start(&q.path, cfg).err().expect("refused");
    assert!(e.to_string().contains("--context-shift"), "{e}");
}
