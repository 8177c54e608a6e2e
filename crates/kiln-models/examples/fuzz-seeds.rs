//! Writes seed corpora for the fuzz targets in `fuzz/`: real-format inputs
//! the fuzzer mutates from (tiny GGUF models of each architecture and
//! several tensor types, HF `config.json`s, a safetensors file, chat
//! templates, detokenizer input, request bodies for every route).
//!
//! `fuzz-seeds OUT_DIR [REAL.gguf]` — with a real GGUF, its metadata (the
//! tokenizer and chat template, no tensors) is added to the GGUF corpus and
//! its chat template to the template corpus.

use std::collections::HashMap;
use std::path::Path;

use kiln_gguf::GgmlType;
use kiln_models::testing::{tiny_tokenizer_metadata, tiny_weights, write_gguf, TinySpec};
use kiln_models::Arch;
use safetensors::tensor::TensorView;
use safetensors::Dtype;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn put(dir: &Path, target: &str, name: &str, bytes: &[u8]) -> Res<()> {
    let d = dir.join(target);
    std::fs::create_dir_all(&d)?;
    std::fs::write(d.join(name), bytes)?;
    Ok(())
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().collect();
    let out = Path::new(args.get(1).ok_or("usage: fuzz-seeds OUT_DIR [REAL.gguf]")?);
    let tmp = tempfile::tempdir()?;

    // GGUF: tiny models (with the tiny tokenizer) of each architecture and several types.
    let (vocab, md) = tiny_tokenizer_metadata();
    for (arch, ty) in [
        (Arch::Llama, GgmlType::Q4_1),
        (Arch::Llama, GgmlType::Q8_0),
        (Arch::Qwen2, GgmlType::Q4_0),
        (Arch::Qwen3, GgmlType::F16),
        (Arch::Llama, GgmlType::Q5_0),
    ] {
        let spec =
            TinySpec { arch, vocab, hidden: 32, ff: 64, heads: 2, kv_heads: 1, layers: 1, ..TinySpec::llama(ty) };
        let p = tmp.path().join("m.gguf");
        write_gguf(&spec, &tiny_weights(&spec), &p, &md)?;
        put(out, "gguf", &format!("tiny-{arch:?}-{}.gguf", ty.name()), &std::fs::read(&p)?)?;
    }
    // ChatML, as most instruct models ship it.
    let chatml = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
    let mut templates = vec![chatml.to_string()];
    if let Some(real) = args.get(2) {
        let f = kiln_gguf::GgufFile::open(real)?;
        let mut w = kiln_gguf::GgufWriter::new();
        for (k, v) in f.metadata().iter() {
            w.add_metadata(k, v.clone())?;
        }
        let p = tmp.path().join("meta.gguf");
        w.write_to(&p)?;
        put(out, "gguf", "real-metadata.gguf", &std::fs::read(&p)?)?;
        if let Ok(Some(t)) = f.metadata().opt_str("tokenizer.chat_template") {
            templates.push(t.to_string());
        }
    }
    templates.push("{% for m in messages %}{{ m.role | upper }}: {{ m.content.strip() }}{% endfor %}".into());
    templates.push("{% set x = 'a' * 1000 %}{% for i in range(100) %}{{ x }}{% endfor %}".into());
    for (i, t) in templates.iter().enumerate() {
        put(out, "chat_template", &format!("t{i}"), format!("user|Hello there\n{t}").as_bytes())?;
    }

    // HF config.json.
    for (i, arch) in
        ["LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "MistralForCausalLM"].iter().enumerate()
    {
        let cfg = format!(
            r#"{{"architectures":["{arch}"],"vocab_size":288,"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,
            "num_attention_heads":4,"num_key_value_heads":2,"max_position_embeddings":256,"rms_norm_eps":1e-5,"rope_theta":10000.0,
            "tie_word_embeddings":{},"head_dim":16,"sliding_window":null,"torch_dtype":"bfloat16"}}"#,
            i % 2 == 0
        );
        put(out, "hf_config", &format!("c{i}.json"), cfg.as_bytes())?;
    }

    // safetensors: the tiny llama's tensors in F32 and BF16.
    let spec = TinySpec { hidden: 32, ff: 64, heads: 2, kv_heads: 1, layers: 1, ..TinySpec::llama(GgmlType::F32) };
    let w = tiny_weights(&spec);
    for dtype in [Dtype::F32, Dtype::BF16] {
        let enc: Vec<(String, Vec<usize>, Vec<u8>)> = w
            .iter()
            .map(|(name, (shape, vals))| {
                let bytes = match dtype {
                    Dtype::BF16 => vals.iter().flat_map(|v| half::bf16::from_f32(*v).to_le_bytes()).collect(),
                    _ => vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
                };
                (name.clone(), shape.clone(), bytes)
            })
            .collect();
        let views = enc
            .iter()
            .map(|(n, s, b)| Ok((n.clone(), TensorView::new(dtype, s.clone(), b)?)))
            .collect::<Result<HashMap<_, _>, safetensors::SafeTensorError>>()?;
        put(out, "safetensors", &format!("tiny-{dtype:?}.safetensors"), &safetensors::serialize(views, None)?)?;
    }

    // Detokenizer + stop strings: stop-string length, stop text, then token id pairs.
    put(out, "detok_stop", "plain", b"\x03abc\x00\x41\x00\x42\x01\x10\x00\x43")?;
    put(out, "detok_stop", "nostop", b"\x00\x00\x10\x00\x11\x00\x12\x00\x13")?;

    // Requests: route index byte, then the body.
    let bodies: [(u8, &str); 8] = [
        (
            0,
            r#"{"model":"tiny","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"max_tokens":4,"stream":true,"stream_options":{"include_usage":true}}"#,
        ),
        (
            0,
            r#"{"model":"tiny","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],"temperature":0.7,"top_p":0.9,"seed":3,"stop":["x","y"],"logprobs":true,"top_logprobs":2,"logit_bias":{"5":-100}}"#,
        ),
        (1, r#"{"model":"tiny","prompt":"Once upon","max_tokens":3,"top_k":5,"min_p":0.1,"repetition_penalty":1.1}"#),
        (1, r#"{"model":"tiny","prompt":[1,2,3],"max_tokens":2,"stream":true}"#),
        (
            2,
            r#"{"model":"tiny","messages":[{"role":"user","content":"hi"}],"options":{"num_predict":3,"temperature":0,"num_ctx":64},"keep_alive":"1m"}"#,
        ),
        (3, r#"{"model":"tiny","prompt":"hi","stream":false,"options":{"num_predict":2,"stop":["\n"],"seed":1}}"#),
        (4, r#"{"model":"tiny"}"#),
        (5, ""),
    ];
    for (i, (route, body)) in bodies.iter().enumerate() {
        let mut b = vec![*route];
        b.extend_from_slice(body.as_bytes());
        put(out, "server_requests", &format!("r{i}"), &b)?;
    }
    println!("seeds written to {}", out.display());
    Ok(())
}
