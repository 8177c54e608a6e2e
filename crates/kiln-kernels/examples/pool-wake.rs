//! How long the pool takes to run a burst of short jobs after it has been
//! idle (workers asleep), against the same burst back to back, for a pool
//! left to the scheduler and a pinned one (`ThreadPool::pinned`), in turns.
//!
//! `cargo run --release -p kiln-kernels --example pool-wake -- [THREADS] [IDLE_MS...]`

use std::hint::black_box;
use std::time::{Duration, Instant};

use kiln_kernels::ThreadPool;

/// 100 jobs of ~70 µs per thread, about what a forward step of 25 tokens
/// issues; returns the burst's time in ms.
fn burst(pool: &ThreadPool) -> f64 {
    let t0 = Instant::now();
    for _ in 0..100 {
        pool.run(&|ith, _| {
            let mut x = ith as f64 + 1.0;
            for _ in 0..20_000 {
                x = black_box(x * 1.000_000_1 + 1e-9);
            }
            black_box(x);
        });
    }
    t0.elapsed().as_secs_f64() * 1e3
}

fn main() {
    let a: Vec<u64> = std::env::args().skip(1).filter_map(|s| s.parse().ok()).collect();
    let threads = a.first().copied().unwrap_or(2) as usize;
    let idles: Vec<u64> = if a.len() > 1 { a[1..].to_vec() } else { vec![0, 20, 300] };
    // Each pool's caller is a thread of its own, pinned or not.
    let measure = |pinned: bool, idle: u64| -> Vec<f64> {
        std::thread::spawn(move || {
            let pool = if pinned { ThreadPool::pinned(threads) } else { ThreadPool::new(threads) };
            if pinned && !(pool.is_pinned() && pool.pin_caller()) {
                eprintln!("(could not pin {threads} threads here)");
            }
            burst(&pool);
            let mut v: Vec<f64> = (0..12)
                .map(|_| {
                    std::thread::sleep(Duration::from_millis(idle));
                    burst(&pool)
                })
                .collect();
            v.sort_by(f64::total_cmp);
            v
        })
        .join()
        .unwrap_or_default()
    };
    let show = |v: &[f64]| v.iter().map(|x| format!("{x:.1}")).collect::<Vec<_>>().join(" ");
    for idle in idles {
        for pinned in [false, true] {
            let v = measure(pinned, idle);
            let median = v.get(v.len() / 2).copied().unwrap_or(0.0);
            let name = if pinned { "pinned" } else { "unpinned" };
            println!("idle {idle:4} ms, {name:8}: burst median {median:.1} ms [{}]", show(&v));
        }
    }
}
