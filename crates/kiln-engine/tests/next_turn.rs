//! Next-turn prefill: after a chat answer, the template's opening of the next
//! user turn is computed while the engine is idle, so a follow-up reuses it;
//! a request that comes sooner is not held by it. On a tiny random model
//! with the ChatML template (opening `<|im_end|>\n<|im_start|>user\n`).

use std::time::{Duration, Instant};

use kiln_core::{FinishReason, SamplingParams, StopParams};
use kiln_engine::{ChatMessage, EngineConfig, EngineHandle, Params, Prompt, Request};
use kiln_gguf::GgmlType;
use kiln_models::testing::write_tiny_chat_model;

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny-chat.gguf");
    write_tiny_chat_model(&path, GgmlType::Q8_0, 256).unwrap();
    Fixture { _dir: dir, path }
}

fn engine(f: &Fixture, cfg: EngineConfig) -> EngineHandle {
    let cfg = EngineConfig { threads: 2, block_size: 4, ..cfg };
    EngineHandle::start(&f.path, cfg).unwrap()
}

fn chat(n: usize, stop: Vec<String>) -> Request {
    let msgs = vec![ChatMessage::new("system", "you are tiny"), ChatMessage::new("user", "tell me about a fox")];
    let mut req = Request::new(Prompt::chat(msgs));
    req.params.stop = StopParams { max_tokens: n, ignore_eos: true, stop, ..Default::default() };
    req
}

fn tokens(t: Vec<u32>, n: usize) -> Request {
    let stop = StopParams { max_tokens: n, ignore_eos: true, ..Default::default() };
    Request {
        prompt: Prompt::Tokens(t),
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

/// Waits until the engine has nothing running (background work included).
fn wait_settled(e: &EngineHandle, prefills: u64) {
    let t0 = Instant::now();
    while e.stats().next_turn_prefills < prefills || e.stats().kv_blocks_used > 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "engine did not settle: {:?}", e.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The follow-up as a client sends it: the first prompt, the answer, the
/// template's opening and a new message.
fn follow_up(e: &EngineHandle, first: &kiln_engine::Completion) -> (Vec<u32>, usize) {
    let tok = e.tokenizer();
    let prompt = e.prompt_tokens(&chat(1, vec![]).prompt).unwrap();
    let opening = tok.encode("<|im_end|>\n<|im_start|>user\n", false).unwrap();
    assert_eq!(opening.len(), 8, "im_end, newline, im_start, 'user' as 4 bytes, newline");
    let mut t = prompt;
    t.extend(&first.tokens);
    t.extend(&opening);
    let reused = t.len();
    t.extend(tok.encode("and then?<|im_end|>\n<|im_start|>assistant\n", false).unwrap());
    (t, reused)
}

#[test]
fn the_opening_is_prefilled_after_an_answer_and_reused_by_the_follow_up() {
    let f = fixture();
    let e = engine(&f, EngineConfig { next_turn_idle_ms: 10, ..Default::default() });
    let first = e.generate(chat(5, vec![])).unwrap();
    assert_eq!(first.finish_reason, FinishReason::Length);
    wait_settled(&e, 1);
    let s = e.stats();
    // The answer's last token (sampled, not computed) and the 8-token opening.
    assert_eq!((s.next_turn_prefills, s.next_turn_tokens), (1, 9));
    assert_eq!(s.running, 0, "background work is not a request");
    let (t, reused) = follow_up(&e, &first);
    let second = e.generate(tokens(t.clone(), 6)).unwrap();
    assert_eq!(second.timings.cached_tokens, reused, "everything up to the new message is cached");
    // The prefilled KV is the KV a fresh computation gives.
    let fresh = engine(&f, EngineConfig { prefix_caching: false, ..Default::default() });
    assert_eq!(fresh.generate(tokens(t, 6)).unwrap().tokens, second.tokens);
}

#[test]
fn without_it_the_follow_up_computes_the_opening_itself() {
    let f = fixture();
    let e = engine(&f, EngineConfig { next_turn_prefill: false, next_turn_idle_ms: 10, ..Default::default() });
    let first = e.generate(chat(5, vec![])).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(e.stats().next_turn_prefills, 0);
    let (t, reused) = follow_up(&e, &first);
    let second = e.generate(tokens(t, 6)).unwrap();
    // Reused to the answer's last computed token: not its last token, not the opening.
    assert_eq!(second.timings.cached_tokens, reused - 9);
}

#[test]
fn a_request_sooner_than_the_idle_time_is_not_held_and_loses_nothing() {
    let f = fixture();
    let e = engine(&f, EngineConfig { next_turn_idle_ms: 60_000, ..Default::default() });
    let first = e.generate(chat(5, vec![])).unwrap();
    let (t, reused) = follow_up(&e, &first);
    let t0 = Instant::now();
    let second = e.generate(tokens(t, 6)).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(30), "the follow-up waited for the parked answer");
    assert_eq!(e.stats().next_turn_prefills, 0, "the parked answer was freed, not prefilled");
    assert_eq!(second.timings.cached_tokens, reused - 9, "its blocks were cached as without the feature");
    wait_settled(&e, 0);
}

#[test]
fn an_answer_cut_by_a_stop_string_prefills_nothing() {
    let f = fixture();
    let e = engine(&f, EngineConfig { next_turn_idle_ms: 10, ..Default::default() });
    let probe = e.generate(chat(12, vec![])).unwrap();
    wait_settled(&e, 1);
    // Stop at the text of a later token of the answer (a printable one, so
    // the text matches as generated): the answer is cut there.
    let stop = probe.tokens[1..]
        .iter()
        .map(|&t| e.tokenizer().decode(&[t], false))
        .find(|s| s.len() == 1 && s.chars().all(|c| c.is_ascii_graphic()))
        .expect("a printable token in 12");
    let cut = e.generate(chat(12, vec![stop])).unwrap();
    assert_eq!(cut.finish_reason, FinishReason::Stop);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(e.stats().next_turn_prefills, 1, "only the first answer's");
    wait_settled(&e, 1);
}
