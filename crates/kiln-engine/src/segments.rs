//! The segment cache in the engine (docs/segment-cache.md): a prompt's
//! marked segments are tokenized alone; each one not in the cache is
//! computed apart first, as a prefill-only sequence of its own (the
//! request's head up to [`crate::EngineConfig::segment_context`] tokens,
//! then the segment, in the segment namespace of the request's adapter);
//! the request waits ("parked") until they are done, then the scheduler
//! copies their K/V into it with the keys re-rotated
//! (`kiln_core::sched::SegmentUse`), and computes only each segment's first
//! [`crate::EngineConfig::segment_recompute`] tokens and the text around
//! them.

use std::collections::HashMap;
use std::sync::Arc;

use kiln_core::sched::SegmentUse;
use kiln_core::{StreamEvent, TokenId};
use kiln_tokenize::Tokenizer;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};

use crate::engine_loop::EngineLoop;
use crate::error::{EngineError, Result};
use crate::request::{SegmentSpan, SEGMENT_CLOSE, SEGMENT_OPEN};
use crate::sequence::Sequence;

/// Segment jobs' ids: apart from the handle's (from 1) and the next-turn
/// warm-ups' (from 2^63).
const SEGMENT_IDS: u64 = 3 << 62;

/// The segment namespace of a prefix-cache namespace (an adapter's).
pub(crate) fn segment_key(extra_key: u64) -> u64 {
    extra_key ^ 0x5345_4753_4341_4348
}

/// Token ids of a rendered text whose [`crate::segment_marker`]s stand for
/// `segments`: the text between markers tokenized by `encode`, each
/// segment tokenized alone in its marker's place; `out` holds what comes
/// first (BOS). Each segment must appear exactly once.
pub(crate) fn tokenize_marked(
    text: &str,
    segments: &[String],
    mut out: Vec<TokenId>,
    encode: &dyn Fn(&str) -> Result<Vec<TokenId>>,
) -> Result<(Vec<TokenId>, Vec<SegmentSpan>)> {
    let bad = |m: String| EngineError::InvalidRequest(m);
    let mut spans = vec![None; segments.len()];
    let mut rest = text;
    while let Some(at) = rest.find(SEGMENT_OPEN) {
        out.extend(encode(&rest[..at])?);
        let after = &rest[at + SEGMENT_OPEN.len()..];
        let close = after.find(SEGMENT_CLOSE).ok_or_else(|| bad("a segment marker is not closed".into()))?;
        let i: usize = after[..close].parse().map_err(|_| bad("a segment marker has no number".into()))?;
        let text =
            segments.get(i).ok_or_else(|| bad(format!("segment marker {i}: there are {} segments", segments.len())))?;
        let tokens = encode(text)?;
        if tokens.is_empty() {
            return Err(bad(format!("segment {i} is empty")));
        }
        let slot = &mut spans[i];
        if slot.is_some() {
            return Err(bad(format!("segment {i} appears twice in the prompt")));
        }
        *slot = Some(SegmentSpan { start: out.len(), len: tokens.len() });
        out.extend(tokens);
        rest = &after[close + SEGMENT_CLOSE.len()..];
    }
    out.extend(encode(rest)?);
    let mut spans: Vec<SegmentSpan> = spans
        .into_iter()
        .enumerate()
        .map(|(i, s)| s.ok_or_else(|| bad(format!("segment {i} does not appear in the rendered prompt"))))
        .collect::<Result<_>>()?;
    spans.sort_by_key(|s| s.start);
    Ok((out, spans))
}

/// Checks a request's segments against its `tokens` (in order, not
/// overlapping, inside the prompt), the engine's limit and the context.
pub(crate) fn check_spans(spans: &[SegmentSpan], tokens: usize, max_segments: usize, max_ctx: usize) -> Result<()> {
    let bad = |m: String| Err(EngineError::InvalidRequest(m));
    if spans.len() > max_segments {
        return bad(format!("{} segments: at most {max_segments} per request (--max-segments)", spans.len()));
    }
    let mut end = 0;
    for (i, s) in spans.iter().enumerate() {
        if s.len >= max_ctx {
            return bad(format!("segment {i} has {} tokens: longer than the context ({max_ctx})", s.len));
        }
        if s.len == 0 || s.start < end || s.start.checked_add(s.len).is_none_or(|e| e > tokens) {
            return bad(format!(
                "segment {i} ({}..+{}) is empty, overlaps another or is outside the prompt",
                s.start, s.len
            ));
        }
        end = s.start + s.len;
    }
    Ok(())
}

/// A request waiting for segment jobs: the request, its tokens, prefix-cache
/// namespace, segments and the jobs it waits for.
type Parked = (Sequence, Vec<TokenId>, u64, Vec<SegmentUse>, Vec<u64>);

/// The engine's segment jobs and the requests waiting for them.
pub(crate) struct Segments {
    /// Running jobs by (namespace, tokens).
    jobs: HashMap<(u64, Vec<TokenId>), u64>,
    /// Requests waiting for jobs: the request, its tokens, prefix-cache
    /// namespace, segments and the jobs it waits for.
    parked: Vec<Parked>,
    next_id: u64,
    tokenizer: Arc<Tokenizer>,
    /// Where jobs' (unread) events go.
    events: (UnboundedSender<StreamEvent>, UnboundedReceiver<StreamEvent>),
}

impl Segments {
    pub(crate) fn new(tokenizer: Arc<Tokenizer>) -> Self {
        Self { jobs: HashMap::new(), parked: Vec::new(), next_id: SEGMENT_IDS, tokenizer, events: unbounded_channel() }
    }

    /// Requests waiting for their segments.
    pub(crate) fn num_parked(&self) -> usize {
        self.parked.len()
    }

    /// A prefill-only sequence computing a segment's `len` tokens.
    fn job(&mut self, len: usize, lora: Option<crate::lora::LoraHold>) -> Sequence {
        while self.events.1.try_recv().is_ok() {}
        let id = self.next_id;
        self.next_id += 1;
        Sequence::internal_prefill(id, len, &self.tokenizer, &self.events.0, lora)
    }
}

impl<B: kiln_backend::Backend> EngineLoop<B> {
    /// Queues a request with segments: at once when every segment is
    /// cached, else after the jobs that compute the missing ones.
    pub(crate) fn add_segmented(&mut self, mut seq: Sequence, tokens: Vec<TokenId>, extra_key: u64) {
        let key = segment_key(extra_key);
        let spans = std::mem::take(&mut seq.segments);
        // Every segment is computed after the same head of the prompt: the
        // tokens before its first segment, up to the request's limit.
        let context = spans.first().map_or(0, |s| s.start).min(seq.segment_context);
        let uses: Vec<SegmentUse> = spans
            .iter()
            .map(|s| SegmentUse {
                start: s.start,
                len: s.len,
                recompute: seq.segment_recompute.min(s.len),
                key,
                context,
            })
            .collect();
        let mut deps = Vec::new();
        // Without prefix caching nothing is found again: the request
        // computes its segments itself.
        let caching = self.sched.config().prefix_caching;
        for u in uses.iter().filter(|u| caching && u.recompute < u.len) {
            // The segment's cached sequence: its context, then the segment.
            let seg: Vec<TokenId> =
                tokens[..u.context].iter().chain(&tokens[u.start..u.start + u.len]).copied().collect();
            if self.sched.kv().find_segment(&seg, key).is_some() {
                continue;
            }
            if let Some(&id) = self.segments.jobs.get(&(key, seg.clone())) {
                deps.push(id);
                continue;
            }
            let job = self.segments.job(seg.len(), seq.lora.as_ref().map(crate::lora::LoraHold::share));
            match self.sched.add_segment(job.id, seg.clone(), key) {
                Ok(()) => {
                    self.stats.record_segment_job();
                    deps.push(job.id);
                    self.segments.jobs.insert((key, seg), job.id);
                    self.seqs.insert(job.id, job);
                }
                // Computed in the request instead.
                Err(e) => tracing::warn!("cannot queue a segment: {e}"),
            }
        }
        if deps.is_empty() {
            self.queue_segmented(seq, tokens, extra_key, uses);
        } else {
            self.segments.parked.push((seq, tokens, extra_key, uses, deps));
        }
    }

    fn queue_segmented(&mut self, seq: Sequence, tokens: Vec<TokenId>, extra_key: u64, uses: Vec<SegmentUse>) {
        match self.sched.add_with_segments(seq.id, tokens, extra_key, uses) {
            Ok(()) => {
                self.seqs.insert(seq.id, seq);
            }
            Err(e) => {
                let _ = seq.events.send(StreamEvent::Error(format!("cannot queue the request: {e}")));
            }
        }
    }

    /// A segment job ended (computed, or failed: its request then
    /// computes the segment itself).
    pub(crate) fn segment_job_done(&mut self, id: u64) {
        self.segments.jobs.retain(|_, j| *j != id);
    }

    /// Queues the parked requests whose jobs are all done; drops the
    /// cancelled ones.
    pub(crate) fn wake_parked(&mut self) {
        if self.segments.parked.is_empty() {
            return;
        }
        for (seq, tokens, extra_key, uses, deps) in std::mem::take(&mut self.segments.parked) {
            if seq.is_cancelled() {
                continue;
            }
            if deps.iter().any(|d| self.seqs.contains_key(d)) {
                self.segments.parked.push((seq, tokens, extra_key, uses, deps));
            } else {
                self.queue_segmented(seq, tokens, extra_key, uses);
            }
        }
    }

    /// Fails every parked request (the engine is stopping).
    pub(crate) fn abort_parked(&mut self, why: &str) {
        for (seq, ..) in std::mem::take(&mut self.segments.parked) {
            let _ = seq.events.send(StreamEvent::Error(why.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(s: &str) -> Result<Vec<TokenId>> {
        Ok(s.bytes().map(u32::from).collect())
    }

    #[test]
    fn markers_are_replaced_by_each_segments_own_tokens() {
        let segs = vec!["ab".to_string(), "xyz".to_string()];
        let text = format!("<{}|{}>q", crate::segment_marker(1), crate::segment_marker(0));
        let (tokens, spans) = tokenize_marked(&text, &segs, vec![1], &encode).unwrap();
        let want: Vec<TokenId> = [1].into_iter().chain(encode("<xyz|ab>q").unwrap()).collect();
        assert_eq!(tokens, want);
        assert_eq!(spans, [SegmentSpan { start: 2, len: 3 }, SegmentSpan { start: 6, len: 2 }]);
    }

    #[test]
    fn missing_repeated_and_empty_segments_are_errors() {
        let segs = vec!["ab".to_string(), String::new()];
        let m0 = crate::segment_marker(0);
        let err = |t: &str, s: &[String]| tokenize_marked(t, s, Vec::new(), &encode).unwrap_err().to_string();
        assert!(err("no markers", &segs[..1]).contains("segment 0 does not appear"));
        assert!(err(&format!("{m0}{m0}"), &segs[..1]).contains("twice"));
        assert!(err(&crate::segment_marker(1), &segs).contains("segment 1 is empty"));
        assert!(err(&crate::segment_marker(5), &segs).contains("there are 2"));
    }

    #[test]
    fn spans_are_checked_against_the_prompt_the_limit_and_the_context() {
        let s = |start, len| SegmentSpan { start, len };
        assert!(check_spans(&[s(1, 3), s(4, 2)], 8, 4, 100).is_ok());
        let err = |spans: &[SegmentSpan]| check_spans(spans, 8, 2, 5).unwrap_err().to_string();
        assert!(err(&[s(0, 1), s(1, 1), s(2, 1)]).contains("at most 2"));
        assert!(err(&[s(0, 6)]).contains("longer than the context"));
        assert!(err(&[s(0, 3), s(2, 2)]).contains("overlaps"));
        assert!(err(&[s(7, 2)]).contains("outside"));
        assert!(err(&[s(usize::MAX, 2)]).contains("outside"));
    }
}
