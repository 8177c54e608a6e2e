//! Context shift in the scheduler: copies into fresh blocks (or a
//! recomputation without free blocks), the cached prefix left intact,
//! nothing shifted entering the prefix cache, old
//! blocks pinned for one step, preemption after a shift.

use super::tests_common::{sched, step, toks};
use super::*;

/// Flat slot of position `pos` in `table` (block size 4).
fn slot(table: &[BlockId], pos: usize) -> u32 {
    table[pos / 4] * 4 + (pos % 4) as u32
}

#[test]
fn a_shift_moves_the_tail_into_fresh_blocks_and_keeps_the_head() {
    let mut s = sched(32, 64, 4);
    s.add(1, toks(14, 0), 0).unwrap();
    step(&mut s, 500);
    assert_eq!(s.num_computed(1), Some(14));
    let before = s.block_table(1).unwrap().to_vec();
    // Keep 6, drop 4 of the 14 computed: 15 known tokens become 11.
    assert_eq!(s.shift(1, 6, 4).unwrap(), 11);
    let after = s.block_table(1).unwrap().to_vec();
    assert_eq!(after[0], before[0], "the head's full block stays");
    assert!(after[1..].iter().all(|b| !before.contains(b)), "the rest is fresh: {before:?} -> {after:?}");
    let mut want = toks(14, 0);
    want.drain(6..10);
    want.push(500);
    assert_eq!(s.tokens(1).unwrap(), want);
    assert_eq!(s.num_computed(1), Some(10));
    // The copies come with the next plan: the head's part of block 1
    // (positions 4, 5) as is, then positions 10..14 moved to 6..10.
    let plan = step(&mut s, 501);
    let mut copies = vec![KvCopy { src: slot(&before, 4), dst: slot(&after, 4), shift: 0 }];
    copies.push(KvCopy { src: slot(&before, 5), dst: slot(&after, 5), shift: 0 });
    copies.extend((6..10).map(|p| KvCopy { src: slot(&before, p + 4), dst: slot(&after, p), shift: -4 }));
    assert_eq!(plan.copies, copies);
    assert_eq!(plan.scheduled, vec![Scheduled { seq: 1, start: 10, len: 1, sample: true }]);
    // Old blocks were pinned through that step, released at the next.
    assert!(s.kv().num_pins() > 0);
    step(&mut s, 502);
    assert_eq!(s.kv().num_pins(), 0);
}

#[test]
fn the_old_prefix_stays_cached_and_the_shifted_blocks_never_enter_it() {
    let mut s = sched(32, 64, 4);
    let prompt = toks(12, 3);
    s.add(1, prompt.clone(), 0).unwrap();
    step(&mut s, 500);
    s.shift(1, 4, 6).unwrap();
    for t in 0..8 {
        step(&mut s, 600 + t);
    }
    s.finish(1).unwrap();
    // The original prompt still hits its (unchanged) cached blocks.
    assert_eq!(s.kv().cached_prefix_len(&prompt, 0), 8);
    // The shifted tokens (head + moved tail + decoded) hit the head only.
    let mut shifted = prompt.clone();
    shifted.drain(4..10);
    shifted.extend([500, 600, 601, 602, 603, 604]);
    assert_eq!(s.kv().cached_prefix_len(&shifted, 0), 4);
    s.check().unwrap();
}

#[test]
fn a_shifted_sequence_is_preempted_and_resumed_from_its_kept_tokens() {
    // Seq 2 (older) grows until the newest, the shifted seq 1, is preempted.
    let mut s = sched(8, 64, 4);
    s.add(2, toks(3, 9), 0).unwrap();
    s.add(1, toks(10, 0), 0).unwrap();
    step(&mut s, 500);
    s.shift(1, 2, 4).unwrap();
    let kept = s.tokens(1).unwrap().to_vec();
    let mut preempted = false;
    for t in 0..80 {
        let p = step(&mut s, 700 + t);
        preempted |= p.preempted.contains(&1);
        if preempted {
            break;
        }
    }
    assert!(preempted, "seq 1 was preempted");
    assert_eq!(s.num_computed(1), Some(0));
    assert_eq!(&s.tokens(1).unwrap()[..kept.len()], &kept[..]);
    s.finish(2).unwrap();
    let p = step(&mut s, 800);
    // Resumed from its kept tokens: its blocks after the shift never
    // entered the prefix cache, and the 2-token head fills no block.
    let a = p.admitted.iter().find(|a| a.seq == 1).unwrap();
    assert!(a.resumed);
    assert_eq!(a.cached_tokens, 0);
    assert!(p.copies.is_empty());
}

#[test]
fn a_bad_shift_changes_nothing() {
    let mut s = sched(5, 64, 4);
    s.add(1, toks(14, 0), 0).unwrap();
    step(&mut s, 500);
    let table = s.block_table(1).unwrap().to_vec();
    assert!(s.shift(1, 10, 5).is_err(), "past the computed tokens");
    assert!(s.shift(1, 4, 0).is_err(), "nothing to drop");
    assert!(s.shift(9, 1, 1).is_err(), "unknown");
    assert_eq!(s.block_table(1).unwrap(), table);
    assert_eq!(s.tokens(1).unwrap().len(), 15);
    s.check().unwrap();
}

#[test]
fn without_free_blocks_a_shift_recomputes_the_kept_tokens() {
    let mut s = sched(5, 64, 4);
    s.add(1, toks(14, 0), 0).unwrap();
    step(&mut s, 500);
    // 4 blocks used, 1 free: moving the 12 - 4 - 2 tokens after block 0
    // needs 2 fresh blocks. The sequence is requeued with its kept tokens.
    assert_eq!(s.shift(1, 4, 2).unwrap(), 13);
    assert_eq!(s.num_computed(1), Some(0));
    assert_eq!(s.num_waiting(), 1);
    s.check().unwrap();
    let p = step(&mut s, 501);
    let a = p.admitted[0];
    assert!(a.resumed);
    assert_eq!(a.cached_tokens, 4, "the head's block comes from the prefix cache");
    assert_eq!(p.scheduled, vec![Scheduled { seq: 1, start: 4, len: 9, sample: true }]);
    assert!(p.copies.is_empty());
}

#[test]
fn blocks_holding_only_dropped_tokens_are_released_first() {
    // 40 tokens in 10 of 12 blocks: 2 free, the move needs 5 fresh blocks,
    // and blocks 1..5 (positions 4..20) hold only dropped tokens.
    let mut s = sched(12, 64, 4);
    s.add(1, toks(40, 0), 0).unwrap();
    step(&mut s, 500);
    assert_eq!(s.kv().num_free_blocks(), 2);
    assert_eq!(s.shift(1, 4, 18).unwrap(), 23);
    let plan = step(&mut s, 501);
    assert_eq!(plan.copies.len(), 22 - 4);
    assert!(plan.copies.iter().all(|c| c.shift == -18));
    step(&mut s, 502);
    assert_eq!(s.kv().num_pins(), 0);
    s.check().unwrap();
}
