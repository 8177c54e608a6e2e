//! The shared binding layer end to end on a tiny random model.

use kiln_bind::{chat_prompt, collect, load, next_event, GenOptions, Input, LoadOptions, Request, Style};

fn tiny() -> (tempfile::TempDir, String) {
    tiny_ctx(256)
}

fn tiny_ctx(ctx: usize) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("tiny.gguf");
    kiln_models::testing::write_tiny_chat_model(&path, kiln_gguf::GgmlType::F32, ctx).expect("tiny model");
    let p = path.to_string_lossy().into_owned();
    (dir, p)
}

#[test]
fn generate_stream_and_chat() -> Result<(), kiln_bind::BindError> {
    let (_dir, path) = tiny();
    let engine = load(&path, &LoadOptions { threads: Some(1), ..LoadOptions::default() }, Style::Snake)?;
    let opts = GenOptions { max_tokens: Some(5), ignore_eos: true, logprobs: true, ..GenOptions::default() };
    let req = |prompt| Request { prompt, params: opts.params(Style::Snake).unwrap_or_default() };
    let done = collect(engine.submit(req(Input::Text("hello".into()).prompt()?))?)?;
    assert_eq!((done.finish_reason, done.timings.decode_tokens), ("length", 5));

    let mut stream = engine.submit(req(Input::Tokens(vec![1, 2, 3]).prompt()?))?;
    let (mut ended, mut events) = (false, Vec::new());
    while let Some(ev) = next_event(&mut stream, &mut ended)? {
        events.push(ev);
    }
    assert_eq!(events.len(), 6, "five tokens and the last event");
    assert!(events[..5].iter().all(|e| e.id.is_some() && e.logprob.is_some_and(|l| l <= 0.0) && !e.eos));
    assert!(events[5].eos && events[5].id.is_none() && events[5].finish_reason == Some("length"));
    assert!(next_event(&mut stream, &mut ended)?.is_none(), "nothing after the last event");

    let chat = chat_prompt(serde_json::json!([{"role": "user", "content": "hi"}]), None)?;
    assert_eq!(collect(engine.submit(req(chat))?)?.timings.decode_tokens, 5);
    Ok(())
}

#[test]
fn cancelled_streams_end_and_free_their_kv() -> Result<(), kiln_bind::BindError> {
    // A generation long enough that the cancel lands before it ends (the
    // tiny model makes 200 tokens in a few milliseconds on a fast machine).
    let (_dir, path) = tiny_ctx(8192);
    let load_opts = LoadOptions { threads: Some(1), ctx_size: Some(8192), ..LoadOptions::default() };
    let engine = load(&path, &load_opts, Style::Snake)?;
    let params =
        GenOptions { max_tokens: Some(8000), ignore_eos: true, ..GenOptions::default() }.params(Style::Snake)?;
    let mut stream = engine.submit(Request { prompt: Input::Text("hello".into()).prompt()?, params })?;
    let mut ended = false;
    assert!(next_event(&mut stream, &mut ended)?.is_some_and(|e| !e.eos));
    stream.cancel();
    let mut last = None;
    while let Some(ev) = next_event(&mut stream, &mut ended)? {
        last = Some(ev);
    }
    assert_eq!(last.and_then(|e| e.finish_reason), Some("cancelled"));
    drop(stream);
    for _ in 0..200 {
        if engine.stats().kv_blocks_used == 0 {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    panic!("the cancelled request's KV blocks were not freed: {:?}", engine.stats());
}

#[test]
fn the_engine_benchmark_measures_every_stream() -> Result<(), kiln_bind::BindError> {
    let (_dir, path) = tiny();
    let engine = load(&path, &LoadOptions { threads: Some(1), ..LoadOptions::default() }, Style::Snake)?;
    for n in [1, 3] {
        let samples = kiln_bind::bench_engine(&engine, vec![vec![1, 2, 3]; n], 6, 1)?;
        assert_eq!(samples.len(), n);
        assert!(samples.iter().all(|s| s.tokens == 6 && s.ttft_ms > 0.0 && s.decode_tok_s > 0.0), "{samples:?}");
    }
    Ok(())
}
