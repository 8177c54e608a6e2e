//! Speculative decoding with a draft model, on tiny random models that
//! share a vocabulary: the output is plain decoding's, token for token
//! (greedy, and sampled on the same seed), whatever the draft (the model
//! itself, a quantized copy, an unrelated model); proposals are kept when
//! the draft agrees; long prompts are caught up in pieces; a draft with
//! another vocabulary is refused with a clear error.

mod common;

use common::{request, samplings};
use kiln_core::SamplingParams;
use kiln_engine::{EngineConfig, EngineHandle, SpecConfig};
use kiln_gguf::GgmlType;
use kiln_models::testing::{tiny_tokenizer_metadata, tiny_weights, write_gguf, TinySpec};

/// A tiny chat model of `ty` with weights from `seed` and `layers` layers.
fn model(dir: &std::path::Path, name: &str, ty: GgmlType, seed: u64, layers: usize) -> std::path::PathBuf {
    let (vocab, md) = tiny_tokenizer_metadata();
    let spec = TinySpec { vocab, ctx: 512, seed, layers, ..TinySpec::llama(ty) };
    let path = dir.join(name);
    write_gguf(&spec, &tiny_weights(&spec), &path, &md).unwrap();
    path
}

fn engine(path: &std::path::Path, draft: Option<&std::path::Path>, chunk: usize) -> EngineHandle {
    let spec = if draft.is_some() { SpecConfig::ngram(5) } else { SpecConfig::default() };
    let cfg = EngineConfig {
        threads: 2,
        block_size: 4,
        prefill_chunk: chunk,
        spec,
        draft_model: draft.map(Into::into),
        ..Default::default()
    };
    EngineHandle::start(path, cfg).unwrap()
}

#[test]
fn output_equals_plain_decoding_whatever_the_draft() {
    let dir = tempfile::tempdir().unwrap();
    let target = model(dir.path(), "target.gguf", GgmlType::F32, 1, 2);
    let drafts = [
        ("itself", target.clone()),
        ("a Q8_0 copy", model(dir.path(), "q8.gguf", GgmlType::Q8_0, 1, 2)),
        ("an unrelated model", model(dir.path(), "other.gguf", GgmlType::F32, 7, 1)),
    ];
    let plain = engine(&target, None, 64);
    let prompts: [Vec<u32>; 2] = [(1..30).collect(), (100..180).collect()];
    let mut kept = Vec::new();
    for (what, draft) in &drafts {
        let spec = engine(&target, Some(draft), 64);
        let (mut proposed, mut accepted) = (0, 0);
        for (k, sampling) in samplings().iter().enumerate() {
            for prompt in &prompts {
                let a = plain.generate(request(prompt, sampling.clone(), 40)).unwrap();
                let b = spec.generate(request(prompt, sampling.clone(), 40)).unwrap();
                assert_eq!(a.tokens, b.tokens, "draft {what}, sampling {k}: the output changed");
                assert_eq!(a.text, b.text);
                assert!(b.timings.draft_accepted <= b.timings.draft_proposed);
                proposed += b.timings.draft_proposed;
                accepted += b.timings.draft_accepted;
            }
        }
        assert!(proposed > 0, "draft {what}: nothing proposed");
        let stats = spec.stats();
        assert_eq!((stats.draft_proposed as usize, stats.draft_accepted as usize), (proposed, accepted));
        kept.push(accepted as f64 / proposed as f64);
    }
    // The model drafting for itself agrees with every greedy proposal and
    // most sampled ones; its quantized copy nearly as often; an unrelated
    // model far less.
    assert!(kept[0] > 0.5 && kept[1] > 0.4, "acceptance {kept:?}");
    assert!(kept[2] < kept[1], "acceptance {kept:?}");
}

#[test]
fn greedy_self_draft_keeps_everything_and_long_prompts_catch_up() {
    let dir = tempfile::tempdir().unwrap();
    let target = model(dir.path(), "target.gguf", GgmlType::F32, 3, 2);
    // Steps of 16 tokens: a 100-token prompt is caught up over several steps.
    let plain = engine(&target, None, 16);
    let spec = engine(&target, Some(&target), 16);
    let prompt: Vec<u32> = (0..100).map(|i| 30 + (i * 7) % 200).collect();
    let a = plain.generate(request(&prompt, SamplingParams::default(), 60)).unwrap();
    let b = spec.generate(request(&prompt, SamplingParams::default(), 60)).unwrap();
    assert_eq!(a.tokens, b.tokens);
    let t = &b.timings;
    assert!(t.draft_proposed >= 30, "{t:?}");
    assert_eq!(t.draft_accepted, t.draft_proposed, "a model agrees with its own greedy choices");
    // Several requests at once, some opting out, share the batch.
    let mut streams = Vec::new();
    for i in 0..6u32 {
        let p: Vec<u32> = (0..20 + 5 * i).map(|j| 40 + (j * 3 + i) % 150).collect();
        let mut req = request(&p, SamplingParams::default(), 30);
        req.params.speculative = (i % 3 == 0).then_some(false);
        streams.push((p, i, spec.submit(req).unwrap()));
    }
    for (p, i, mut s) in streams {
        let mut tokens = Vec::new();
        let mut proposed = None;
        while let Some(ev) = s.blocking_next() {
            match ev {
                kiln_engine::StreamEvent::Token { token, .. } => tokens.push(token),
                kiln_engine::StreamEvent::Done { timings, .. } => proposed = Some(timings.draft_proposed),
                kiln_engine::StreamEvent::Error(e) => panic!("{e}"),
            }
        }
        let want = plain.generate(request(&p, SamplingParams::default(), 30)).unwrap();
        assert_eq!(tokens, want.tokens, "request {i}");
        assert_eq!(proposed == Some(0), i % 3 == 0, "request {i} proposed {proposed:?}");
    }
}

#[test]
fn a_draft_with_another_vocabulary_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = model(dir.path(), "target.gguf", GgmlType::F32, 1, 2);
    let (vocab, mut md) = tiny_tokenizer_metadata();
    for (k, v) in &mut md {
        if k == "tokenizer.ggml.tokens" {
            if let kiln_gguf::Value::Array(kiln_gguf::Array::String(a)) = v {
                a.swap(65, 66);
            }
        }
    }
    let spec = TinySpec { vocab, ctx: 512, ..TinySpec::llama(GgmlType::F32) };
    let other = dir.path().join("other.gguf");
    write_gguf(&spec, &tiny_weights(&spec), &other, &md).unwrap();
    let cfg = EngineConfig { threads: 2, spec: SpecConfig::ngram(4), draft_model: Some(other), ..Default::default() };
    let err = EngineHandle::start(&target, cfg).err().expect("refused").to_string();
    assert!(err.contains("does not share the model's vocabulary") && err.contains("token 65"), "{err}");
    // A draft model without speculation on is a configuration error too.
    let cfg = EngineConfig { threads: 2, draft_model: Some(target.clone()), ..Default::default() };
    assert!(EngineHandle::start(&target, cfg).is_err());
}
