//! KV block manager costs on the engine's hot path: allocating a prompt
//! (cold, and with its whole prefix cached), the prefix lookup alone, one
//! decode step's slot growth + commit, and freeing.
//!
//! `cargo bench -p kiln-core --bench kv`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kiln_core::kv::KvManager;
use std::hint::black_box;

const BLOCK: usize = 16;
const BLOCKS: usize = 8192;

fn prompt(len: usize, salt: u32) -> Vec<u32> {
    (0..len as u32).map(|i| i.wrapping_mul(2_654_435_761).wrapping_add(salt) % 49_152).collect()
}

fn bench_kv(c: &mut Criterion) {
    let mut group = c.benchmark_group("kv");
    for len in [128usize, 1024, 4096] {
        group.throughput(Throughput::Elements(len as u64));
        let toks = prompt(len, 7);

        // Cold: nothing cached, every block freshly allocated, then freed.
        let mut kv = KvManager::new(BLOCKS, BLOCK).expect("config");
        let mut salt = 0u32;
        group.bench_function(BenchmarkId::new("allocate_cold+free", len), |b| {
            b.iter(|| {
                // A distinct first token per iteration so no block is a hit.
                salt = salt.wrapping_add(1);
                let mut t = toks.clone();
                t[0] = salt % 49_152;
                let a = kv.allocate_prompt(1, black_box(&t), 0).expect("fits");
                kv.free(1).expect("allocated");
                a
            })
        });

        // Warm: the whole prompt but its last token comes from the cache.
        let mut kv = KvManager::new(BLOCKS, BLOCK).expect("config");
        kv.allocate_prompt(1, &toks, 0).expect("fits");
        kv.commit_tokens(1, &toks).expect("committed");
        kv.free(1).expect("allocated");
        group.bench_function(BenchmarkId::new("allocate_hit+free", len), |b| {
            b.iter(|| {
                let a = kv.allocate_prompt(2, black_box(&toks), 0).expect("fits");
                kv.free(2).expect("allocated");
                a
            })
        });
        group.bench_function(BenchmarkId::new("prefix_lookup", len), |b| {
            b.iter(|| kv.cached_prefix_len(black_box(&toks), 0))
        });
    }
    group.finish();

    // One decode step of a sequence at context ~1000: grow by one slot,
    // commit (a block fills every 16 steps), as the engine does per token.
    let mut group = c.benchmark_group("kv/decode_step");
    group.throughput(Throughput::Elements(1));
    let mut kv = KvManager::new(BLOCKS, BLOCK).expect("config");
    let mut toks = prompt(1000, 3);
    kv.allocate_prompt(1, &toks, 0).expect("fits");
    kv.commit_tokens(1, &toks).expect("committed");
    group.bench_function("append_commit", |b| {
        b.iter(|| {
            if toks.len() >= 60_000 {
                // Restart the sequence before the pool runs dry.
                kv.free(1).expect("allocated");
                toks.truncate(1000);
                kv.allocate_prompt(1, &toks, 0).expect("fits");
            }
            kv.append_slots(1, 1).expect("room");
            toks.push(toks.len() as u32 % 49_152);
            kv.commit_tokens(1, black_box(&toks)).expect("consistent")
        })
    });
    group.finish();
}

criterion_group!(benches, bench_kv);
criterion_main!(benches);
