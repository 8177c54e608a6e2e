//! Speculative decoding by prompt lookup on a tiny random model: the output
//! is the same as plain decoding's, token for token (greedy, and sampled
//! with every sampler option on the same seed), proposals are made and kept
//! when the text repeats, and a request can opt out.

mod common;

use common::{request, samplings};
use kiln_core::SamplingParams;
use kiln_engine::{EngineConfig, EngineHandle, SpecConfig};
use kiln_gguf::GgmlType;
use kiln_models::testing::write_tiny_chat_model;

fn engine(path: &std::path::Path, spec: SpecConfig) -> EngineHandle {
    let cfg = EngineConfig { threads: 2, block_size: 4, spec, ..Default::default() };
    EngineHandle::start(path, cfg).unwrap()
}

/// A prompt that repeats a phrase, as text to rewrite does; a tiny random
/// model then tends to loop, which lookup predicts.
fn repeating() -> Vec<u32> {
    let phrase: Vec<u32> = (40..52).collect();
    phrase.iter().cycle().take(60).copied().collect()
}

#[test]
fn output_equals_plain_decoding() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_tiny_chat_model(&path, GgmlType::F32, 512).unwrap();
    let plain = engine(&path, SpecConfig::default());
    let spec = engine(&path, SpecConfig::ngram(6));
    let samplings = samplings();
    let mut proposed = 0;
    let mut accepted = 0;
    for (k, sampling) in samplings.iter().enumerate() {
        for prompt in [repeating(), (1..30).collect::<Vec<u32>>()] {
            let a = plain.generate(request(&prompt, sampling.clone(), 48)).unwrap();
            let b = spec.generate(request(&prompt, sampling.clone(), 48)).unwrap();
            assert_eq!(a.tokens, b.tokens, "sampling {k}: speculation changed the output");
            assert_eq!(a.text, b.text);
            assert_eq!(a.timings.draft_proposed, 0);
            proposed += b.timings.draft_proposed;
            accepted += b.timings.draft_accepted;
            assert!(b.timings.draft_accepted <= b.timings.draft_proposed);
        }
    }
    assert!(proposed > 0 && accepted > 0, "nothing proposed ({proposed}) or kept ({accepted})");
    let stats = spec.stats();
    assert_eq!((stats.draft_proposed as usize, stats.draft_accepted as usize), (proposed, accepted));
}

#[test]
fn a_request_can_opt_out_and_limits_hold() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_tiny_chat_model(&path, GgmlType::Q8_0, 128).unwrap();
    let spec = engine(&path, SpecConfig::ngram(8));
    let mut req = request(&repeating(), SamplingParams::default(), 40);
    req.params.speculative = Some(false);
    let out = spec.generate(req).unwrap();
    assert_eq!((out.timings.draft_proposed, out.tokens.len()), (0, 40));
    // max_tokens is exact even when a verified run would overshoot it, and
    // the context limit ends the sequence where plain decoding would.
    let plain = engine(&path, SpecConfig::default());
    for n in [1, 2, 3, 7] {
        let a = plain.generate(request(&repeating(), SamplingParams::default(), n)).unwrap();
        let b = spec.generate(request(&repeating(), SamplingParams::default(), n)).unwrap();
        assert_eq!((a.tokens.len(), &a.tokens), (n, &b.tokens));
    }
    let a = plain.generate(request(&repeating(), SamplingParams::default(), 500)).unwrap();
    let b = spec.generate(request(&repeating(), SamplingParams::default(), 500)).unwrap();
    assert_eq!((a.finish_reason, &a.tokens), (b.finish_reason, &b.tokens));
}
