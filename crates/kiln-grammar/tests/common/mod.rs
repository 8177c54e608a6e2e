//! Test helpers: locating fetched vocabularies, seeded random walks through a
//! grammar, and a small JSON-schema checker for the features the tests use.
#![allow(dead_code)]

use kiln_gguf::GgufFile;
use kiln_grammar::{Compiled, Matcher};
use kiln_tokenize::Tokenizer;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

/// `$var` if set, else the last stdout line of `scripts/fetch-vocab-vectors.sh args`
/// (as kiln-tokenize's tests do: a missing file fails, never skips).
pub fn fetched_path(var: &str, args: &[&str]) -> PathBuf {
    if let Some(d) = std::env::var_os(var) {
        return PathBuf::from(d);
    }
    static FETCH: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _guard = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/fetch-vocab-vectors.sh");
    let out = Command::new("bash")
        .arg(&script)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "fetch-vocab-vectors.sh {args:?} failed (set {var} to skip it):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    PathBuf::from(stdout.lines().last().unwrap_or_default().trim())
}

/// The tokenizer of llama.cpp's `ggml-vocab-{name}.gguf` reference vocabulary.
pub fn vocab(name: &str) -> Arc<Tokenizer> {
    let path = fetched_path("KILN_VOCAB_DIR", &[]).join(format!("ggml-vocab-{name}.gguf"));
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Arc::new(Tokenizer::from_gguf_metadata(file.metadata()).unwrap_or_else(|e| panic!("{name}: {e}")))
}

/// The tokenizer of the default model (SmolLM2-135M-Instruct GGUF).
pub fn smollm2() -> Arc<Tokenizer> {
    let path = fetched_path("KILN_SMOLLM2_GGUF", &["smollm2"]);
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Arc::new(Tokenizer::from_gguf_metadata(file.metadata()).unwrap_or_else(|e| panic!("smollm2: {e}")))
}

/// splitmix64: a seeded generator, enough for picking tokens.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// What a walk produced.
pub struct Walk {
    /// Every token the sequence holds (sampled and forced), EOS excluded.
    pub tokens: Vec<u32>,
    /// Number of tokens that came from `forced_tokens`.
    pub forced: usize,
    /// Whether the walk ended on EOS (else the matcher stopped by itself).
    pub eos: bool,
}

fn bytes(tok: &Tokenizer, id: u32) -> &[u8] {
    tok.token_to_bytes(id).unwrap_or_default()
}

/// Picks a token from the mask. Uniform picks among 150k tokens rarely close a
/// string, so half the picks (and all picks late in the walk) prefer tokens that
/// carry JSON structure or close something.
fn pick(m: &Matcher, tok: &Tokenizer, rng: &mut Rng, step: usize, budget: usize) -> u32 {
    let allowed: Vec<u32> = (0..tok.vocab_size() as u32).filter(|&t| m.allows(t)).collect();
    assert!(!allowed.is_empty(), "empty mask at step {step}");
    let eos: Vec<u32> = allowed.iter().copied().filter(|&t| tok.is_eos(t)).collect();
    let late = step > budget / 2;
    if !eos.is_empty() && (late || rng.below(3) == 0) {
        return eos[rng.below(eos.len())];
    }
    let wanted: &[u8] = if late { b"\"}]" } else { b"\"\\{}[],:" };
    if late || rng.below(2) == 0 {
        let structural: Vec<u32> = allowed
            .iter()
            .copied()
            .filter(|&t| !tok.is_special(t) && bytes(tok, t).iter().any(|b| wanted.contains(b)))
            .collect();
        if !structural.is_empty() {
            let shortest = structural.iter().map(|&t| bytes(tok, t).len()).min().unwrap_or(1);
            // Late in the walk, close quickly: the shortest such tokens.
            let pool: Vec<u32> = if late {
                structural.into_iter().filter(|&t| bytes(tok, t).len() == shortest).collect()
            } else {
                structural
            };
            return pool[rng.below(pool.len())];
        }
    }
    allowed[rng.below(allowed.len())]
}

/// Walks `compiled` with random allowed tokens until EOS or stop. Each step also
/// checks that a few allowed tokens are accepted by a clone and a few
/// disallowed ones rejected.
pub fn walk(compiled: &Compiled, tok: &Tokenizer, seed: u64, budget: usize) -> Walk {
    let mut rng = Rng::new(seed);
    let mut m = compiled.matcher();
    let mut w = Walk { tokens: Vec::new(), forced: 0, eos: false };
    let forced = m.forced_tokens();
    w.forced += forced.len();
    w.tokens.extend(forced);
    for step in 0..budget * 2 {
        if m.is_stopped() {
            assert!(m.error().is_none(), "matcher failed: {:?}", m.error());
            return w;
        }
        m.compute_mask().unwrap_or_else(|e| panic!("mask at step {step}: {e}; text {:?}", text(tok, &w.tokens)));
        check_mask(&m, tok, &mut rng);
        let t = pick(&m, tok, &mut rng, step, budget);
        m.commit(t).unwrap_or_else(|e| panic!("commit {t} (allowed by the mask): {e}"));
        if tok.is_eos(t) {
            w.eos = true;
            return w;
        }
        w.tokens.push(t);
        let forced = m.forced_tokens();
        w.forced += forced.len();
        w.tokens.extend(forced);
    }
    panic!("walk did not end in {} steps: {:?}", budget * 2, text(tok, &w.tokens));
}

/// The mask is exact: sampled allowed tokens commit, other tokens fail.
fn check_mask(m: &Matcher, tok: &Tokenizer, rng: &mut Rng) {
    let n = tok.vocab_size();
    let allowed: Vec<u32> = (0..n as u32).filter(|&t| m.allows(t)).collect();
    for i in 0..6 {
        let t = if i % 2 == 0 { allowed[rng.below(allowed.len())] } else { rng.below(n) as u32 };
        let mut c = m.clone();
        let ok = c.commit(t).is_ok();
        assert_eq!(ok, m.allows(t), "token {t} {:?}: mask says {}, commit says {ok}", tok.token_text(t), m.allows(t));
    }
}

/// The bytes of `tokens` as text.
pub fn text(tok: &Tokenizer, tokens: &[u32]) -> String {
    let raw: Vec<u8> = tokens.iter().flat_map(|&t| bytes(tok, t).to_vec()).collect();
    String::from_utf8_lossy(&raw).into_owned()
}

/// Checks `v` against the schema features the tests use; `Err` says where.
pub fn check(schema: &Value, v: &Value, path: &str) -> Result<(), String> {
    let fail = |why: &str| Err(format!("{path}: {why} (value {v})"));
    if let Some(options) = schema.get("anyOf").or_else(|| schema.get("oneOf")).and_then(Value::as_array) {
        if !options.iter().any(|s| check(s, v, path).is_ok()) {
            return fail("matches no anyOf branch");
        }
    }
    if let Some(e) = schema.get("enum").and_then(Value::as_array) {
        if !e.contains(v) {
            return fail("not in enum");
        }
    }
    if let Some(c) = schema.get("const") {
        if c != v {
            return fail("not the const");
        }
    }
    if let Some(t) = schema.get("type") {
        let types: Vec<&str> = match t {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => vec![],
        };
        if !types.iter().any(|t| has_type(v, t)) {
            return fail(&format!("not of type {t}"));
        }
    }
    match v {
        Value::Object(map) => check_object(schema, map, path),
        Value::Array(items) => {
            let n = items.len() as u64;
            if schema.get("minItems").and_then(Value::as_u64).is_some_and(|m| n < m) {
                return fail("too few items");
            }
            if schema.get("maxItems").and_then(Value::as_u64).is_some_and(|m| n > m) {
                return fail("too many items");
            }
            if let Some(s) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(s, item, &format!("{path}[{i}]"))?;
                }
            }
            Ok(())
        }
        Value::String(s) => {
            let n = s.chars().count() as u64;
            if schema.get("minLength").and_then(Value::as_u64).is_some_and(|m| n < m) {
                return fail("too short");
            }
            if schema.get("maxLength").and_then(Value::as_u64).is_some_and(|m| n > m) {
                return fail("too long");
            }
            if schema.get("pattern").and_then(Value::as_str) == Some("^[0-9]{5}$")
                && !(s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit()))
            {
                return fail("does not match ^[0-9]{5}$");
            }
            Ok(())
        }
        Value::Number(x) => {
            let x = x.as_f64().unwrap_or(f64::NAN);
            if schema.get("minimum").and_then(Value::as_f64).is_some_and(|m| x < m) {
                return fail("below minimum");
            }
            if schema.get("maximum").and_then(Value::as_f64).is_some_and(|m| x > m) {
                return fail("above maximum");
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

fn has_type(v: &Value, t: &str) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        // Integers beyond 64 bits parse as floats; they have no fraction.
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|x| x.fract() == 0.0),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => false,
    }
}

fn check_object(schema: &Value, map: &serde_json::Map<String, Value>, path: &str) -> Result<(), String> {
    let props = schema.get("properties").and_then(Value::as_object);
    for r in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
        let r = r.as_str().unwrap_or_default();
        if !map.contains_key(r) {
            return Err(format!("{path}: missing required {r:?}"));
        }
    }
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    for (k, v) in map {
        match props.and_then(|p| p.get(k)) {
            Some(s) => check(s, v, &format!("{path}.{k}"))?,
            None if closed => return Err(format!("{path}: unexpected property {k:?}")),
            None => {}
        }
    }
    Ok(())
}
