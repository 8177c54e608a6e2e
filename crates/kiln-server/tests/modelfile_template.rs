//! A Modelfile `TEMPLATE` (a Go template, as Ollama runs it) formats the
//! prompts of the model made with it, on `/api/generate`, `/api/chat` and
//! `/v1/chat/completions`; `/api/show` returns it; a template that does not
//! parse is a 400 naming its line and column.
//!
//! Each rendered prompt is checked token for token against the text it
//! should be, sent raw (`/api/generate` with `raw: true`): the prompt's
//! tokens are the start of the final `context`.

mod support;

use kiln_gguf::GgmlType;
use kiln_hub::{Cache, ModelRef};
use kiln_server::{HubResolver, ServerConfig};
use serde_json::{json, Value};
use support::post;

/// Messages form: ChatML turns, the system prompt first, an open
/// assistant turn after the last message.
const CHATML: &str = r#"{{- if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ end }}
{{- range $i, $m := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 }}
{{- if ne .Role "system" }}<|im_start|>{{ .Role }}
{{ .Content }}<|im_end|>
{{ end }}
{{- if and $last (ne .Role "assistant") }}<|im_start|>assistant
{{ end }}
{{- end }}"#;

/// The older form: one exchange per render, the answer last.
const LEGACY: &str =
    "{{ if .System }}S: {{ .System }}\n{{ end }}{{ if .Prompt }}U: {{ .Prompt }}\n{{ end }}A: {{ .Response }}\n";

async fn server() -> (tempfile::TempDir, kiln_server::Server) {
    let dir = tempfile::tempdir().unwrap();
    let cache = Cache::new(dir.path().join("home"));
    let dest = cache.model_path(&ModelRef::parse_name("smollm2").unwrap());
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    kiln_models::testing::write_tiny_chat_model(&dest, GgmlType::Q8_0, 512).unwrap();
    let mut cfg = ServerConfig { port: 0, ..Default::default() };
    cfg.pool.engine.threads = 1;
    cfg.pool.engine.block_size = 4;
    cfg.pool.warm_up = false;
    let server = kiln_server::start(cfg, Box::new(HubResolver::new(Some(cache)))).await.unwrap();
    (dir, server)
}

async fn create(addr: std::net::SocketAddr, name: &str, modelfile: &str) -> support::Resp {
    post(addr, "/api/create", &json!({"model": name, "modelfile": modelfile, "stream": false})).await
}

/// The prompt's token ids of a non-streamed `/api/generate` answer.
fn prompt_ids(r: &Value) -> Vec<u64> {
    let n = r["prompt_eval_count"].as_u64().unwrap() as usize;
    r["context"].as_array().unwrap()[..n].iter().map(|v| v.as_u64().unwrap()).collect()
}

/// The token ids of `text` sent raw.
async fn raw_ids(addr: std::net::SocketAddr, text: &str) -> Vec<u64> {
    let body = json!({"model": "smollm2", "prompt": text, "raw": true, "stream": false, "options": {"num_predict": 1}});
    let r = post(addr, "/api/generate", &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    prompt_ids(&r.json())
}

#[tokio::test]
async fn a_modelfile_template_formats_every_route() {
    let (_dir, server) = server().await;
    let addr = server.addr;
    let file = format!("FROM smollm2\nSYSTEM Be brief.\nPARAMETER num_predict 1\nTEMPLATE \"\"\"{CHATML}\"\"\"\n");
    let r = create(addr, "brief", &file).await;
    assert_eq!(r.status, 200, "{}", r.body);

    // /api/generate: the system prompt and the user's, then the open turn.
    let want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n";
    let r = post(addr, "/api/generate", &json!({"model": "brief", "prompt": "hi", "stream": false})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(prompt_ids(&r.json()), raw_ids(addr, want).await);

    // /api/chat and /v1/chat/completions: a conversation with an answer in it.
    let messages = json!([
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "the end"}
    ]);
    let want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n\
                <|im_start|>assistant\nhello<|im_end|>\n<|im_start|>user\nthe end<|im_end|>\n<|im_start|>assistant\n";
    let n = raw_ids(addr, want).await.len() as u64;
    let r = post(addr, "/api/chat", &json!({"model": "brief", "messages": messages, "stream": false})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["prompt_eval_count"].as_u64(), Some(n), "{}", r.body);
    let r = post(addr, "/v1/chat/completions", &json!({"model": "brief", "messages": messages, "max_tokens": 1})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.json()["usage"]["prompt_tokens"].as_u64(), Some(n), "{}", r.body);
    // The model's own template writes no system turn: a different prompt.
    let r = post(
        addr,
        "/api/chat",
        &json!({"model": "smollm2", "messages": messages, "stream": false,
        "options": {"num_predict": 1}}),
    )
    .await;
    assert_ne!(r.json()["prompt_eval_count"].as_u64(), Some(n));

    // /api/show gives it back, in `template` and in the Modelfile.
    let show = post(addr, "/api/show", &json!({"model": "brief"})).await.json();
    assert_eq!(show["template"], CHATML);
    assert!(show["modelfile"].as_str().unwrap().contains(&format!("TEMPLATE \"\"\"{CHATML}\"\"\"")), "{show}");
}

#[tokio::test]
async fn the_older_form_renders_each_exchange_and_leaves_the_answer_open() {
    let (_dir, server) = server().await;
    let addr = server.addr;
    let r = post(addr, "/api/create", &json!({"model": "old", "from": "smollm2", "template": LEGACY, "stream": false}))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let messages = json!([
        {"role": "system", "content": "Sys."},
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"}
    ]);
    let want = "S: Sys.\nU: one\nA: two\nU: three\nA: ";
    let n = raw_ids(addr, want).await.len() as u64;
    let body = json!({"model": "old", "messages": messages, "stream": false, "options": {"num_predict": 1}});
    let r = post(addr, "/api/chat", &body).await;
    assert_eq!(r.json()["prompt_eval_count"].as_u64(), Some(n), "{}", r.body);

    // A request's own `template` on /api/generate wins over the model's.
    let body = json!({"model": "old", "prompt": "q", "template": "<{{ .Prompt }}>", "stream": false,
        "options": {"num_predict": 1}});
    let r = post(addr, "/api/generate", &body).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(prompt_ids(&r.json()), raw_ids(addr, "<q>").await);
}

#[tokio::test]
async fn templates_that_do_not_parse_or_run_are_400s_that_say_where() {
    let (_dir, server) = server().await;
    let addr = server.addr;
    for (body, says) in [
        (
            json!({"model": "x", "modelfile": "FROM smollm2\nTEMPLATE \"\"\"{{ range .Messages }}\n{{ .Content }\"\"\""}),
            "TEMPLATE on line 2: template: line 2, column 13: unexpected '}' in action",
        ),
        (json!({"model": "x", "from": "smollm2", "template": "{{ if .System }}"}), "{{if}} has no {{end}}"),
        (
            json!({"model": "x", "from": "smollm2", "template": "{{ frob .Prompt }}"}),
            "line 1, column 4: function \"frob\" not defined",
        ),
    ] {
        let r = post(addr, "/api/create", &body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
        assert!(r.json()["error"].as_str().unwrap().contains(says), "{body}: {}", r.body);
    }
    let body = json!({"model": "smollm2", "prompt": "q", "template": "{{ .Prompt", "stream": false});
    let r = post(addr, "/api/generate", &body).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("unclosed action"), "{}", r.body);
    // One that parses but fails when run (a field messages do not have).
    let r = create(addr, "broken", "FROM smollm2\nTEMPLATE {{ range .Messages }}{{ .Nope }}{{ end }}").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let body = json!({"model": "broken", "messages": [{"role": "user", "content": "hi"}], "stream": false});
    let r = post(addr, "/api/chat", &body).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("can't evaluate field Nope"), "{}", r.body);
    let body = json!({"model": "smollm2", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1});
    assert_eq!(post(addr, "/v1/chat/completions", &body).await.status, 200, "the server still answers");
}
