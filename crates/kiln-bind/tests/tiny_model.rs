//! The shared binding layer end to end on a tiny random model.

use kiln_bind::{chat_prompt, load, submit, EngineHandle, Events, GenOptions, Input, LoadOptions, Style};

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

fn engine(path: &str, load_opts: LoadOptions) -> Result<EngineHandle, kiln_bind::BindError> {
    Ok(load(path, &load_opts, Style::Snake)?.generator("generate")?.clone())
}

fn one_thread() -> LoadOptions {
    LoadOptions { threads: Some(1), ..LoadOptions::default() }
}

#[test]
fn generate_stream_and_chat() -> Result<(), kiln_bind::BindError> {
    let (_dir, path) = tiny();
    let engine = engine(&path, one_thread())?;
    let opts = GenOptions { max_tokens: Some(5), ignore_eos: true, logprobs: true, ..GenOptions::default() };
    let done = submit(&engine, Input::Text("hello".into()).prompt()?, &opts, Style::Snake)?.collect()?;
    assert_eq!((done.finish_reason, done.timings.decode_tokens), ("length", 5));

    let mut stream = submit(&engine, Input::Tokens(vec![1, 2, 3]).prompt()?, &opts, Style::Snake)?;
    let mut events = Vec::new();
    while let Some(ev) = stream.next_blocking()? {
        events.push(ev);
    }
    assert_eq!(events.len(), 6, "five tokens and the last event");
    assert!(events[..5].iter().all(|e| e.id.is_some() && e.logprob.is_some_and(|l| l <= 0.0) && !e.eos));
    assert!(events[5].eos && events[5].id.is_none() && events[5].finish_reason == Some("length"));
    assert!(stream.next_blocking()?.is_none(), "nothing after the last event");

    let chat = chat_prompt(serde_json::json!([{"role": "user", "content": "hi"}]))?;
    assert_eq!(submit(&engine, chat, &opts, Style::Snake)?.collect()?.timings.decode_tokens, 5);
    Ok(())
}

fn weather_tool() -> serde_json::Value {
    serde_json::json!([{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])
}

#[test]
fn a_required_tool_call_is_parsed_from_a_constrained_answer() -> Result<(), kiln_bind::BindError> {
    let (_dir, path) = tiny_ctx(2048);
    let engine = engine(&path, LoadOptions { ctx_size: Some(2048), ..one_thread() })?;
    let opts = GenOptions {
        max_tokens: Some(120),
        tools: Some(weather_tool()),
        tool_choice: Some(serde_json::json!("required")),
        ..GenOptions::default()
    };
    let chat = || chat_prompt(serde_json::json!([{"role": "user", "content": "Weather in Paris?"}]));
    let reply = submit(&engine, chat()?, &opts, Style::Snake)?.collect()?;
    assert_eq!(reply.finish_reason, "tool_calls", "{reply:?}");
    assert_eq!(reply.tool_calls.len(), 1, "{reply:?}");
    assert_eq!(reply.tool_calls[0].name, "get_weather");
    let args: serde_json::Value = serde_json::from_str(&reply.tool_calls[0].arguments).unwrap_or_default();
    assert!(args["city"].is_string(), "{args}");

    // Streamed, the same call arrives on an event; the content stays empty.
    let mut events = submit(&engine, chat()?, &opts, Style::Snake)?;
    let (mut calls, mut content, mut last) = (Vec::new(), String::new(), None);
    while let Some(ev) = events.next_blocking()? {
        calls.extend(ev.tool_calls.iter().map(|c| (c.name.clone(), c.arguments.clone())));
        content.push_str(&ev.text);
        last = ev.finish_reason;
    }
    assert_eq!(calls, [(reply.tool_calls[0].name.clone(), reply.tool_calls[0].arguments.clone())]);
    assert_eq!((content.as_str(), last), ("", Some("tool_calls")));
    Ok(())
}

#[test]
fn a_json_schema_answer_parses_and_matches() -> Result<(), kiln_bind::BindError> {
    let (_dir, path) = tiny_ctx(2048);
    let engine = engine(&path, LoadOptions { ctx_size: Some(2048), ..one_thread() })?;
    let schema = serde_json::json!({"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}},
        "required": ["n", "ok"]});
    let opts = GenOptions {
        max_tokens: Some(100),
        response_format: Some(serde_json::json!({"type": "json_schema", "json_schema": {"schema": schema}})),
        ..GenOptions::default()
    };
    for prompt in
        [Input::Text("hello".into()).prompt()?, chat_prompt(serde_json::json!([{"role": "user", "content": "hi"}]))?]
    {
        let reply = submit(&engine, prompt, &opts, Style::Snake)?.collect()?;
        let v: serde_json::Value = serde_json::from_str(&reply.content).unwrap_or_default();
        assert!(v["n"].is_i64() && v["ok"].is_boolean(), "{:?}", reply.content);
        assert_eq!(v.as_object().map(|o| o.len()), Some(2), "{v}");
    }
    Ok(())
}

#[test]
fn shapes_the_model_cannot_take_are_refused() -> Result<(), kiln_bind::BindError> {
    let (_dir, path) = tiny();
    let engine = engine(&path, one_thread())?;
    let raw = GenOptions { tools: Some(weather_tool()), ..GenOptions::default() };
    let e = submit(&engine, Input::Text("hi".into()).prompt()?, &raw, Style::Camel).err();
    assert!(e.is_some_and(|e| e.is_invalid() && e.to_string().contains("`tools` applies to chat")));
    let bad_schema = GenOptions {
        response_format: Some(
            serde_json::json!({"type": "json_schema", "json_schema": {"schema": {"type": "frobnicate"}}}),
        ),
        ..GenOptions::default()
    };
    let e = submit(&engine, Input::Text("hi".into()).prompt()?, &bad_schema, Style::Camel).err();
    assert!(e.as_ref().is_some_and(|e| e.is_invalid() && e.to_string().starts_with("`responseFormat`: ")), "{e:?}");
    Ok(())
}

#[test]
fn an_embedding_model_embeds_and_refuses_to_generate() -> Result<(), kiln_bind::BindError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let encoder = kiln_models::testing::encoder::TinyEncoder::default();
    encoder.write_servable(dir.path()).expect("tiny encoder");
    let model = load(&dir.path().to_string_lossy(), &one_thread(), Style::Snake)?;
    assert_eq!(model.kind(), "embed");
    assert!(model.generator("chat").is_err_and(|e| e.is_invalid() && e.to_string().contains("use `embed`")));
    let emb = model.embedder("embed")?;
    let texts = vec!["hello world".to_string(), "a b c".to_string()];
    let v = kiln_bind::embed(emb, &texts, &kiln_bind::EmbedOptions::default())?;
    let direct = emb.embed_blocking(texts.iter().map(|t| emb.tokenize(t, true)).collect::<Result<_, _>>()?)?;
    assert_eq!(v, direct, "the binding's vectors are the Embedder's");
    let cut = kiln_bind::embed(emb, &texts, &kiln_bind::EmbedOptions { dimensions: Some(8), truncate: true })?;
    assert!(cut.iter().all(|v| v.len() == 8));
    let bad = kiln_bind::embed(emb, &texts, &kiln_bind::EmbedOptions { dimensions: Some(0), truncate: true });
    assert!(bad.is_err_and(|e| e.is_invalid()));
    assert!(
        kiln_bind::embed(emb, &[String::new()], &Default::default()).is_err_and(|e| e.to_string() == "text 0 is empty")
    );
    assert!(kiln_bind::rerank(emb, "q", &texts, false).is_err_and(|e| e.to_string().contains("needs a reranker")));

    let (_g, path) = tiny();
    let gen = load(&path, &one_thread(), Style::Snake)?;
    assert!(gen.embedder("embed").is_err_and(|e| e.to_string().contains("needs an embedding model")));
    Ok(())
}

#[test]
fn a_reranker_ranks_best_first() -> Result<(), kiln_bind::BindError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let encoder = kiln_models::testing::encoder::TinyEncoder { rank: true, ..Default::default() };
    encoder.write_servable(dir.path()).expect("tiny reranker");
    let model = load(&dir.path().to_string_lossy(), &one_thread(), Style::Snake)?;
    assert_eq!(model.kind(), "rerank");
    let emb = model.embedder("rerank")?;
    let docs = vec!["a b".to_string(), "hello world".to_string(), "c".to_string()];
    let ranked = kiln_bind::rerank(emb, "hello", &docs, false)?;
    let mut indices: Vec<usize> = ranked.iter().map(|r| r.0).collect();
    assert!(ranked.windows(2).all(|w| w[0].1 >= w[1].1), "{ranked:?}");
    indices.sort_unstable();
    assert_eq!(indices, [0, 1, 2]);
    let direct = emb.score_blocking(vec![emb.pair_tokens("hello", &docs[1], false)?])?;
    assert_eq!(ranked.iter().find(|r| r.0 == 1).map(|r| r.1), Some(direct[0]));
    Ok(())
}

#[test]
fn cancelled_streams_end_and_free_their_kv() -> Result<(), kiln_bind::BindError> {
    // A generation long enough that the cancel lands before it ends (the
    // tiny model makes 200 tokens in a few milliseconds on a fast machine).
    let (_dir, path) = tiny_ctx(8192);
    let load_opts = LoadOptions { threads: Some(1), ctx_size: Some(8192), ..LoadOptions::default() };
    let engine = engine(&path, load_opts)?;
    let opts = GenOptions { max_tokens: Some(8000), ignore_eos: true, ..GenOptions::default() };
    let mut stream: Events = submit(&engine, Input::Text("hello".into()).prompt()?, &opts, Style::Snake)?;
    assert!(stream.next_blocking()?.is_some_and(|e| !e.eos));
    stream.cancel_handle().cancel();
    let mut last = None;
    while let Some(ev) = stream.next_blocking()? {
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
    let engine = engine(&path, one_thread())?;
    for n in [1, 3] {
        let samples = kiln_bind::bench_engine(&engine, vec![vec![1, 2, 3]; n], 6, 1)?;
        assert_eq!(samples.len(), n);
        assert!(samples.iter().all(|s| s.tokens == 6 && s.ttft_ms > 0.0 && s.decode_tok_s > 0.0), "{samples:?}");
    }
    Ok(())
}
