//! Property tests: random arrivals (with shared prefixes), cancellations and
//! generation lengths over a small pool, so preemption happens often. After
//! every step the invariants hold (refcounts exact, no block owned twice,
//! waiting sequences hold nothing); every request finishes; when all are
//! gone no block is in use.
//!
//! The driver also simulates the KV memory (and the tier's store): each
//! computed position writes a fingerprint of its whole prefix into its slot,
//! and the tier copies are performed as the plan orders them. Before every
//! chunk, each position the sequence counts as computed (prefix hits and
//! restored blocks included) must hold exactly its fingerprint, so a wrong
//! hit, a stale block or a copy in the wrong order fails the test.

use super::*;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// A request: shared stem `stem` cut to `len`, private tail, `gen` tokens to generate.
    Arrive { stem: u8, len: usize, tail: usize, gen: usize, extra: u64 },
    /// Cancel the `which`-th live request.
    Cancel { which: usize },
    /// Run `n` engine steps.
    Steps { n: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..3, 0usize..24, 1usize..8, 1usize..20, 0u64..2)
            .prop_map(|(stem, len, tail, gen, extra)| Op::Arrive { stem, len, tail, gen, extra }),
        1 => (0usize..8).prop_map(|which| Op::Cancel { which }),
        3 => (1usize..6).prop_map(|n| Op::Steps { n }),
    ]
}

struct Driver {
    s: Scheduler,
    /// Simulated KV: one fingerprint per pool slot, and per tier slot.
    mem: Vec<u64>,
    tier_mem: Vec<u64>,
    bs: usize,
    extra: std::collections::HashMap<SeqId, u64>,
    /// Live requests: id, tokens still to generate.
    live: Vec<(SeqId, usize)>,
    next: SeqId,
    finished: usize,
    cancelled: usize,
}

/// Fingerprint of the KV at position `i` of `tokens`: depends on every token
/// up to it and the cache namespace, as real KV does.
fn fingerprint(tokens: &[TokenId], i: usize, extra: u64) -> u64 {
    tokens[..=i].iter().fold(extra.wrapping_add(0x51), |f, &t| f.wrapping_mul(1_000_003) ^ u64::from(t)) | 1
}

impl Driver {
    fn new(kv: KvManager, cfg: SchedConfig) -> Self {
        let bs = kv.block_size();
        Self {
            mem: vec![0; kv.num_blocks() * bs],
            tier_mem: vec![0; kv.tier_capacity() * bs],
            bs,
            extra: std::collections::HashMap::new(),
            s: Scheduler::new(cfg, kv),
            live: Vec::new(),
            next: 1,
            finished: 0,
            cancelled: 0,
        }
    }

    /// Performs the plan's copies and the forward pass on the simulated KV,
    /// checking every position a chunk builds on.
    fn simulate(&mut self, plan: &StepPlan) -> Result<(), TestCaseError> {
        let bs = self.bs;
        for t in &plan.transfers {
            let (src, dst) = match *t {
                KvTransfer::Save { block, slot } => (block as usize, slot as usize),
                KvTransfer::Load { slot, block } => (slot as usize, block as usize),
            };
            for i in 0..bs {
                match *t {
                    KvTransfer::Save { .. } => self.tier_mem[dst * bs + i] = self.mem[src * bs + i],
                    KvTransfer::Load { .. } => self.mem[dst * bs + i] = self.tier_mem[src * bs + i],
                }
            }
        }
        for w in &plan.scheduled {
            let tokens = self.s.tokens(w.seq).expect("scheduled sequences are known").to_vec();
            let table = self.s.block_table(w.seq).expect("scheduled sequences hold blocks").to_vec();
            let extra = self.extra.get(&w.seq).copied().unwrap_or(0);
            let slot = |p: usize| table[p / bs] as usize * bs + p % bs;
            for p in 0..w.start {
                prop_assert_eq!(
                    self.mem[slot(p)],
                    fingerprint(&tokens, p, extra),
                    "seq {} position {} is stale",
                    w.seq,
                    p
                );
            }
            for p in w.start..w.start + w.len {
                self.mem[slot(p)] = fingerprint(&tokens, p, extra);
            }
        }
        Ok(())
    }

    fn step(&mut self) -> Result<(), TestCaseError> {
        let plan = self.s.schedule().clone();
        self.simulate(&plan)?;
        let mut seen = std::collections::HashSet::new();
        prop_assert!(plan.num_tokens() <= self.s.config().max_step_tokens);
        // Every request fits the pool alone, so none may fail.
        prop_assert!(plan.failed.is_empty(), "{:?}", plan.failed);
        for w in &plan.scheduled {
            prop_assert!(seen.insert(w.seq), "sequence scheduled twice in one step");
            let table = self.s.block_table(w.seq).expect("scheduled sequences hold blocks");
            prop_assert!(table.len() * 4 >= w.start + w.len, "block table covers the chunk");
            let done = self.s.advance(w.seq, w.len).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(done, w.sample);
            if w.sample {
                let i = self.live.iter().position(|(l, _)| *l == w.seq).expect("live");
                self.live[i].1 -= 1;
                if self.live[i].1 == 0 {
                    self.s.finish(w.seq).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    self.live.remove(i);
                    self.finished += 1;
                } else {
                    self.s.append(w.seq, 1000 + w.start as u32).map_err(|e| TestCaseError::fail(e.to_string()))?;
                }
            }
        }
        self.s.check().map_err(TestCaseError::fail)?;
        Ok(())
    }
}

fn run_traffic(ops: Vec<Op>, kv: KvManager) -> Result<(), TestCaseError> {
    let cfg = SchedConfig { max_step_tokens: 10, max_running: 4, prefix_caching: true };
    let mut d = Driver::new(kv, cfg);
    let mut arrived = 0;
    for op in ops {
        match op {
            Op::Arrive { stem, len, tail, gen, extra } => {
                let mut t: Vec<TokenId> = (0..len as u32).map(|i| u32::from(stem) * 100 + i).collect();
                t.extend((0..tail as u32).map(|i| 10_000 + d.next as u32 * 50 + i));
                // Prompt + generation must fit the pool alone.
                let gen = gen.min(48 - t.len());
                if gen == 0 {
                    continue;
                }
                d.s.add(d.next, t, extra).map_err(|e| TestCaseError::fail(e.to_string()))?;
                d.extra.insert(d.next, extra);
                d.live.push((d.next, gen));
                d.next += 1;
                arrived += 1;
            }
            Op::Cancel { which } => {
                if !d.live.is_empty() {
                    let (id, _) = d.live.remove(which % d.live.len());
                    d.s.finish(id).map_err(|e| TestCaseError::fail(e.to_string()))?;
                    d.cancelled += 1;
                }
            }
            Op::Steps { n } => {
                for _ in 0..n {
                    d.step()?;
                }
            }
        }
    }
    // Drain: every request finishes in bounded steps.
    let mut steps = 0;
    while !d.live.is_empty() {
        d.step()?;
        steps += 1;
        prop_assert!(steps < 10_000, "no progress: {} live", d.live.len());
    }
    prop_assert!(d.s.is_idle());
    prop_assert_eq!(d.finished + d.cancelled, arrived);
    prop_assert_eq!(d.s.kv().num_used_blocks(), 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_traffic_keeps_invariants_and_everything_finishes(ops in prop::collection::vec(op(), 1..60)) {
        // 12 blocks of 4 tokens: a few requests fill it, so preemption is common.
        run_traffic(ops, KvManager::new(12, 4).expect("pool"))?;
    }

    #[test]
    fn random_traffic_with_a_kv_tier_restores_exact_blocks(ops in prop::collection::vec(op(), 1..60), tier in 1usize..10) {
        // Evictions are constant in a 12-block pool; the tier keeps some of
        // them, and restored blocks must hold exactly the evicted KV.
        run_traffic(ops, KvManager::with_tier(12, 4, tier).expect("pool"))?;
    }
}
