//! Property tests: random interleavings of allocate / append / commit / free
//! over prompts with shared prefixes, checked against a simulated KV memory.

use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

const BLOCK: usize = 4;
const NUM_BLOCKS: usize = 24;

#[derive(Debug, Clone)]
enum Op {
    /// New sequence: a shared stem `stem` cut to `len`, then a private tail.
    Allocate {
        stem: u8,
        len: usize,
        tail: usize,
        extra: u64,
    },
    /// Decode `n` tokens on the `which`-th live sequence.
    Decode {
        which: usize,
        n: usize,
    },
    Free {
        which: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..3, 0usize..20, 0usize..6, 0u64..2)
            .prop_map(|(stem, len, tail, extra)| { Op::Allocate { stem, len, tail, extra } }),
        (0usize..8, 1usize..6).prop_map(|(which, n)| Op::Decode { which, n }),
        (0usize..8).prop_map(|which| Op::Free { which }),
    ]
}

/// Simulated KV memory: what each slot of each block holds (token, extra
/// key), as written by the sequence that computed it.
struct Sim {
    kv: KvManager,
    memory: Vec<Option<(u32, u64)>>,
    live: Vec<(SeqId, Vec<u32>, u64)>,
    next_seq: SeqId,
}

impl Sim {
    fn write(&mut self, seq: SeqId, tokens: &[u32], from: usize, extra: u64) {
        let table = self.kv.block_table(seq).expect("live seq").to_vec();
        for (pos, &t) in tokens.iter().enumerate().skip(from) {
            self.memory[table[pos / BLOCK] as usize * BLOCK + pos % BLOCK] = Some((t, extra));
        }
    }

    fn allocate(&mut self, tokens: Vec<u32>, extra: u64) -> Result<(), TestCaseError> {
        let seq = self.next_seq;
        self.next_seq += 1;
        let free_before = self.kv.num_free_blocks();
        match self.kv.allocate_prompt(seq, &tokens, extra) {
            Ok(a) => {
                prop_assert!(a.num_cached_tokens <= tokens.len().saturating_sub(1));
                prop_assert_eq!((a.num_cached_tokens - a.num_tail_tokens) % BLOCK, 0);
                prop_assert!(a.num_tail_tokens < BLOCK);
                // Reused slots must hold exactly this request's tokens.
                let table = self.kv.block_table(seq).expect("live").to_vec();
                for (pos, &t) in tokens.iter().enumerate().take(a.num_cached_tokens) {
                    prop_assert_eq!(self.memory[table[pos / BLOCK] as usize * BLOCK + pos % BLOCK], Some((t, extra)));
                }
                self.write(seq, &tokens, a.num_cached_tokens, extra); // the prefill
                self.kv.commit_tokens(seq, &tokens).expect("commit");
                self.live.push((seq, tokens, extra));
            }
            Err(KvError::OutOfBlocks { needed, available }) => {
                prop_assert!(needed > available);
                prop_assert_eq!(self.kv.num_free_blocks(), free_before);
                prop_assert!(!self.kv.contains(seq));
            }
            Err(e) => return Err(TestCaseError::fail(format!("unexpected {e}"))),
        }
        Ok(())
    }

    fn decode(&mut self, which: usize, n: usize) -> Result<(), TestCaseError> {
        let Some(i) = (!self.live.is_empty()).then(|| which % self.live.len()) else {
            return Ok(());
        };
        let (seq, mut tokens, extra) = self.live[i].clone();
        let fits = self.kv.can_append(seq, n);
        match self.kv.append_slots(seq, n) {
            Ok(()) => {
                prop_assert!(fits);
                let from = tokens.len();
                tokens.extend((0..n as u32).map(|k| 500 + (from as u32 + k) % 3));
                self.write(seq, &tokens, from, extra);
                self.kv.commit_tokens(seq, &tokens).expect("commit");
                self.live[i].1 = tokens;
            }
            Err(KvError::OutOfBlocks { .. }) => prop_assert!(!fits),
            Err(e) => return Err(TestCaseError::fail(format!("unexpected {e}"))),
        }
        Ok(())
    }
}

fn stems() -> [Vec<u32>; 3] {
    [(0..20).collect(), (0..20).map(|i| i % 5).collect(), (0..8).chain(100..112).collect()]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_workloads_keep_every_invariant(ops in proptest::collection::vec(op(), 1..60)) {
        let mut sim = Sim { kv: KvManager::new(NUM_BLOCKS, BLOCK).expect("pool"), memory: vec![None; NUM_BLOCKS * BLOCK], live: Vec::new(), next_seq: 0 };
        let stems = stems();
        for op in ops {
            match op {
                Op::Allocate { stem, len, tail, extra } => {
                    let mut t: Vec<u32> = stems[stem as usize][..len].to_vec();
                    t.extend((0..tail as u32).map(|k| 900 + k));
                    sim.allocate(t, extra)?;
                }
                Op::Decode { which, n } => sim.decode(which, n)?,
                Op::Free { which } => {
                    if !sim.live.is_empty() {
                        let (seq, _, _) = sim.live.remove(which % sim.live.len());
                        sim.kv.free(seq).expect("free");
                    }
                }
            }
            sim.kv.check().map_err(TestCaseError::fail)?;
            let used: HashMap<u32, ()> = sim.live.iter().flat_map(|(s, _, _)| sim.kv.block_table(*s).expect("live").iter().map(|&b| (b, ()))).collect();
            prop_assert_eq!(used.len(), sim.kv.num_used_blocks());
        }
        for (seq, _, _) in std::mem::take(&mut sim.live) {
            sim.kv.free(seq).expect("free");
        }
        sim.kv.check().map_err(TestCaseError::fail)?;
        prop_assert_eq!(sim.kv.num_used_blocks(), 0);
        prop_assert_eq!(sim.kv.num_free_blocks(), NUM_BLOCKS);
    }
}

/// Window of the windowed runs, in tokens (not a multiple of the block).
const WINDOW: usize = 6;
const WINDOW_BLOCKS: usize = 14;

/// [`Sim`] with a window pool: also what each window-pool slot holds, and
/// checks that every key a query's window reads is the sequence's own.
struct WinSim {
    sim: Sim,
    memory: Vec<Option<(u32, u64)>>,
}

impl WinSim {
    /// Computes `tokens[from..]` of `seq`: every query's window must read
    /// the right keys (cached ones, or those written before it), then the
    /// step's keys are written and committed.
    fn compute(&mut self, seq: SeqId, tokens: &[u32], from: usize, extra: u64) -> Result<(), TestCaseError> {
        let mut table = Vec::new();
        self.sim.kv.window_table(seq, &mut table).expect("live");
        prop_assert!(table.len() * BLOCK >= tokens.len());
        for pos in from..tokens.len() {
            self.memory[table[pos / BLOCK] as usize * BLOCK + pos % BLOCK] = Some((tokens[pos], extra));
        }
        for q in from..tokens.len() {
            for k in (q + 1).saturating_sub(WINDOW)..=q {
                let got = self.memory[table[k / BLOCK] as usize * BLOCK + k % BLOCK];
                prop_assert_eq!(got, Some((tokens[k], extra)), "query {} key {}", q, k);
            }
        }
        self.sim.write(seq, tokens, from, extra);
        self.sim.kv.commit_tokens(seq, tokens).expect("commit");
        Ok(())
    }

    fn allocate(&mut self, tokens: Vec<u32>, extra: u64) -> Result<(), TestCaseError> {
        let seq = self.sim.next_seq;
        self.sim.next_seq += 1;
        let (free, wfree) = (self.sim.kv.num_free_blocks(), self.sim.kv.window_num_free());
        let r = self.sim.kv.allocate_prompt(seq, &tokens, extra).and_then(|a| {
            self.sim.kv.window_reserve(seq, tokens.len()).map(|()| a).inspect_err(|_| {
                self.sim.kv.free(seq).expect("free");
            })
        });
        match r {
            Ok(a) => {
                prop_assert_eq!(a.num_tail_tokens, 0);
                prop_assert_eq!(self.sim.kv.cached_prefix_len(&tokens, extra) >= a.num_cached_tokens, true);
                let table = self.sim.kv.block_table(seq).expect("live").to_vec();
                for (pos, &t) in tokens.iter().enumerate().take(a.num_cached_tokens) {
                    prop_assert_eq!(
                        self.sim.memory[table[pos / BLOCK] as usize * BLOCK + pos % BLOCK],
                        Some((t, extra))
                    );
                }
                self.compute(seq, &tokens, a.num_cached_tokens, extra)?;
                self.sim.live.push((seq, tokens, extra));
            }
            Err(KvError::OutOfBlocks { .. }) => {
                prop_assert!(!self.sim.kv.contains(seq));
                prop_assert!(self.sim.kv.num_free_blocks() <= free || self.sim.kv.window_num_free() <= wfree);
            }
            Err(e) => return Err(TestCaseError::fail(format!("unexpected {e}"))),
        }
        Ok(())
    }

    fn decode(&mut self, which: usize, n: usize) -> Result<(), TestCaseError> {
        let Some(i) = (!self.sim.live.is_empty()).then(|| which % self.sim.live.len()) else {
            return Ok(());
        };
        let (seq, mut tokens, extra) = self.sim.live[i].clone();
        let from = tokens.len();
        let r = self.sim.kv.append_slots(seq, n).and_then(|()| self.sim.kv.window_reserve(seq, from + n));
        match r {
            Ok(()) => {
                tokens.extend((0..n as u32).map(|k| 500 + (from as u32 + k) % 3));
                self.compute(seq, &tokens, from, extra)?;
                self.sim.live[i].1 = tokens;
            }
            Err(KvError::OutOfBlocks { .. }) => {}
            Err(e) => return Err(TestCaseError::fail(format!("unexpected {e}"))),
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// With a window pool: every query's window reads its own keys (a
    /// window block is never released or reused while a later query can
    /// see it, and a prefix hit brings its window), and the invariants hold.
    #[test]
    fn windowed_workloads_read_their_own_window(ops in proptest::collection::vec(op(), 1..60)) {
        let kv = KvManager::new(NUM_BLOCKS, BLOCK).expect("pool").with_window(WINDOW, WINDOW_BLOCKS).expect("window");
        let sim = Sim { kv, memory: vec![None; NUM_BLOCKS * BLOCK], live: Vec::new(), next_seq: 0 };
        let mut w = WinSim { sim, memory: vec![None; WINDOW_BLOCKS * BLOCK] };
        let stems = stems();
        for op in ops {
            match op {
                Op::Allocate { stem, len, tail, extra } => {
                    let mut t: Vec<u32> = stems[stem as usize][..len].to_vec();
                    t.extend((0..tail as u32).map(|k| 900 + k));
                    if !t.is_empty() {
                        w.allocate(t, extra)?;
                    }
                }
                Op::Decode { which, n } => w.decode(which, n)?,
                Op::Free { which } => {
                    if !w.sim.live.is_empty() {
                        let (seq, _, _) = w.sim.live.remove(which % w.sim.live.len());
                        w.sim.kv.free(seq).expect("free");
                    }
                }
            }
            w.sim.kv.check().map_err(TestCaseError::fail)?;
            // A sequence holds window blocks for about its window only.
            for (seq, tokens, _) in &w.sim.live {
                let mut table = Vec::new();
                w.sim.kv.window_table(*seq, &mut table).expect("live");
                let lo = (tokens.len() + 1).saturating_sub(WINDOW) / BLOCK;
                prop_assert!(table[..lo].iter().all(|&b| b == 0));
            }
        }
        for (seq, _, _) in std::mem::take(&mut w.sim.live) {
            w.sim.kv.free(seq).expect("free");
        }
        w.sim.kv.check().map_err(TestCaseError::fail)?;
        prop_assert_eq!(w.sim.kv.window_num_used(), 0);
        prop_assert_eq!(w.sim.kv.window_num_free(), WINDOW_BLOCKS);
    }
}
