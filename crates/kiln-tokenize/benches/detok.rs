//! Per-token costs of streaming text out (the incremental detokenizer) and of
//! getting a prompt in (encoding), on the default model's tokenizer
//! (SmolLM2: byte-level BPE, 49152 tokens; fetched like the tests do, or
//! `KILN_SMOLLM2_GGUF=path`).
//!
//! `cargo bench -p kiln-tokenize --bench detok`

#[path = "../tests/common/mod.rs"]
mod common;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kiln_gguf::GgufFile;
use kiln_tokenize::{IncrementalDetokenizer, Tokenizer};
use std::hint::black_box;

/// English prose, code, numbers, CJK and emoji (split across byte tokens).
const TEXT: &str = "The quick brown fox jumps over the lazy dog. In 1969, 600 million people watched the \
Moon landing; 3.14159 is not a rational number. fn main() {\n    let v: Vec<u32> = (0..10).collect();\n    \
println!(\"{v:?}\");\n}\n我想在苹果公司工作。Кириллица тоже здесь. 🦙🚀😶‍🌫️ emoji sequences end here.\n";

fn bench_detok(c: &mut Criterion) {
    let path = common::fetched_path("KILN_SMOLLM2_GGUF", &["smollm2"]);
    let file = GgufFile::open(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let tok = Tokenizer::from_gguf_metadata(file.metadata()).expect("tokenizer");
    let text = TEXT.repeat(8);
    let ids = tok.encode(&text, false).expect("encode");

    let mut group = c.benchmark_group("tokenizer");
    group.throughput(Throughput::Elements(ids.len() as u64));
    group.bench_function(format!("detok_push/{}_tokens", ids.len()), |b| {
        b.iter(|| {
            let mut d = IncrementalDetokenizer::continuing(&tok, false);
            let mut bytes = 0;
            for &id in &ids {
                bytes += d.push(black_box(id)).len();
            }
            bytes + d.flush().len()
        })
    });
    group.bench_function(format!("encode/{}_tokens", ids.len()), |b| b.iter(|| tok.encode(black_box(&text), false)));
    group.finish();
}

criterion_group!(benches, bench_detok);
criterion_main!(benches);
