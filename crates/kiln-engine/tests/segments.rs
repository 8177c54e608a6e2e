//! The segment cache end to end on a tiny random model: segments computed
//! once alone, copied (keys re-rotated) into later requests at other
//! positions and orders; `cached_tokens` and the timings count them;
//! recomputing whole segments equals full prefill; bad input is refused.

use kiln_core::{SamplingParams, StopParams};
use kiln_engine::{
    segment_marker, ChatMessage, Completion, EngineConfig, EngineHandle, KvType, Params, Prompt, Request, SegmentSpan,
    SegmentedPrompt,
};
use kiln_gguf::GgmlType;
use kiln_models::testing::write_tiny_chat_model;

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny-chat.gguf");
    write_tiny_chat_model(&path, GgmlType::F32, 512).unwrap();
    Fixture { _dir: dir, path }
}

fn engine(f: &Fixture, cfg: EngineConfig) -> EngineHandle {
    let cfg = EngineConfig { threads: 2, block_size: 4, prefill_chunk: 64, next_turn_prefill: false, ..cfg };
    EngineHandle::start(&f.path, cfg).unwrap()
}

fn params(recompute: Option<usize>) -> Params {
    Params {
        sampling: SamplingParams::default(),
        stop: StopParams { max_tokens: 6, ignore_eos: true, ..Default::default() },
        segment_recompute: recompute,
        ..Params::default()
    }
}

fn docs() -> Vec<String> {
    [
        "The fox lives in the north wood and eats berries in the autumn.",
        "Granite is an igneous rock made of quartz and feldspar.",
        "The ferry leaves the harbour at seven and returns at noon.",
    ]
    .map(String::from)
    .to_vec()
}

fn segmented(segments: Vec<String>, question: &str, recompute: Option<usize>) -> Request {
    let prompt = Prompt::Segmented(SegmentedPrompt { segments, prompt: Box::new(Prompt::Text(question.into())) });
    Request { prompt, params: params(recompute) }
}

#[test]
fn segments_are_computed_once_and_copied_in_any_order() {
    let f = fixture();
    let e = engine(&f, EngineConfig { segment_recompute: 2, ..Default::default() });
    let d = docs();
    let first = e.generate(segmented(d.clone(), " Where does the fox live?", None)).unwrap();
    // Each segment was computed alone first (the request waited for
    // them), then copied into the request after its first 2 tokens.
    assert_eq!(e.stats().segment_jobs, 3);
    assert_eq!(first.timings.segment_recomputed, 3 * 2);
    // The documents reordered: every segment is copied after its first 2 tokens.
    let order = vec![d[2].clone(), d[0].clone(), d[1].clone()];
    let second = e.generate(segmented(order.clone(), " When does the ferry leave?", None)).unwrap();
    assert_eq!(e.stats().segment_jobs, 3, "no segment computed again");
    let (tokens, spans) = e.prompt_tokens_segmented(&segmented(order, " x", None).prompt).unwrap();
    let seg_tokens: usize = spans.iter().map(|s| s.len).sum();
    assert_eq!(spans.len(), 3);
    assert!(tokens.len() > seg_tokens);
    assert_eq!(second.timings.segment_tokens, seg_tokens - 3 * 2);
    assert_eq!(first.timings.segment_tokens, seg_tokens - 3 * 2);
    assert_eq!(second.timings.segment_recomputed, 3 * 2);
    assert_eq!(second.timings.cached_tokens, second.timings.segment_tokens);
    assert_eq!(second.timings.prefill_tokens, second.timings.prompt_tokens - second.timings.cached_tokens);
    assert!(e.stats().segment_tokens_copied >= second.timings.segment_tokens as u64);
    assert_eq!(second.tokens.len(), 6);
}

/// Greedy output of `req` and of the same tokens with no segments.
fn with_and_without(e: &EngineHandle, req: Request) -> (Completion, Completion) {
    let (tokens, spans) = e.prompt_tokens_segmented(&req.prompt).unwrap();
    assert!(!spans.is_empty());
    let plain = e.generate(Request { prompt: Prompt::Tokens(tokens), params: params(None) }).unwrap();
    let seg = e.generate(req).unwrap();
    (seg, plain)
}

#[test]
fn recomputing_whole_segments_equals_full_prefill() {
    let f = fixture();
    let e = engine(&f, EngineConfig::default());
    let d = docs();
    // Warm the segment cache, then ask with recompute past every segment.
    e.generate(segmented(d.clone(), " Q?", Some(0))).unwrap();
    let (seg, plain) = with_and_without(&e, segmented(d, " What is granite?", Some(10_000)));
    assert_eq!(seg.tokens, plain.tokens);
    assert_eq!(seg.timings.segment_tokens, 0);
}

#[test]
fn a_segment_at_position_zero_copied_whole_equals_full_prefill() {
    // Nothing before the segment: computed alone it is exactly what a full
    // prefill computes there, so the copy (shift 0) changes nothing.
    let f = fixture();
    let e = engine(&f, EngineConfig { segment_recompute: 0, ..Default::default() });
    let tok = e.tokenizer();
    let seg = tok.encode(&docs()[0], false).unwrap();
    let mut tokens = seg.clone();
    tokens.extend(tok.encode(" Where does the fox live?", false).unwrap());
    let spans = vec![SegmentSpan { start: 0, len: seg.len() }];
    let run = |segments: Vec<SegmentSpan>| {
        let mut s = e.submit_tokens(tokens.clone(), Params { segments, ..params(None) }).unwrap();
        let mut out = Vec::new();
        while let Some(ev) = s.blocking_next() {
            match ev {
                kiln_core::StreamEvent::Token { token, .. } => out.push(token),
                kiln_core::StreamEvent::Done { timings, .. } => return (out, timings),
                kiln_core::StreamEvent::Error(e) => panic!("{e}"),
            }
        }
        panic!("no end");
    };
    let (plain, _) = run(Vec::new());
    // The segment is computed alone, then copied (the plain run's blocks
    // are another prefix-cache namespace: they are not reused).
    let (copied, t) = run(spans);
    assert_eq!(t.cached_tokens, seg.len());
    assert_eq!(t.segment_tokens, seg.len());
    assert_eq!(copied, plain);
}

#[test]
fn chat_content_marked_as_segments_is_reused_across_conversations() {
    let f = fixture();
    let e = engine(&f, EngineConfig { segment_recompute: 1, ..Default::default() });
    let d = docs();
    let chat = |segments: Vec<String>, q: &str| {
        let body: String = (0..segments.len()).map(segment_marker).collect::<Vec<_>>().join("\n");
        let msgs = vec![
            ChatMessage::new("system", "Answer from the documents."),
            ChatMessage::new("user", format!("{body}\n{q}")),
        ];
        let prompt = Prompt::Segmented(SegmentedPrompt { segments, prompt: Box::new(Prompt::chat(msgs)) });
        Request { prompt, params: params(None) }
    };
    e.generate(chat(vec![d[0].clone(), d[1].clone()], "Fox?")).unwrap();
    let out = e.generate(chat(vec![d[1].clone(), d[0].clone()], "Granite?")).unwrap();
    assert!(out.timings.segment_tokens > 0);
    assert_eq!(out.timings.segment_recomputed, 2);
    assert_eq!(e.stats().segment_jobs, 2);
}

#[test]
fn bad_segments_are_refused_with_a_reason() {
    let f = fixture();
    let e = engine(&f, EngineConfig { max_segments: 2, max_ctx: Some(64), ..Default::default() });
    let err = |r: Request| e.generate(r).unwrap_err().to_string();
    assert!(err(segmented(docs(), " Q?", None)).contains("at most 2"));
    let long = "word ".repeat(200);
    assert!(err(segmented(vec![long], " Q?", None)).contains("longer than the context"));
    assert!(err(segmented(vec![String::new()], " Q?", None)).contains("segment 0 is empty"));
    let chat = Prompt::Segmented(SegmentedPrompt {
        segments: vec!["a".into()],
        prompt: Box::new(Prompt::chat(vec![ChatMessage::new("user", "no marker")])),
    });
    assert!(err(Request { prompt: chat, params: params(None) }).contains("does not appear"));
    let out =
        e.submit_tokens(vec![1, 2, 3], Params { segments: vec![SegmentSpan { start: 2, len: 5 }], ..params(None) });
    assert!(out.is_err());
}

#[test]
fn a_quantized_kv_cache_refuses_segments() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny-32.gguf");
    let base = kiln_models::testing::TinySpec {
        heads: 2,
        kv_heads: 1,
        ..kiln_models::testing::TinySpec::llama(GgmlType::F32)
    };
    kiln_models::testing::write_tiny_chat_model_like(&path, base).unwrap();
    let cfg = EngineConfig { threads: 1, cache_type_k: KvType::Q8_0, ..Default::default() };
    let e = EngineHandle::start(&path, cfg).unwrap();
    let msg = e.generate(segmented(docs(), " Q?", None)).unwrap_err().to_string();
    assert!(msg.contains("16-bit KV cache"), "{msg}");
    // Without segments the engine serves as usual.
    let plain = Request { prompt: Prompt::Text("hello".into()), params: params(None) };
    assert_eq!(e.generate(plain).unwrap().tokens.len(), 6);
}

#[test]
fn runs_around_copies_in_one_step_equal_one_token_per_step() {
    // With copies between them, a prompt's runs (the text around the
    // segments and their recomputed tokens) share one forward pass; a
    // step of one token computes them one after the other instead. The
    // answers and their log-probabilities must not differ.
    let f = fixture();
    let d = docs();
    let ask = |chunk: usize| {
        let cfg = EngineConfig {
            threads: 2,
            block_size: 4,
            prefill_chunk: chunk,
            next_turn_prefill: false,
            segment_recompute: 2,
            ..Default::default()
        };
        let e = EngineHandle::start(&f.path, cfg).unwrap();
        e.generate(segmented(d.clone(), " Where does the fox live?", None)).unwrap();
        let order = vec![d[1].clone(), d[2].clone(), d[0].clone()];
        let mut req = segmented(order, " When does the ferry leave?", None);
        req.params.sampling.logprobs = true;
        let mut s = e.submit(req).unwrap();
        let (mut out, mut steps) = (Vec::new(), None);
        while let Some(ev) = s.blocking_next() {
            match ev {
                kiln_core::StreamEvent::Token { token, logprob, .. } => {
                    out.push((token, logprob.map(|l| l.logprob)));
                }
                kiln_core::StreamEvent::Done { timings, .. } => steps = Some(timings),
                kiln_core::StreamEvent::Error(e) => panic!("{e}"),
            }
        }
        let t = steps.expect("a done event");
        assert!(t.segment_tokens > 0 && t.segment_recomputed == 3 * 2);
        (out, e.stats().steps)
    };
    let (one_step, steps_one) = ask(256);
    let (per_token, steps_per_token) = ask(1);
    assert!(steps_per_token > steps_one + 20, "{steps_per_token} steps against {steps_one}");
    assert_eq!(one_step.len(), per_token.len());
    for ((ta, la), (tb, lb)) in one_step.iter().zip(&per_token) {
        assert_eq!(ta, tb);
        let (la, lb) = (la.expect("logprob"), lb.expect("logprob"));
        assert!((la - lb).abs() < 2e-3, "logprob {la} against {lb}");
    }
}

#[test]
fn a_segment_computed_after_the_prompts_head_equals_full_prefill_there() {
    // The segment is computed after the request's head (everything before
    // it, within --segment-context): copied back to the same place, its
    // K/V are what a full prefill computes there (shift 0), so the answer
    // and its log-probabilities equal the plain prompt's. Computed alone
    // (context 0), they are not.
    let f = fixture();
    let e = engine(&f, EngineConfig { segment_recompute: 0, segment_context: 64, ..Default::default() });
    let tok = e.tokenizer();
    let head = tok.encode("You answer questions about animals. Document:", false).unwrap();
    let seg = tok.encode(&docs()[0], false).unwrap();
    let mut tokens = head.clone();
    tokens.extend(&seg);
    tokens.extend(tok.encode(" Where does the fox live?", false).unwrap());
    let run = |segments: Vec<SegmentSpan>, context: usize| {
        let mut p = Params { segments, segment_context: Some(context), ..params(None) };
        p.sampling.logprobs = true;
        let mut s = e.submit_tokens(tokens.clone(), p).unwrap();
        let mut out = Vec::new();
        while let Some(ev) = s.blocking_next() {
            match ev {
                kiln_core::StreamEvent::Token { token, logprob, .. } => out.push((token, logprob.unwrap().logprob)),
                kiln_core::StreamEvent::Done { timings, .. } => return (out, timings),
                kiln_core::StreamEvent::Error(e) => panic!("{e}"),
            }
        }
        panic!("no end");
    };
    let span = vec![SegmentSpan { start: head.len(), len: seg.len() }];
    let (plain, _) = run(Vec::new(), 0);
    let (after_head, t) = run(span.clone(), 64);
    assert_eq!(t.segment_tokens, seg.len());
    let (alone, t0) = run(span, 0);
    assert_eq!(t0.segment_tokens, seg.len());
    assert_eq!(e.stats().segment_jobs, 2, "one cached sequence per context");
    let worst = |a: &[(u32, f32)]| a.iter().zip(&plain).map(|(x, y)| (x.1 - y.1).abs()).fold(0f32, f32::max);
    assert_eq!(after_head.iter().map(|t| t.0).collect::<Vec<_>>(), plain.iter().map(|t| t.0).collect::<Vec<_>>());
    assert!(worst(&after_head) < 1e-4, "after the head: {}", worst(&after_head));
    assert!(worst(&alone) > 1e-3, "alone: {} (the head must matter for this check to mean anything)", worst(&alone));
}
