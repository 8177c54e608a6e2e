//! Chat templates: the common layouts render as the models expect, and hostile
//! templates end in errors (never hangs, panics or unbounded output).

use kiln_tokenize::{ChatContext, ChatMessage, ChatTemplate, TemplateLimits, TokenizeError};

const LLAMA3: &str = "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

const QWEN2: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

fn user(text: &str) -> Vec<ChatMessage> {
    vec![ChatMessage::new("user", text)]
}

fn ctx() -> ChatContext {
    ChatContext { bos_token: "<|begin_of_text|>".into(), eos_token: "<|eot_id|>".into(), ..Default::default() }
}

#[test]
fn llama3_layout() {
    let t = ChatTemplate::new(LLAMA3).unwrap();
    let msgs = [ChatMessage::new("system", "Be brief."), ChatMessage::new("user", "  Hi  ")];
    let out = t.render(&msgs, true, &ctx()).unwrap();
    assert_eq!(
        out,
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );
}

#[test]
fn qwen2_adds_default_system_message() {
    let t = ChatTemplate::new(QWEN2).unwrap();
    let out = t.render(&user("Hi"), true, &ctx()).unwrap();
    assert_eq!(
        out,
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n\
         <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    let msgs = [ChatMessage::new("system", "S"), ChatMessage::new("user", "Hi")];
    let out = t.render(&msgs, false, &ctx()).unwrap();
    assert_eq!(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n");
}

#[test]
fn chatml_fallback() {
    let t = ChatTemplate::chatml();
    assert!(t.is_fallback());
    let msgs = [ChatMessage::new("user", "a"), ChatMessage::new("assistant", "b")];
    let out = t.render(&msgs, true, &ctx()).unwrap();
    assert_eq!(out, "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nb<|im_end|>\n<|im_start|>assistant\n");
    assert!(!ChatTemplate::new(QWEN2).unwrap().is_fallback());
}

#[test]
fn jinja_features_templates_rely_on() {
    let src = "{% for m in messages %}{{ m.content.strip().upper() }}|{{ m.content.startswith(' x') }}|\
               {{ m.content.split(',') | length }}|{{ m.missing }}|{% endfor %}\
               {% if tools is not none %}{{ tools | tojson }}{% endif %}|{{ strftime_now('%Y') | length }}\n";
    let t = ChatTemplate::new(src).unwrap();
    let mut c = ctx();
    c.tools = Some(serde_json::json!([{"args": {"a": 2, "b": 1}, "name": "f"}]));
    let out = t.render(&user(" x,y "), false, &c).unwrap();
    // Python spellings (`True`, `json.dumps` separators). The keys are given
    // in sorted order: serde_json sorts them unless a crate in the build
    // turns on its `preserve_order` (llguidance does), and either way the
    // text is the same.
    assert_eq!(out, "X,Y|True|2||[{\"args\": {\"a\": 2, \"b\": 1}, \"name\": \"f\"}]|4");
    // HTML-looking content is not escaped.
    let t = ChatTemplate::new("{{ messages[0].content }}").unwrap();
    assert_eq!(t.render(&user("<b>&</b>"), false, &c).unwrap(), "<b>&</b>");
}

#[test]
fn raise_exception_is_an_error() {
    let t =
        ChatTemplate::new("{% if messages[0]['role'] != 'system' %}{{ raise_exception('System first!') }}{% endif %}")
            .unwrap();
    let err = t.render(&user("x"), false, &ctx()).unwrap_err();
    assert!(matches!(err, TokenizeError::Template(ref m) if m.contains("System first!")), "{err}");
}

#[test]
fn syntax_errors_are_errors() {
    assert!(matches!(ChatTemplate::new("{% for %}"), Err(TokenizeError::Template(_))));
    assert!(ChatTemplate::new("{{ unclosed").is_err());
}

fn expect_error(src: &str, limits: TemplateLimits) -> String {
    let t = ChatTemplate::with_limits(src, limits).unwrap();
    match t.render(&user("x"), true, &ctx()) {
        Err(TokenizeError::Template(m)) => m,
        other => panic!("expected a template error, got {other:?}"),
    }
}

#[test]
fn endless_loops_run_out_of_fuel() {
    let src = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
    let m = expect_error(src, TemplateLimits::default());
    assert!(m.to_lowercase().contains("fuel"), "{m}");
}

#[test]
fn unbounded_recursion_is_stopped() {
    let src = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
    let m = expect_error(src, TemplateLimits::default());
    assert!(!m.is_empty());
}

#[test]
fn huge_output_is_capped() {
    let limits = TemplateLimits { max_output_bytes: 1 << 20, ..TemplateLimits::default() };
    let m = expect_error("{% for i in range(1000) %}{{ 'x' * 10000 }}{% endfor %}", limits);
    assert!(m.contains("exceeds"), "{m}");
    let m = expect_error("{{ 'x' * 5000000 }}", limits);
    assert!(m.contains("exceeds"), "{m}");
}

#[test]
fn python_internals_are_not_reachable() {
    for src in [
        "{{ messages.__class__.__mro__ }}",
        "{{ ''.__class__.__subclasses__() }}",
        "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
        "{{ self._TemplateReference__context }}",
    ] {
        let t = ChatTemplate::new(src).unwrap();
        match t.render(&user("x"), false, &ctx()) {
            Ok(out) => assert!(!out.contains("class") && !out.contains("uid="), "{src}: {out}"),
            Err(TokenizeError::Template(_)) => {}
            Err(e) => panic!("{src}: unexpected {e}"),
        }
    }
}

#[test]
fn next_turn_opening_is_what_follows_an_answer() {
    let llama3 = ChatTemplate::new(LLAMA3).unwrap();
    assert_eq!(
        llama3.next_turn_opening(&ctx()).as_deref(),
        Some("<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n")
    );
    let qwen2 = ChatTemplate::new(QWEN2).unwrap();
    assert_eq!(qwen2.next_turn_opening(&ctx()).as_deref(), Some("<|im_end|>\n<|im_start|>user\n"));
    assert_eq!(ChatTemplate::chatml().next_turn_opening(&ctx()).as_deref(), Some("<|im_end|>\n<|im_start|>user\n"));
    // An answer rendered unlike the prompt that asked for it (here: earlier
    // answers lose their reasoning) has no opening to prepare.
    let strips = "{% for m in messages %}{{ '<' + m.role + '>' }}{% if m.role == 'assistant' %}{{ m.content.split('</think>')[-1] }}{% else %}{{ m.content }}{% endif %}{% endfor %}{% if add_generation_prompt %}<assistant><think>{% endif %}";
    assert_eq!(ChatTemplate::new(strips).unwrap().next_turn_opening(&ctx()), None);
    // A template that refuses the probe (strict alternation from a system message) has none either.
    let strict = "{% if messages[0].role != 'system' %}{{ raise_exception('system first') }}{% endif %}";
    assert_eq!(ChatTemplate::new(strict).unwrap().next_turn_opening(&ctx()), None);
}

/// A model without a template whose vocabulary has Gemma's turn markers
/// gets Gemma's turns (a system message folded into the first user turn);
/// any other gets ChatML.
#[test]
fn the_gemma_fallback_writes_gemma_turns() {
    let t = ChatTemplate::fallback_for(|tok| matches!(tok, "<start_of_turn>" | "<end_of_turn>"));
    assert!(t.is_fallback());
    let msgs = [
        ChatMessage::new("system", "Be brief."),
        ChatMessage::new("user", "Hi"),
        ChatMessage::new("assistant", "Hello."),
        ChatMessage::new("user", "Bye"),
    ];
    let out = t.render(&msgs, true, &ChatContext::default()).unwrap();
    assert_eq!(
        out,
        "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello.<end_of_turn>\n\
         <start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n"
    );
    let plain = ChatTemplate::fallback_for(|_| false);
    assert!(plain.render(&msgs[1..2], true, &ChatContext::default()).unwrap().contains("<|im_start|>user"));
}

/// The fields a tool-using template reads: `tools`, a message's
/// `tool_calls` (arguments as an object), `tool_call_id`, and the request's
/// own variables, which never replace the standard ones.
#[test]
fn tools_calls_and_request_variables_reach_the_template() {
    let src = "{% if enable_thinking is false %}NOTHINK {% endif %}{{ reasoning_effort }}|{% for t in tools %}{{ t.function.name }};{% endfor %}|{% for m in messages %}{{ m.role }}:{{ m.content }}{% if m.tool_calls %}{% for c in m.tool_calls %}[{{ c.function.name }} {{ c.function.arguments | tojson }} {{ c.id }}]{% endfor %}{% endif %}{% if m.tool_call_id is defined %}<{{ m.tool_call_id }}>{% endif %}{% if m.reasoning_content is defined %}!{% endif %}|{% endfor %}";
    let t = ChatTemplate::new(src).unwrap();
    let mut call = ChatMessage::new("assistant", "");
    call.tool_calls.push(kiln_tokenize::TemplateToolCall {
        id: "call_1".into(),
        kind: "function".into(),
        function: kiln_tokenize::TemplateFunctionCall { name: "f".into(), arguments: serde_json::json!({"a": 1}) },
    });
    let mut result = ChatMessage::new("tool", "42");
    result.tool_call_id = Some("call_1".into());
    let mut ctx = ctx();
    ctx.tools = Some(serde_json::json!([{"type": "function", "function": {"name": "f"}}]));
    ctx.vars.insert("enable_thinking".into(), false.into());
    ctx.vars.insert("reasoning_effort".into(), "low".into());
    ctx.vars.insert("messages".into(), "must not replace the messages".into());
    let out = t.render(&[ChatMessage::new("user", "hi"), call, result], false, &ctx).unwrap();
    assert_eq!(out, "NOTHINK low|f;|user:hi|assistant:[f {\"a\": 1} call_1]|tool:42<call_1>|");
}
