//! The `kiln` binary end to end on a tiny random model with a real tokenizer.

use std::io::Write;
use std::process::{Command, Stdio};

use kiln_gguf::GgmlType;
use kiln_models::testing::write_tiny_chat_model;

fn kiln(home: &std::path::Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.env("KILN_HOME", home).env("KILN_LOG", "error");
    c
}

fn setup() -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.gguf");
    write_tiny_chat_model(&path, GgmlType::Q8_0, 512).unwrap();
    (dir, path.to_string_lossy().into_owned())
}

#[test]
fn run_streams_text_and_prints_stats() {
    let (dir, model) = setup();
    let out = kiln(dir.path())
        .args(["run", &model, "hello there", "-n", "6", "--ignore-eos", "--threads", "2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("prompt:") && stderr.contains("decode 6 tokens"), "{stderr}");
    // Raw mode and a prompt from stdin.
    let mut child = kiln(dir.path())
        .args(["run", &model, "-", "--raw", "-n", "3", "--ignore-eos", "--prefill-chunk", "2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"some text from stdin").unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("prompt: 21 tokens") || stderr.contains("prompt: "), "{stderr}");
}

#[test]
fn bad_input_is_a_clear_error_not_a_panic() {
    let (dir, model) = setup();
    let long = "word ".repeat(600);
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["run", "/nonexistent/model.gguf", "hi"], "error:"),
        (vec!["run", &model, ""], "empty"),
        (vec!["run", &model, "hi", "--top-p", "2"], "top_p"),
        (vec!["run", &model, "hi", "--temperature", "-1"], "temperature"),
        (vec!["run", &model, &long], "context"),
    ];
    for (args, want) in cases {
        let out = kiln(dir.path()).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: expected '{want}' in: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    let bad = dir.path().join("bad.gguf");
    std::fs::write(&bad, b"GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff").unwrap();
    let out = kiln(dir.path()).args(["run", bad.to_str().unwrap(), "hi"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("bad.gguf") && !stderr.contains("panicked"), "{stderr}");
}

#[test]
fn chat_reuses_the_conversation() {
    let (dir, model) = setup();
    let mut child = kiln(dir.path())
        .args(["chat", &model, "-n", "4", "--ignore-eos", "--system", "be brief"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"first question about the weather today\nand a second one\n/reset\nthird\n/exit\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let stats: Vec<&str> = stderr.lines().filter(|l| l.contains("reused")).collect();
    assert_eq!(stats.len(), 3, "{stderr}");
    let reused =
        |l: &str| -> usize { l.split(" tokens, ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap() };
    assert_eq!(reused(stats[0]), 0);
    assert!(reused(stats[1]) >= 16, "second turn reuses the first: {}", stats[1]);
    assert!(stderr.contains("conversation cleared"));
}

#[test]
fn list_works_on_an_empty_cache() {
    let dir = tempfile::tempdir().unwrap();
    let out = kiln(dir.path()).args(["list", "--available"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(stdout.contains("smollm2"), "{stdout}");
}

#[test]
fn embed_prints_vectors_and_rerank_scores() {
    use kiln_models::testing::encoder::TinyEncoder;
    let dir = tempfile::tempdir().unwrap();
    let enc = dir.path().join("enc");
    TinyEncoder::default().write_servable(&enc).unwrap();
    let enc = enc.to_string_lossy().into_owned();
    let out = kiln(dir.path()).args(["embed", &enc, "hello world", "the cat sat", "--threads", "1"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("2 inputs, 9 tokens"), "{stderr}");
    let lines: Vec<Vec<f32>> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!((lines.len(), lines[0].len()), (2, 64));
    // Texts from stdin, cut to 16 dimensions.
    let mut child = kiln(dir.path())
        .args(["embed", &enc, "--dimensions", "16", "-q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"hello world\nred fish\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success() && out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Vec<f32>> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!((lines.len(), lines[0].len()), (2, 16));
    // An embedder is not a reranker; a reranker ranks.
    let out = kiln(dir.path()).args(["embed", &enc, "--rerank", "cat", "the cat"]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a reranker"));
    let rank = dir.path().join("rank");
    TinyEncoder { rank: true, ..Default::default() }.write_servable(&rank).unwrap();
    let rank = rank.to_string_lossy().into_owned();
    let out = kiln(dir.path())
        .args(["embed", &rank, "--rerank", "the cat", "red fish", "the cat sat", "-q"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let scores: Vec<f32> = text.lines().map(|l| l.split('\t').next().unwrap().parse().unwrap()).collect();
    assert_eq!(scores.len(), 2);
    assert!(scores[0] >= scores[1], "{text}");
    // A generation model asked to embed, and an encoder asked to generate.
    let (_d, chat) = setup();
    let out = kiln(dir.path()).args(["embed", &chat, "hi"]).output().unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not an embedding model"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kiln(dir.path()).args(["run", &enc, "hi"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("kiln embed"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn list_shows_aliases_next_to_their_model() {
    let (dir, model) = setup();
    let cache = kiln_hub::Cache::new(dir.path());
    let dest = cache.model_path(&kiln_hub::ModelRef::parse_name("smollm2").unwrap());
    std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
    std::fs::copy(&model, &dest).unwrap();
    let alias = kiln_hub::Alias { from: "smollm2".into(), ..Default::default() };
    cache.set_alias("pirate", alias).unwrap();
    let out = kiln(dir.path()).args(["list"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let pirate = stdout.lines().find(|l| l.starts_with("pirate ")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(pirate.ends_with("alias of smollm2"), "{pirate}");
    // One made with an ADAPTER names where its adapter is kept.
    let lora = dir.path().join("lora.gguf");
    std::fs::write(&lora, "GGUF").unwrap();
    let adapter = cache.import_adapter(&lora).unwrap();
    let path = cache.assemble_adapter(&adapter).unwrap();
    cache
        .set_alias("tuned", kiln_hub::Alias { from: "smollm2".into(), adapter: Some(adapter), ..Default::default() })
        .unwrap();
    let out = kiln(dir.path()).args(["list"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let tuned = stdout.lines().find(|l| l.starts_with("tuned ")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(tuned.ends_with(&format!("alias of smollm2 + LoRA adapter {}", path.display())), "{tuned}");
    assert!(stdout.lines().any(|l| l.starts_with("smollm2 ") && l.contains(&*dest.to_string_lossy())), "{stdout}");
}
