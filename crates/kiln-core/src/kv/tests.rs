use super::*;

fn toks(range: std::ops::Range<u32>) -> Vec<u32> {
    range.collect()
}

fn kv(num_blocks: usize, block_size: usize) -> KvManager {
    KvManager::new(num_blocks, block_size).expect("valid pool")
}

#[test]
fn invalid_configs_are_rejected() {
    assert!(matches!(KvManager::new(4, 0), Err(KvError::InvalidConfig { .. })));
    assert!(matches!(KvManager::new(u32::MAX as usize, 16), Err(KvError::InvalidConfig { .. })));
}

#[test]
fn prompt_gets_enough_blocks_and_distinct_ids() {
    let mut m = kv(8, 4);
    let a = m.allocate_prompt(1, &toks(0..10), 0).unwrap();
    assert_eq!(
        a,
        Allocation {
            num_cached_tokens: 0,
            num_cached_blocks: 0,
            num_new_blocks: 3,
            num_restored_blocks: 0,
            num_tail_tokens: 0
        }
    );
    assert_eq!(m.block_table(1).unwrap(), &[0, 1, 2]);
    assert_eq!((m.num_used_blocks(), m.num_free_blocks(), m.num_cached_blocks()), (3, 5, 0));
    m.check().unwrap();
}

#[test]
fn append_slots_grows_only_at_block_boundaries() {
    let mut m = kv(8, 4);
    m.allocate_prompt(1, &toks(0..3), 0).unwrap();
    m.append_slots(1, 1).unwrap(); // 4 tokens: still one block
    assert_eq!(m.block_table(1).unwrap().len(), 1);
    m.append_slots(1, 1).unwrap();
    assert_eq!(m.block_table(1).unwrap().len(), 2);
    m.append_slots(1, 7).unwrap(); // 12 tokens
    assert_eq!((m.block_table(1).unwrap().len(), m.num_slots(1).unwrap()), (3, 12));
    m.check().unwrap();
}

#[test]
fn errors_change_nothing() {
    let mut m = kv(3, 4);
    m.allocate_prompt(1, &toks(0..8), 0).unwrap();
    assert_eq!(m.allocate_prompt(1, &toks(0..1), 0), Err(KvError::SeqExists(1)));
    assert_eq!(m.allocate_prompt(2, &toks(0..9), 7), Err(KvError::OutOfBlocks { needed: 3, available: 1 }));
    assert_eq!(m.append_slots(1, 5), Err(KvError::OutOfBlocks { needed: 2, available: 1 }));
    assert_eq!(m.append_slots(9, 1), Err(KvError::UnknownSeq(9)));
    assert_eq!(m.commit_tokens(1, &toks(0..9)), Err(KvError::TooManyTokens { seq: 1, tokens: 9, slots: 8 }));
    assert_eq!(m.free(9), Err(KvError::UnknownSeq(9)));
    assert!(m.block_table(9).is_err());
    assert_eq!((m.num_slots(1).unwrap(), m.num_free_blocks(), m.num_seqs()), (8, 1, 1));
    assert!(!m.contains(2));
    m.check().unwrap();
}

#[test]
fn a_prefix_is_reused_only_after_commit() {
    let mut m = kv(16, 4);
    let p = toks(0..10);
    m.allocate_prompt(1, &p, 0).unwrap();
    // Not committed yet: nothing to share.
    assert_eq!(m.allocate_prompt(2, &p, 0).unwrap().num_cached_tokens, 0);
    assert_eq!(m.commit_tokens(1, &p).unwrap(), 2);
    let a = m.allocate_prompt(3, &p, 0).unwrap();
    assert_eq!((a.num_cached_tokens, a.num_cached_blocks, a.num_new_blocks), (8, 2, 1));
    let (t1, t3) = (m.block_table(1).unwrap(), m.block_table(3).unwrap());
    assert_eq!(&t1[..2], &t3[..2]);
    assert_ne!(t1[2], t3[2]);
    // Seq 2 computed the same blocks; committing them adds no duplicate.
    assert_eq!(m.commit_tokens(2, &p).unwrap(), 0);
    assert_eq!(m.num_cached_blocks(), 2);
    m.check().unwrap();
}

#[test]
fn at_least_the_last_prompt_token_is_recomputed() {
    let mut m = kv(16, 4);
    let p = toks(0..8); // exactly two full blocks
    m.allocate_prompt(1, &p, 0).unwrap();
    m.commit_tokens(1, &p).unwrap();
    let a = m.allocate_prompt(2, &p, 0).unwrap();
    assert_eq!(a.num_cached_tokens, 4);
    assert_eq!(m.cached_prefix_len(&p, 0), 4);
    assert_eq!(m.cached_prefix_len(&toks(0..9), 0), 8);
    assert_eq!(m.cached_prefix_len(&[], 0), 0);
}

#[test]
fn extra_key_and_different_tokens_do_not_share() {
    let mut m = kv(16, 4);
    let p = toks(0..9);
    m.allocate_prompt(1, &p, 0).unwrap();
    m.commit_tokens(1, &p).unwrap();
    assert_eq!(m.cached_prefix_len(&p, 1), 0); // another adapter
    let mut q = p.clone();
    q[5] = 99; // second block differs
    assert_eq!(m.cached_prefix_len(&q, 0), 4);
}

#[test]
fn chat_follow_up_reuses_every_computed_token() {
    let bs = 16;
    let mut m = kv(64, bs);
    let prompt = toks(0..40);
    assert_eq!(m.allocate_prompt(1, &prompt, 0).unwrap().num_cached_tokens, 0);
    m.commit_tokens(1, &prompt).unwrap();
    // Decode 12 tokens; each step's KV is committed once computed.
    let mut seq = prompt.clone();
    for t in 1000..1012 {
        m.append_slots(1, 1).unwrap();
        seq.push(t);
        m.commit_tokens(1, &seq).unwrap();
    }
    assert_eq!(m.num_cached_blocks(), 3); // 52 tokens: 3 full blocks
    let table1 = m.block_table(1).unwrap().to_vec();
    m.free(1).unwrap();
    assert_eq!(m.num_used_blocks(), 0);
    // Next turn: the whole conversation so far plus the new message.
    let mut turn2 = seq.clone();
    turn2.extend(2000..2030);
    let a = m.allocate_prompt(2, &turn2, 0).unwrap();
    // 3 full blocks, then the 4 tokens of turn 1's last block (its tail,
    // taken over as turn 2's fourth block).
    assert_eq!((a.num_cached_tokens, a.num_tail_tokens), (52, 4));
    assert_eq!(&m.block_table(2).unwrap()[..4], &table1[..4]);
    assert_eq!(m.num_cached_tokens(2).unwrap(), 52);
    assert_eq!(m.num_tails(), 0, "a tail taken over is no longer a tail");
    m.check().unwrap();
}

#[test]
fn eviction_prefers_free_blocks_then_least_recently_used() {
    let mut m = kv(4, 2);
    for (seq, base) in [(1u64, 100u32), (2, 200)] {
        let p = vec![base, base + 1, base + 2];
        m.allocate_prompt(seq, &p, 0).unwrap();
        m.commit_tokens(seq, &p).unwrap();
    }
    m.free(1).unwrap();
    m.free(2).unwrap();
    // Blocks 0 (seq 1) and 2 (seq 2) are cached; 1 and 3 are kept as tails
    // (tokens 102 and 202).
    assert_eq!((m.num_free_blocks(), m.num_cached_blocks(), m.num_tails()), (4, 2, 2));
    m.allocate_prompt(3, &[7, 8, 9, 10], 0).unwrap(); // evicts the two tails first
    assert_eq!((m.num_cached_blocks(), m.num_tails()), (2, 0));
    m.allocate_prompt(4, &[5, 6], 0).unwrap(); // evicts seq 1's block (older)
    assert_eq!(m.cached_prefix_len(&[100, 101, 102], 0), 0);
    assert_eq!(m.cached_prefix_len(&[200, 201, 202], 0), 2);
    // A hit on an idle cached block does not count it as available.
    assert_eq!(
        m.allocate_prompt(5, &[200, 201, 202, 203, 204], 0),
        Err(KvError::OutOfBlocks { needed: 2, available: 0 })
    );
    m.free(4).unwrap();
    let a = m.allocate_prompt(6, &[200, 201, 202], 0).unwrap();
    assert_eq!(a.num_cached_blocks, 1);
    m.check().unwrap();
}

#[test]
fn freeing_everything_leaves_no_leak() {
    let mut m = kv(10, 3);
    for seq in 0..3u64 {
        let p: Vec<u32> = (0..7).map(|i| i + seq as u32 % 2).collect();
        m.allocate_prompt(seq, &p, 0).unwrap();
        m.commit_tokens(seq, &p).unwrap();
        m.append_slots(seq, 2).unwrap();
    }
    for seq in 0..3u64 {
        m.free(seq).unwrap();
    }
    assert_eq!((m.num_used_blocks(), m.num_free_blocks(), m.num_seqs()), (0, 10, 0));
    assert_eq!(m.usage(), 0.0);
    m.check().unwrap();
}

#[test]
fn evicted_prefix_blocks_come_back_from_the_tier() {
    // 4 blocks of 2 tokens, a tier of 4 blocks.
    let mut m = KvManager::with_tier(4, 2, 4).unwrap();
    let a = toks(0..7); // 3 full blocks + 1 token: 4 blocks
    m.allocate_prompt(1, &a, 7).unwrap();
    m.commit_tokens(1, &a).unwrap();
    let table_a = m.block_table(1).unwrap().to_vec();
    m.free(1).unwrap();
    let mut t = Vec::new();
    m.drain_transfers(&mut t);
    assert!(t.is_empty(), "nothing moves while the pool has room");
    // Another prompt takes the whole pool: a's 3 cached blocks go to the tier.
    let b = toks(100..108);
    m.allocate_prompt(2, &b, 7).unwrap();
    m.drain_transfers(&mut t);
    let saved: Vec<_> = t.iter().filter_map(|x| matches!(x, KvTransfer::Save { .. }).then_some(*x)).collect();
    assert_eq!(saved.len(), 3, "{t:?}");
    for s in &saved {
        let KvTransfer::Save { block, .. } = *s else { unreachable!() };
        assert!(table_a[..3].contains(&block));
    }
    assert_eq!(m.tier_len(), 3);
    assert_eq!(m.cached_prefix_len(&a, 7), 6, "a's prefix is found in the tier");
    assert_eq!(m.cached_prefix_len(&a, 8), 0, "not under another key");
    m.commit_tokens(2, &b).unwrap();
    m.free(2).unwrap();
    // a again: its 3 blocks are loaded back, from the slots they were saved to.
    t.clear();
    let alloc = m.allocate_prompt(3, &a, 7).unwrap();
    assert_eq!((alloc.num_cached_tokens, alloc.num_restored_blocks, alloc.num_new_blocks), (6, 3, 4));
    m.drain_transfers(&mut t);
    let loads: Vec<_> = t.iter().filter(|x| matches!(x, KvTransfer::Load { .. })).collect();
    assert_eq!(loads.len(), 3, "{t:?}");
    let table = m.block_table(3).unwrap().to_vec();
    for (i, l) in loads.iter().enumerate() {
        let KvTransfer::Load { slot, block } = **l else { unreachable!() };
        assert_eq!(block, table[i]);
        assert!(saved.iter().any(|s| matches!(*s, KvTransfer::Save { slot: s2, .. } if s2 == slot)));
    }
    // A slot freed by a load may take a newly evicted block, but only after
    // the load read it.
    for (i, x) in t.iter().enumerate() {
        let KvTransfer::Load { slot, .. } = *x else { continue };
        assert!(!t[..i].iter().any(|y| matches!(*y, KvTransfer::Save { slot: s, .. } if s == slot)), "{t:?}");
    }
    // Restored blocks are in the pool index again: a fourth request hits them there.
    m.free(3).unwrap();
    assert_eq!(m.cached_prefix_len(&a, 7), 6);
    m.check().unwrap();
}

#[test]
fn without_a_tier_nothing_is_saved() {
    let mut m = kv(2, 2);
    m.allocate_prompt(1, &toks(0..4), 0).unwrap();
    m.commit_tokens(1, &toks(0..4)).unwrap();
    m.free(1).unwrap();
    m.allocate_prompt(2, &toks(10..14), 0).unwrap();
    let mut t = Vec::new();
    m.drain_transfers(&mut t);
    assert!(t.is_empty());
    assert_eq!((m.tier_capacity(), m.tier_len()), (0, 0));
    assert_eq!(m.cached_prefix_len(&toks(0..4), 0), 0);
}

#[test]
fn tails_reuse_the_longest_common_run_and_never_the_last_token() {
    let bs = 8;
    let mut m = kv(32, bs);
    let run = |m: &mut KvManager, seq: SeqId, t: &[u32], extra: u64| {
        let a = m.allocate_prompt(seq, t, extra).unwrap();
        m.commit_tokens(seq, t).unwrap();
        m.free(seq).unwrap();
        m.check().unwrap();
        a
    };
    // 8 + 5 tokens: one full block and a tail of 5.
    let first = toks(0..13);
    run(&mut m, 1, &first, 0);
    assert_eq!((m.num_cached_blocks(), m.num_tails()), (1, 1));
    // Diverges after 3 tokens of the tail: reuses 8 + 3.
    let mut fork = toks(0..11);
    fork.extend([99, 98, 97]);
    let a = run(&mut m, 2, &fork, 0);
    assert_eq!((a.num_cached_tokens, a.num_tail_tokens), (11, 3));
    // The fork took the tail over and left its own (8..11 then 99 98 97);
    // the first run's tail is gone with the block it lived in.
    assert_eq!(m.cached_prefix_len(&first, 0), 11);
    // Exactly the cached tokens again: the last one is recomputed.
    let a = run(&mut m, 3, &fork, 0);
    assert_eq!((a.num_cached_tokens, a.num_tail_tokens), (13, 5));
    // Another extra key (adapter) never sees it.
    assert_eq!(m.cached_prefix_len(&fork, 1), 0);
}

#[test]
fn tails_per_prefix_are_bounded_and_deduplicated() {
    let bs = 8;
    let mut m = kv(32, bs);
    let stem = toks(0..8);
    for (seq, k) in (0..6u32).enumerate() {
        let mut t = stem.clone();
        t.extend([100 + k, 1, 2]);
        m.allocate_prompt(seq as SeqId, &t, 0).unwrap();
        m.commit_tokens(seq as SeqId, &t).unwrap();
        m.free(seq as SeqId).unwrap();
        m.check().unwrap();
    }
    // Six different continuations of one block: the newest four are kept.
    assert_eq!(m.num_tails(), 4);
    let probe = |m: &KvManager, k: u32| m.cached_prefix_len(&[stem.clone(), vec![100 + k, 1, 2, 3, 4, 5]].concat(), 0);
    assert_eq!(probe(&m, 0), 8);
    assert_eq!(probe(&m, 5), 11);
    // A longer run of a kept tail replaces it; a shorter one is not kept.
    let longer = [stem.clone(), vec![105, 1, 2, 3, 4]].concat();
    m.allocate_prompt(10, &longer, 0).unwrap();
    m.commit_tokens(10, &longer).unwrap();
    m.free(10).unwrap();
    assert_eq!(m.num_tails(), 4);
    assert_eq!(probe(&m, 5), 13);
    m.check().unwrap();
}

#[test]
fn window_pool_keeps_a_window_per_sequence() {
    // Window 8 in blocks of 4: a 100-token sequence holds 3 window blocks.
    let mut m = kv(64, 4).with_window(8, 8).unwrap();
    let prompt = toks(0..40);
    m.allocate_prompt(1, &prompt, 0).unwrap();
    for end in (8..=40).step_by(8) {
        // A chunked prefill of 8 tokens a step.
        m.window_reserve(1, end).unwrap();
        m.commit_tokens(1, &prompt[..end]).unwrap();
        assert!(m.window_num_used() <= 3, "{} window blocks at {end}", m.window_num_used());
    }
    let mut t = prompt.clone();
    for i in 40..100 {
        t.push(i);
        m.append_slots(1, 1).unwrap();
        m.window_reserve(1, t.len()).unwrap();
        m.commit_tokens(1, &t).unwrap();
        assert!(m.window_num_used() <= 3);
    }
    assert_eq!(m.num_used_blocks(), 25);
    let mut table = Vec::new();
    m.window_table(1, &mut table).unwrap();
    assert_eq!(table.len(), 25);
    assert!(table[..22].iter().all(|&b| b == 0), "{table:?}");
    m.check().unwrap();
    assert!(matches!(m.shift(1, 4, 8, 100, &mut Vec::new()), Err(KvError::Windowed(_))));
    m.free(1).unwrap();
    m.check().unwrap();
}

#[test]
fn window_prefix_hits_need_their_window_cached() {
    let mut m = kv(64, 4).with_window(8, 6).unwrap();
    let turn1 = toks(0..24);
    m.allocate_prompt(1, &turn1, 0).unwrap();
    m.window_reserve(1, 24).unwrap();
    m.commit_tokens(1, &turn1).unwrap();
    m.free(1).unwrap();
    // The next turn continues it: every full block is a hit, its window
    // (blocks 4 and 5, positions 17..24) comes from the window pool.
    let turn2 = toks(0..30);
    assert_eq!(m.cached_prefix_len(&turn2, 0), 24);
    let a = m.allocate_prompt(2, &turn2, 0).unwrap();
    assert_eq!((a.num_cached_tokens, a.num_tail_tokens), (24, 0));
    let mut table = Vec::new();
    m.window_table(2, &mut table).unwrap();
    assert_eq!(table.len(), 6);
    assert_eq!(m.window_num_used(), 2);
    m.free(2).unwrap();
    // Another sequence takes every window block: turn 1's window is
    // evicted, so only a hit whose own window survives remains (none).
    m.allocate_prompt(3, &toks(1000..1024), 0).unwrap();
    m.window_reserve(3, 24).unwrap();
    m.free(3).unwrap();
    assert_eq!(m.cached_prefix_len(&turn2, 0), 0);
    m.check().unwrap();
}
