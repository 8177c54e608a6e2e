use super::*;

pub(super) fn sched(blocks: usize, step: usize, max_running: usize) -> Scheduler {
    Scheduler::new(
        SchedConfig { max_step_tokens: step, max_running, prefix_caching: true },
        KvManager::new(blocks, 4).expect("valid pool"),
    )
}

pub(super) fn toks(n: usize, salt: u32) -> Vec<TokenId> {
    (0..n as u32).map(|i| i * 7 + salt).collect()
}

/// Runs a step as an engine would: advance every scheduled chunk, append a
/// sampled token where the chunk reached the end.
pub(super) fn step(s: &mut Scheduler, next: TokenId) -> StepPlan {
    let plan = s.schedule().clone();
    for w in &plan.scheduled {
        let done = s.advance(w.seq, w.len).unwrap();
        assert_eq!(done, w.sample);
        if w.sample {
            s.append(w.seq, next).unwrap();
        }
    }
    s.check().unwrap();
    plan
}

#[test]
fn decodes_first_then_chunks_prompts_within_the_budget() {
    let mut s = sched(64, 8, 8);
    s.add(1, toks(3, 0), 0).unwrap();
    let p = step(&mut s, 100);
    assert_eq!(p.scheduled, vec![Scheduled { seq: 1, start: 0, len: 3, sample: true }]);
    // A long prompt arrives: seq 1 decodes (1 token), the prompt gets 7.
    s.add(2, toks(20, 1), 0).unwrap();
    let p = step(&mut s, 101);
    assert_eq!(
        p.scheduled,
        vec![
            Scheduled { seq: 1, start: 3, len: 1, sample: true },
            Scheduled { seq: 2, start: 0, len: 7, sample: false }
        ]
    );
    let p = step(&mut s, 102);
    assert_eq!(p.scheduled[1], Scheduled { seq: 2, start: 7, len: 7, sample: false });
    let p = step(&mut s, 103);
    assert_eq!(p.scheduled[1], Scheduled { seq: 2, start: 14, len: 6, sample: true });
    assert_eq!(p.num_tokens(), 7);
}

#[test]
fn fcfs_admission_is_never_overtaken_and_max_running_holds() {
    let mut s = sched(64, 100, 2);
    for id in 1..=4 {
        s.add(id, toks(5, id as u32), 0).unwrap();
    }
    let p = step(&mut s, 9);
    let ids: Vec<_> = p.admitted.iter().map(|a| a.seq).collect();
    assert_eq!(ids, vec![1, 2]);
    assert_eq!(s.num_waiting(), 2);
    s.finish(1).unwrap();
    let p = step(&mut s, 9);
    assert_eq!(p.admitted.iter().map(|a| a.seq).collect::<Vec<_>>(), vec![3]);
}

#[test]
fn prefix_hits_start_at_the_cached_prefix() {
    let mut s = sched(64, 100, 4);
    let stem = toks(13, 5);
    s.add(1, stem.clone(), 0).unwrap();
    step(&mut s, 50);
    s.finish(1).unwrap();
    // Same stem plus a new turn: 3 full blocks (12 tokens) and the 13th
    // token (the tail of the first sequence's last block) come from the cache.
    let mut turn2 = stem.clone();
    turn2.extend([50, 60, 70]);
    s.add(2, turn2, 0).unwrap();
    let p = step(&mut s, 80);
    assert_eq!(
        p.admitted,
        vec![Admitted {
            seq: 2,
            cached_tokens: 13,
            restored_blocks: 0,
            resumed: false,
            segments: SegmentCounts::default()
        }]
    );
    assert_eq!(p.scheduled, vec![Scheduled { seq: 2, start: 13, len: 3, sample: true }]);
    // Another adapter (extra key) does not share the cache.
    s.add(3, stem, 7).unwrap();
    let p = step(&mut s, 81);
    assert_eq!(p.admitted[0].cached_tokens, 0);
}

#[test]
fn out_of_blocks_preempts_the_newest_and_resumes_it_from_the_cache() {
    // 6 blocks of 4 = 24 slots. Two sequences of 8 tokens (2 blocks each),
    // then both decode until the pool runs dry.
    let mut s = sched(6, 100, 4);
    s.add(1, toks(8, 1), 0).unwrap();
    s.add(2, toks(8, 2), 0).unwrap();
    step(&mut s, 7);
    let mut preempted = None;
    for t in 0..12 {
        let p = step(&mut s, 200 + t);
        if let Some(&v) = p.preempted.first() {
            preempted = Some(v);
            // The older sequence kept running in the step that preempted.
            assert!(p.scheduled.iter().any(|w| w.seq == 1));
            assert!(p.admitted.is_empty(), "nothing is admitted in a step that preempts");
            break;
        }
    }
    assert_eq!(preempted, Some(2), "the newest sequence is preempted");
    assert_eq!(s.num_preemptions(), 1);
    assert_eq!(s.num_computed(2), Some(0));
    // Seq 1 finishes: seq 2 resumes, reusing its own cached full blocks.
    s.finish(1).unwrap();
    let p = step(&mut s, 300);
    assert_eq!(p.admitted.len(), 1);
    let a = p.admitted[0];
    assert!(a.resumed && a.seq == 2 && a.cached_tokens >= 8, "{a:?}");
    let w = p.scheduled[0];
    assert!(w.sample && w.start == a.cached_tokens);
    s.finish(2).unwrap();
    assert_eq!(s.kv().num_used_blocks(), 0);
}

#[test]
fn a_sequence_that_cannot_grow_alone_fails_instead_of_looping() {
    let mut s = sched(2, 100, 4);
    s.add(1, toks(8, 0), 0).unwrap(); // exactly 2 blocks
    step(&mut s, 1); // computes 8, appends a 9th token
    let p = s.schedule().clone();
    assert_eq!(p.failed.len(), 1);
    assert_eq!(p.failed[0].0, 1);
    assert!(s.is_idle());
    assert_eq!(s.kv().num_used_blocks(), 0);
}

#[test]
fn bad_input_is_an_error() {
    let mut s = sched(4, 10, 2);
    assert_eq!(s.add(1, vec![], 0), Err(SchedError::Empty(1)));
    assert!(matches!(s.add(1, toks(17, 0), 0), Err(SchedError::TooLong { tokens: 17, capacity: 16, .. })));
    s.add(1, toks(3, 0), 0).unwrap();
    assert_eq!(s.add(1, toks(3, 0), 0), Err(SchedError::Exists(1)));
    assert_eq!(s.finish(9), Err(SchedError::Unknown(9)));
    assert_eq!(s.advance(1, 1), Err(SchedError::Unknown(1)), "not running yet");
    s.finish(1).unwrap();
    assert!(s.is_idle());
}

#[test]
fn cancelling_a_waiting_or_running_sequence_frees_everything() {
    let mut s = sched(16, 4, 1);
    s.add(1, toks(10, 0), 0).unwrap();
    s.add(2, toks(10, 1), 0).unwrap();
    step(&mut s, 5); // seq 1 admitted, first chunk of 4
    assert_eq!(s.num_waiting(), 1);
    s.finish(2).unwrap(); // waiting
    s.finish(1).unwrap(); // mid-prefill
    assert!(s.is_idle());
    assert_eq!(s.kv().num_used_blocks(), 0);
    s.check().unwrap();
}

#[test]
fn prefix_caching_can_be_turned_off() {
    let mut s = Scheduler::new(
        SchedConfig { max_step_tokens: 100, max_running: 4, prefix_caching: false },
        KvManager::new(64, 4).unwrap(),
    );
    s.add(1, toks(13, 5), 0).unwrap();
    step(&mut s, 50);
    s.finish(1).unwrap();
    s.add(2, toks(13, 5), 0).unwrap();
    let p = step(&mut s, 51);
    assert_eq!(p.admitted[0].cached_tokens, 0);
}

#[test]
fn a_prompt_continuing_a_finished_answer_is_reused_to_the_token() {
    // The next-turn warm-up (kiln-engine's next_turn): an answer ends, an
    // ordinary request repeats it with the next turn's opening, and the
    // follow-up after it computes only its own tokens.
    let mut s = sched(64, 100, 4);
    let prompt = toks(10, 3);
    s.add(1, prompt.clone(), 0).unwrap();
    step(&mut s, 40); // computes the prompt, samples 40
    step(&mut s, 41); // computes 40, samples 41 (an end of turn, say)
    s.finish(1).unwrap();
    let mut warm = prompt.clone();
    warm.extend([40, 7, 8, 9]);
    s.add(2, warm, 0).unwrap();
    let p = s.schedule().clone();
    assert_eq!(p.admitted[0].cached_tokens, 11, "the answer's computed tokens, to the token");
    assert_eq!(p.scheduled, vec![Scheduled { seq: 2, start: 11, len: 3, sample: true }]);
    assert!(s.advance(2, 3).unwrap());
    s.check().unwrap();
    s.finish(2).unwrap();
    // The follow-up repeats all 14 tokens and adds its own: only those are computed.
    let mut next = prompt;
    next.extend([40, 7, 8, 9, 60, 61]);
    s.add(3, next, 0).unwrap();
    let p = step(&mut s, 90);
    assert_eq!(p.admitted[0].cached_tokens, 14);
    assert_eq!(p.scheduled[0].len, 2);
}
