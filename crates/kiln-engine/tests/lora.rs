//! LoRA adapters through the engine: per-request selection in one batch,
//! the prefix cache kept apart per adapter, run-time load and unload
//! (refused while in use), and clear errors.

use kiln_core::{SamplingParams, StopParams};
use kiln_engine::{EngineConfig, EngineError, EngineHandle, LoraRequest, Params, Prompt, Request};
use kiln_gguf::GgmlType;
use kiln_models::lora::Proj;
use kiln_models::testing::lora::TinyLora;
use kiln_models::testing::write_tiny_chat_model;

struct Fixture {
    dir: tempfile::TempDir,
    engine: EngineHandle,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_tiny_chat_model(&path, GgmlType::Q8_0, 256).unwrap();
    let cfg = EngineConfig { threads: 2, block_size: 4, prefill_chunk: 64, ..Default::default() };
    let engine = EngineHandle::start(&path, cfg).unwrap();
    let c = engine.info().config.clone();
    for (name, seed) in [("a", 1u64), ("b", 2)] {
        // Large deltas, so that greedy tokens differ from the base's.
        let mut t = TinyLora::random(&c, 8, &Proj::ALL, seed, false);
        t.alpha *= 8.0;
        t.write_peft(&dir.path().join(name)).unwrap();
    }
    Fixture { dir, engine }
}

fn greedy(prompt: &[u32], lora: Option<&str>) -> Request {
    Request {
        prompt: Prompt::Tokens(prompt.to_vec()),
        params: Params {
            sampling: SamplingParams::default(),
            stop: StopParams { max_tokens: 8, ignore_eos: true, ..Default::default() },
            lora: lora.map(LoraRequest::new),
            ..Default::default()
        },
    }
}

#[test]
fn adapters_and_the_base_share_a_batch_and_each_equals_itself_alone() {
    let f = fixture();
    let e = &f.engine;
    e.load_lora("a", &f.dir.path().join("a")).unwrap();
    let info = e.load_lora("b", &f.dir.path().join("b")).unwrap();
    assert_eq!((info.rank, info.format.as_str(), info.in_use), (8, "peft", 0));
    let prompt: Vec<u32> = "the same prompt for everyone".bytes().map(u32::from).collect();
    let alone: Vec<Vec<u32>> =
        [None, Some("a"), Some("b")].iter().map(|l| e.generate(greedy(&prompt, *l)).unwrap().tokens).collect();
    assert_ne!(alone[0], alone[1], "adapter a changes nothing: the test shows nothing");
    assert_ne!(alone[1], alone[2]);
    // All three at once, twice over (one batch, the prefix cache warm).
    for _ in 0..2 {
        let streams: Vec<_> =
            [None, Some("a"), Some("b")].iter().map(|l| e.submit(greedy(&prompt, *l)).unwrap()).collect();
        for (s, want) in streams.into_iter().zip(&alone) {
            let mut s = s;
            let mut got = Vec::new();
            while let Some(ev) = s.blocking_next() {
                if let kiln_engine::StreamEvent::Token { token, .. } = ev {
                    got.push(token);
                }
            }
            assert_eq!(&got, want);
        }
    }
    // Scale 0 is the base model.
    let mut zero = greedy(&prompt, Some("a"));
    zero.params.lora.as_mut().unwrap().scale = 0.0;
    assert_eq!(e.generate(zero).unwrap().tokens, alone[0]);
}

#[test]
fn load_and_unload_at_run_time() {
    let f = fixture();
    let e = &f.engine;
    let prompt: Vec<u32> = "abc".bytes().map(u32::from).collect();
    let err = e.generate(greedy(&prompt, Some("a"))).unwrap_err();
    assert!(matches!(err, EngineError::UnknownLora(ref n) if n == "a"), "{err}");
    e.load_lora("a", &f.dir.path().join("a")).unwrap();
    assert!(matches!(e.load_lora("a", &f.dir.path().join("b")), Err(EngineError::LoraExists(_))));
    let with_a = e.generate(greedy(&prompt, Some("a"))).unwrap().tokens;
    // In use: refused, and the request finishes as it would have.
    let mut long = greedy(&prompt, Some("a"));
    long.params.stop.max_tokens = 240;
    let mut stream = e.submit(long).unwrap();
    let res = e.unload_lora("a");
    assert!(matches!(res, Err(EngineError::LoraInUse { requests: 1, .. })), "{res:?}");
    while stream.blocking_next().is_some() {}
    drop(stream);
    e.unload_lora("a").unwrap();
    assert!(e.loras().is_empty());
    assert!(matches!(e.unload_lora("a"), Err(EngineError::UnknownLora(_))));
    // Loaded again under the same name (another id: no stale prefix cache).
    e.load_lora("a", &f.dir.path().join("b")).unwrap();
    let as_b = e.generate(greedy(&prompt, Some("a"))).unwrap().tokens;
    e.load_lora("b", &f.dir.path().join("b")).unwrap();
    assert_eq!(as_b, e.generate(greedy(&prompt, Some("b"))).unwrap().tokens);
    assert_ne!(as_b, with_a);
    // Bad files change nothing.
    let bad = e.load_lora("c", &f.dir.path().join("missing")).unwrap_err().to_string();
    assert!(bad.contains("no such file"), "{bad}");
    assert!(e.load_lora("bad name", &f.dir.path().join("a")).is_err());
    assert_eq!(e.loras().len(), 2);
    assert_eq!(e.generate(greedy(&prompt, Some("b"))).unwrap().tokens, as_b);
}
