//! Models made with a LoRA adapter (Modelfile `ADAPTER`, Ollama's
//! `adapters` with files uploaded to `/api/blobs`): the created name gives
//! what `--lora` gives on the same request and differs from the base, on
//! the OpenAI and Ollama routes; it is listed, shown with its ADAPTER,
//! copied, deleted (files with the last copy) and read again by a server
//! started anew; bad adapters are a 400 that leaves nothing behind.

mod support;

use std::path::{Path, PathBuf};

use kiln_gguf::GgmlType;
use kiln_hub::{Cache, ModelRef};
use kiln_models::lora::Proj;
use kiln_models::testing::lora::TinyLora;
use kiln_server::{HubResolver, ServerConfig};
use serde_json::{json, Value};
use support::{get, post, send, Resp};

/// A server over a cache at `home` holding the tiny model as `smollm2`.
async fn server(home: &Path, allow_paths: bool) -> kiln_server::Server {
    let cache = Cache::new(home);
    let dest = cache.model_path(&ModelRef::parse_name("smollm2").unwrap());
    if !dest.exists() {
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        kiln_models::testing::write_tiny_chat_model(&dest, GgmlType::Q8_0, 256).unwrap();
    }
    let mut cfg = ServerConfig { port: 0, ..Default::default() };
    cfg.pool.engine.threads = 1;
    cfg.pool.engine.block_size = 4;
    cfg.pool.warm_up = false;
    cfg.allow_lora_loading = allow_paths;
    kiln_server::start(cfg, Box::new(HubResolver::new(Some(cache)))).await.unwrap()
}

/// Adapters for the tiny model in `dir`: `peft/` and `lora.gguf` (another
/// random adapter), plus `wide/` (shapes of a wider model) and
/// `gemma.gguf` (another architecture).
fn adapters(home: &Path, dir: &Path) {
    let cfg =
        kiln_models::open(&Cache::new(home).model_path(&ModelRef::parse_name("smollm2").unwrap())).unwrap().config;
    let mut t = TinyLora::random(&cfg, 8, &Proj::ALL, 1, false);
    t.alpha *= 8.0;
    t.write_peft(&dir.join("peft")).unwrap();
    let mut g = TinyLora::random(&cfg, 4, &Proj::ALL, 2, false);
    g.alpha *= 8.0;
    g.write_gguf(&cfg, &dir.join("lora.gguf"), GgmlType::F16).unwrap();
    let wide = kiln_models::ModelConfig { intermediate_size: cfg.intermediate_size * 2, ..cfg.clone() };
    TinyLora::random(&wide, 4, &Proj::ALL, 3, false).write_peft(&dir.join("wide")).unwrap();
    let gemma = kiln_models::ModelConfig { arch: kiln_models::Arch::Gemma3, ..cfg.clone() };
    TinyLora::random(&gemma, 4, &[Proj::Q], 4, false)
        .write_gguf(&gemma, &dir.join("gemma.gguf"), GgmlType::F16)
        .unwrap();
}

/// Uploads the files of an adapter; returns the `adapters` map.
async fn upload(addr: std::net::SocketAddr, files: &[PathBuf]) -> Value {
    let mut map = serde_json::Map::new();
    for f in files {
        let digest = kiln_hub::file_digest(f).unwrap();
        let r = send(addr, "POST", &format!("/api/blobs/{digest}"), &std::fs::read(f).unwrap(), "").await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(send(addr, "HEAD", &format!("/api/blobs/{digest}"), b"", "").await.status, 200);
        map.insert(f.file_name().unwrap().to_string_lossy().into(), json!(digest));
    }
    Value::Object(map)
}

fn peft_files(dir: &Path) -> Vec<PathBuf> {
    vec![dir.join("peft/adapter_config.json"), dir.join("peft/adapter_model.safetensors")]
}

async fn completion(addr: std::net::SocketAddr, model: &str) -> String {
    let body = json!({"model": model, "prompt": [104, 101, 108, 108, 111, 32, 116], "max_tokens": 8,
        "temperature": 0, "logit_bias": support::no_end_bias()});
    let r = post(addr, "/v1/completions", &body).await;
    assert_eq!(r.status, 200, "{model}: {}", r.body);
    r.json()["choices"][0]["text"].as_str().unwrap().to_string()
}

async fn ollama_chat(addr: std::net::SocketAddr, model: &str) -> String {
    let body = json!({"model": model, "messages": [{"role": "user", "content": "hello there"}], "stream": false,
        "options": {"temperature": 0, "num_predict": 8}});
    let r = post(addr, "/api/chat", &body).await;
    assert_eq!(r.status, 200, "{model}: {}", r.body);
    r.json()["message"]["content"].as_str().unwrap().to_string()
}

fn create_ok(r: &Resp) {
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("success"), "{}", r.body);
}

fn names(v: &Value, list: &str, key: &str) -> Vec<String> {
    v[list].as_array().unwrap().iter().map(|m| m[key].as_str().unwrap().to_string()).collect()
}

/// Files under `home/adapters` and `home/blobs`.
fn stored(home: &Path) -> usize {
    ["adapters", "blobs"].iter().map(|d| std::fs::read_dir(home.join(d)).map_or(0, |r| r.count())).sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_created_model_applies_its_adapter_like_lora() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let s = server(&home, true).await;
    adapters(&home, dir.path());
    let addr = s.addr;

    let before = send(addr, "HEAD", &format!("/api/blobs/sha256:{}", "0".repeat(64)), b"", "").await;
    assert_eq!(before.status, 404);
    let adapters = upload(addr, &peft_files(dir.path())).await;
    create_ok(&post(addr, "/api/create", &json!({"model": "tuned", "from": "smollm2", "adapters": adapters})).await);
    // The reference: the same adapter through the `--lora` path.
    let r = post(
        addr,
        "/v1/load_lora_adapter",
        &json!({"lora_name": "ref", "lora_path": dir.path().join("peft"), "base_model": "smollm2"}),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.body);

    let (base, tuned, reference) =
        (completion(addr, "smollm2").await, completion(addr, "tuned").await, completion(addr, "ref").await);
    assert_eq!(tuned, reference, "the created model is the base plus its adapter");
    assert_ne!(tuned, base, "the adapter changes nothing: the test shows nothing");
    assert_eq!(ollama_chat(addr, "tuned:latest").await, ollama_chat(addr, "ref").await);
    for (path, body, field) in [
        (
            "/api/generate",
            json!({"prompt": "hello there", "stream": false, "options": {"temperature": 0, "num_predict": 8}}),
            "/response",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "hello"}], "temperature": 0, "max_tokens": 8}),
            "/choices/0/message/content",
        ),
    ] {
        let ask = |m: &str| {
            let mut b = body.clone();
            b["model"] = json!(m);
            async move { post(addr, path, &b).await.json().pointer(field).and_then(Value::as_str).unwrap().to_string() }
        };
        assert_eq!(ask("tuned").await, ask("ref").await, "{path}");
    }
    let lora_field = post(
        addr,
        "/v1/completions",
        &json!({"model": "tuned", "prompt": "hi", "max_tokens": 1, "lora": [{"name": "ref", "scale": 1}]}),
    )
    .await;
    assert_eq!(lora_field.status, 400, "{}", lora_field.body);

    assert!(names(&get(addr, "/api/tags").await.json(), "models", "name").contains(&"tuned".to_string()));
    assert!(names(&get(addr, "/v1/models").await.json(), "data", "id").contains(&"tuned".to_string()));
    let show = post(addr, "/api/show", &json!({"model": "tuned"})).await.json();
    let modelfile = show["modelfile"].as_str().unwrap();
    let adapter_dir = Cache::new(&home)
        .adapter_path(&kiln_hub::AliasAdapter { files: serde_json::from_value(adapters.clone()).unwrap() });
    assert!(modelfile.starts_with(&format!("FROM smollm2\nADAPTER {}\n", adapter_dir.display())), "{modelfile}");
    assert_eq!(show["details"]["parent_model"], "smollm2");

    // A copy shares the adapter; deleting the original keeps it working.
    assert_eq!(post(addr, "/api/copy", &json!({"source": "tuned", "destination": "tuned2"})).await.status, 200);
    assert_eq!(send(addr, "DELETE", "/api/delete", br#"{"model": "tuned"}"#, "").await.status, 200);
    assert_eq!(completion(addr, "tuned2").await, tuned);

    // The Modelfile form, a GGUF LoRA by path (allowed: --allow-lora-loading).
    let gguf = dir.path().join("lora.gguf");
    let mf = format!("FROM smollm2\nPARAMETER temperature 0\nADAPTER {}\n", gguf.display());
    create_ok(&post(addr, "/api/create", &json!({"model": "g", "modelfile": mf, "stream": false})).await);
    let r =
        post(addr, "/v1/load_lora_adapter", &json!({"lora_name": "gref", "lora_path": gguf, "base_model": "smollm2"}))
            .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let g = completion(addr, "g").await;
    assert_eq!(g, completion(addr, "gref").await);
    assert_ne!(g, tuned);

    // A server started anew over the same cache reads them again.
    let again = server(&home, false).await;
    assert_eq!(completion(again.addr, "tuned2").await, tuned);
    assert_eq!(completion(again.addr, "g").await, g);

    // The last copy takes the files with it.
    for m in ["tuned2", "g"] {
        let body = json!({"model": m}).to_string();
        assert_eq!(send(addr, "DELETE", "/api/delete", body.as_bytes(), "").await.status, 200);
    }
    assert_eq!(stored(&home), 0, "adapters and blobs are gone with the last model using them");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_adapters_are_a_400_that_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let s = server(&home, false).await;
    adapters(&home, dir.path());
    let addr = s.addr;
    let create = |body: Value| async move { post(addr, "/api/create", &body).await };
    let expect = |r: Resp, status: u16, says: &str| {
        assert_eq!(r.status, status, "{}", r.body);
        assert!(r.body.contains(says), "{says:?} not in {}", r.body);
    };

    // A blob whose content is not its digest is not kept.
    let r = send(addr, "POST", &format!("/api/blobs/sha256:{}", "0".repeat(64)), b"data", "").await;
    expect(r, 400, "SHA-256");
    expect(send(addr, "POST", "/api/blobs/sha256:..%2F..%2Fx", b"data", "").await, 400, "digest");
    // Not uploaded.
    let missing = json!({"adapter_config.json": format!("sha256:{}", "1".repeat(64))});
    expect(create(json!({"model": "x", "from": "smollm2", "adapters": missing})).await, 400, "upload it first");
    expect(create(json!({"model": "x", "from": "smollm2", "adapters": {"../a": "sha256:0"}})).await, 400, "adapters");
    // Shapes of another model; another architecture.
    let wide =
        upload(addr, &[dir.path().join("wide/adapter_config.json"), dir.path().join("wide/adapter_model.safetensors")])
            .await;
    expect(
        create(json!({"model": "x", "from": "smollm2", "adapters": wide})).await,
        400,
        "cannot apply to model 'smollm2'",
    );
    let gemma = upload(addr, &[dir.path().join("gemma.gguf")]).await;
    expect(
        create(json!({"model": "x", "from": "smollm2", "adapters": gemma})).await,
        400,
        "is for Gemma3, the model is Llama",
    );
    // Two adapters.
    let mut two = upload(addr, &[dir.path().join("lora.gguf")]).await;
    two["b.gguf"] = two["lora.gguf"].clone();
    expect(create(json!({"model": "x", "from": "smollm2", "adapters": two})).await, 400, "one LoRA adapter per model");
    let mf = "FROM smollm2\nADAPTER /a.gguf\nADAPTER /b.gguf";
    expect(create(json!({"model": "x", "modelfile": mf})).await, 400, "a second ADAPTER");
    // Paths on the server: off without --allow-lora-loading.
    let mf = format!("FROM smollm2\nADAPTER {}", dir.path().join("lora.gguf").display());
    expect(create(json!({"model": "x", "modelfile": mf})).await, 403, "--allow-lora-loading");
    // A model without LoRA support: an embedding model.
    let minilm = Cache::new(&home).model_path(&ModelRef::parse_name("all-minilm").unwrap());
    kiln_models::testing::encoder::TinyEncoder::default().write_servable(&minilm).unwrap();
    std::fs::write(minilm.join(".kiln-complete"), "").unwrap();
    let peft = upload(addr, &peft_files(dir.path())).await;
    expect(create(json!({"model": "x", "from": "all-minilm", "adapters": peft})).await, 400, "is an embedding model");
    assert!(names(&get(addr, "/api/tags").await.json(), "models", "name").iter().all(|n| n != "x"));
    assert!(std::fs::read_dir(home.join("adapters")).map_or(0, |r| r.count()) == 0, "no adapter left behind");

    let open = server(&home, true).await;
    let create = |body: Value| async move { post(open.addr, "/api/create", &body).await };
    expect(create(json!({"model": "x", "modelfile": "FROM smollm2\nADAPTER lora.gguf"})).await, 400, "absolute path");
    let mf = format!("FROM smollm2\nADAPTER {}", dir.path().join("nope").display());
    expect(create(json!({"model": "x", "modelfile": mf})).await, 400, "no such file");
    let mf = format!("FROM smollm2\nADAPTER {}", dir.path().join("wide").display());
    expect(create(json!({"model": "x", "modelfile": mf})).await, 400, "cannot apply");
    assert!(std::fs::read_dir(home.join("adapters")).map_or(0, |r| r.count()) == 0, "no adapter left behind");
    assert!(Cache::new(&home).alias("x").unwrap().is_none());
}
