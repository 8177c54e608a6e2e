use super::*;

const SEG_KEY: u64 = 77;

fn sched(blocks: usize, step: usize) -> Scheduler {
    Scheduler::new(
        SchedConfig { max_step_tokens: step, max_running: 8, prefix_caching: true },
        KvManager::new(blocks, 4).expect("valid pool"),
    )
}

/// Runs steps until nothing is scheduled; returns every plan.
fn run(s: &mut Scheduler) -> Vec<StepPlan> {
    let mut plans = Vec::new();
    loop {
        let plan = s.schedule().clone();
        s.check().unwrap();
        if plan.scheduled.is_empty() {
            return plans;
        }
        for w in &plan.scheduled {
            s.advance(w.seq, w.len).unwrap();
        }
        plans.push(plan);
    }
}

/// Computes `seg` alone as sequence `id` under the segment key, then frees it.
fn compute_segment(s: &mut Scheduler, id: SeqId, seg: &[TokenId]) {
    s.add(id, seg.to_vec(), SEG_KEY).unwrap();
    run(s);
    s.finish(id).unwrap();
}

fn slot(table: &[BlockId], pos: usize) -> u32 {
    table[pos / 4] * 4 + (pos % 4) as u32
}

#[test]
fn a_cached_segment_is_copied_after_its_recomputed_tokens() {
    let mut s = sched(64, 256);
    let seg: Vec<TokenId> = (100..110).collect(); // 2 full blocks and a tail
    compute_segment(&mut s, 1, &seg);
    let seg_blocks = s.kv().find_segment(&seg, SEG_KEY).expect("cached");
    assert_eq!(seg_blocks.len(), 3);
    // 3 tokens before, the segment at 3..13, 2 after.
    let mut prompt = vec![1, 2, 3];
    prompt.extend_from_slice(&seg);
    prompt.extend_from_slice(&[4, 5]);
    let u = SegmentUse { start: 3, len: 10, recompute: 2, key: SEG_KEY, context: 0 };
    s.add_with_segments(2, prompt.clone(), 0, vec![u]).unwrap();
    let first = s.schedule().clone();
    assert_eq!(first.admitted[0].segments, SegmentCounts { copied: 8, computed: 2 });
    // The prefix and the recomputed tokens, the copies, then the rest: one
    // step, two runs.
    let table = s.block_table(2).unwrap().to_vec();
    let want: Vec<KvCopy> =
        (5..13).map(|p| KvCopy { src: slot(&seg_blocks, p - 3), dst: slot(&table, p), shift: 3 }).collect();
    assert_eq!(first.copies, want);
    assert_eq!(
        first.scheduled,
        vec![
            Scheduled { seq: 2, start: 0, len: 5, sample: false },
            Scheduled { seq: 2, start: 13, len: 2, sample: true }
        ]
    );
    assert_eq!(s.kv().num_pins(), 3, "the segment's blocks stay pinned until copied");
    assert!(!s.advance(2, 5).unwrap());
    assert!(s.advance(2, 2).unwrap());
    // Released on the next step, once the engine has copied.
    s.schedule();
    assert_eq!(s.kv().num_pins(), 0);
    s.check().unwrap();
}

#[test]
fn consecutive_segments_without_recompute_are_copied_in_one_step() {
    let mut s = sched(64, 256);
    let (a, b): (Vec<TokenId>, Vec<TokenId>) = ((100..106).collect(), (200..209).collect());
    compute_segment(&mut s, 1, &a);
    compute_segment(&mut s, 2, &b);
    // b, then a (another order than computed), then a question.
    let mut prompt = vec![7];
    prompt.extend_from_slice(&b);
    prompt.extend_from_slice(&a);
    prompt.extend_from_slice(&[8, 9]);
    let uses = vec![
        SegmentUse { start: 1, len: 9, recompute: 0, key: SEG_KEY, context: 0 },
        SegmentUse { start: 10, len: 6, recompute: 0, key: SEG_KEY, context: 0 },
    ];
    s.add_with_segments(3, prompt, 0, uses).unwrap();
    let plans = run(&mut s);
    assert_eq!(plans.len(), 1);
    assert_eq!(
        plans[0].scheduled,
        vec![
            Scheduled { seq: 3, start: 0, len: 1, sample: false },
            Scheduled { seq: 3, start: 16, len: 2, sample: true }
        ]
    );
    assert_eq!(plans[0].copies.len(), 15);
    assert_eq!(plans[0].copies[0].shift, 1);
    assert_eq!(plans[0].copies[14].shift, 10);
}

#[test]
fn a_missing_segment_is_computed_and_the_last_token_never_copied() {
    let mut s = sched(64, 256);
    let seg: Vec<TokenId> = (100..108).collect();
    let u = SegmentUse { start: 0, len: 8, recompute: 1, key: SEG_KEY, context: 0 };
    s.add_with_segments(1, seg.clone(), 0, vec![u]).unwrap();
    let p = s.schedule().clone();
    assert_eq!(p.admitted[0].segments, SegmentCounts { copied: 0, computed: 8 });
    s.finish(1).unwrap();
    compute_segment(&mut s, 2, &seg);
    // The prompt ends with the segment: its last token is computed.
    s.add_with_segments(3, seg.clone(), 0, vec![u]).unwrap();
    let plans = run(&mut s);
    assert_eq!(plans[0].admitted[0].segments, SegmentCounts { copied: 6, computed: 2 });
    assert_eq!(plans[0].copies.len(), 6);
    assert_eq!(
        plans[0].scheduled,
        vec![
            Scheduled { seq: 3, start: 0, len: 1, sample: false },
            Scheduled { seq: 3, start: 7, len: 1, sample: true }
        ]
    );
}

#[test]
fn segment_layouts_are_prefix_cache_namespaces() {
    let mut s = sched(64, 256);
    let seg: Vec<TokenId> = (100..108).collect();
    compute_segment(&mut s, 1, &seg);
    let mut prompt = seg.clone();
    prompt.extend_from_slice(&[1, 2, 3, 4, 5]);
    let u = SegmentUse { start: 0, len: 8, recompute: 2, key: SEG_KEY, context: 0 };
    s.add_with_segments(2, prompt.clone(), 0, vec![u]).unwrap();
    run(&mut s);
    s.finish(2).unwrap();
    // The same layout finds the sequence's blocks; a plain prompt does not.
    s.add_with_segments(3, prompt.clone(), 0, vec![u]).unwrap();
    s.add(4, prompt.clone(), 0).unwrap();
    let p = s.schedule().clone();
    assert_eq!(p.admitted[0].cached_tokens, 12);
    assert_eq!(p.admitted[1].cached_tokens, 0);
    assert_eq!(p.admitted[0].segments, SegmentCounts::default());
}

#[test]
fn pins_are_released_when_a_sequence_ends_before_its_copies() {
    let mut s = sched(64, 4);
    let seg: Vec<TokenId> = (100..112).collect();
    compute_segment(&mut s, 1, &seg);
    let mut prompt: Vec<TokenId> = (1..9).collect();
    prompt.extend_from_slice(&seg);
    prompt.push(9);
    let u = SegmentUse { start: 8, len: 12, recompute: 0, key: SEG_KEY, context: 0 };
    s.add_with_segments(2, prompt, 0, vec![u]).unwrap();
    s.schedule();
    assert_eq!(s.kv().num_pins(), 3);
    s.finish(2).unwrap();
    assert_eq!(s.kv().num_pins(), 0);
    s.check().unwrap();
}

#[test]
fn bad_segments_are_refused() {
    let mut s = sched(64, 16);
    let u = |start, len| SegmentUse { start, len, recompute: 0, key: 0, context: 0 };
    for bad in [vec![u(0, 0)], vec![u(3, 5)], vec![u(0, 3), u(2, 2)], vec![u(usize::MAX, 2)]] {
        assert_eq!(s.add_with_segments(1, vec![1, 2, 3, 4, 5, 6], 0, bad), Err(SchedError::BadSegments(1)));
    }
    s.check().unwrap();
}

#[test]
fn a_segments_last_block_is_not_evicted_before_ordinary_tails() {
    let mut s = sched(8, 256);
    let seg: Vec<TokenId> = (100..110).collect(); // 2 full blocks and a tail
    s.add_segment(1, seg.clone(), SEG_KEY).unwrap();
    run(&mut s);
    s.finish(1).unwrap();
    // An ordinary sequence leaves a tail, freed after the segment's.
    s.add(2, (1..7).collect(), 0).unwrap();
    run(&mut s);
    s.finish(2).unwrap();
    // 3 free blocks: a 4-block prompt evicts one cached block, the
    // ordinary tail, not the segment's last block.
    s.add(3, (200..216).collect(), 5).unwrap();
    run(&mut s);
    assert!(s.kv().find_segment(&seg, SEG_KEY).is_some());
    s.check().unwrap();
}

#[test]
fn runs_between_copies_share_a_step_within_its_budget() {
    let mut s = sched(64, 6);
    let (a, b): (Vec<TokenId>, Vec<TokenId>) = ((100..108).collect(), (200..208).collect());
    compute_segment(&mut s, 1, &a);
    compute_segment(&mut s, 2, &b);
    // 2 tokens, a (first 2 recomputed), 1 token, b (first 2 recomputed), 3 tokens.
    let mut prompt = vec![1, 2];
    prompt.extend_from_slice(&a);
    prompt.push(3);
    prompt.extend_from_slice(&b);
    prompt.extend_from_slice(&[4, 5, 6]);
    let uses = vec![
        SegmentUse { start: 2, len: 8, recompute: 2, key: SEG_KEY, context: 0 },
        SegmentUse { start: 11, len: 8, recompute: 2, key: SEG_KEY, context: 0 },
    ];
    s.add_with_segments(3, prompt, 0, uses).unwrap();
    let plans = run(&mut s);
    let runs: Vec<Vec<(usize, usize, bool)>> =
        plans.iter().map(|p| p.scheduled.iter().map(|w| (w.start, w.len, w.sample)).collect()).collect();
    // Budget 6: 0..4 and 10..12 (a's copies between), then b's copies
    // wait for the step that computes past them: 12..13, then 19..22.
    assert_eq!(runs, vec![vec![(0, 4, false), (10, 2, false)], vec![(12, 1, false), (19, 3, true)]]);
    assert_eq!(plans.iter().map(|p| p.copies.len()).collect::<Vec<_>>(), vec![6, 6]);
    assert_eq!(s.num_computed(3), Some(22));
    s.check().unwrap();
}
