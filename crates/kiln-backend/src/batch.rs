//! The input of one forward pass: tokens of several sequences at different
//! stages (prefill chunks and decodes), flattened, with their block tables.

use crate::{BackendError, Result};

/// Which logits a sequence needs from this step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogitsWant {
    /// None (a prefill chunk that is not the prompt's last).
    None,
    /// The last row only (decode, or a prompt's last chunk).
    Last,
    /// Every row: each is a position whose token is sampled (speculative
    /// verification; golden tests). Backends compute such rows as they
    /// compute decode rows (the CPU attends with its f32 decode kernel, not
    /// the bf16 prompt kernel), so sampling them equals plain decoding.
    All,
}

/// One sequence's rows in a [`ForwardBatch`].
#[derive(Debug, Clone)]
pub struct SeqSpan {
    /// First row in the batch.
    pub start: usize,
    /// Number of rows.
    pub len: usize,
    /// Position of the first row.
    pub pos0: usize,
    /// The sequence's KV blocks (covering at least `pos0 + len` positions).
    pub block_table: Vec<u32>,
    /// Its blocks in the window pool of the sliding-window layers
    /// ([`crate::KvSpec::window`]), by the same block index; entries
    /// before every row's window are never read. Empty without a window
    /// pool.
    pub window_table: Vec<u32>,
    /// Logits wanted.
    pub logits: LogitsWant,
    /// The LoRA adapter of the sequence's rows (`None`: the base model).
    pub lora: Option<crate::lora::LoraUse>,
}

/// Tokens of one engine step.
#[derive(Debug, Clone, Default)]
pub struct ForwardBatch {
    /// Token ids, all sequences concatenated.
    pub tokens: Vec<u32>,
    /// Position of each token.
    pub positions: Vec<u32>,
    /// Flat KV slot (`block * block_size + offset`) of each token.
    pub slots: Vec<u32>,
    /// Each token's slot in the window pool (from
    /// [`SeqSpan::window_table`]); empty without a window pool.
    pub window_slots: Vec<u32>,
    /// The sequences.
    pub seqs: Vec<SeqSpan>,
}

impl ForwardBatch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }

    /// Clears the batch, keeping its allocations.
    pub fn clear(&mut self) {
        self.tokens.clear();
        self.positions.clear();
        self.slots.clear();
        self.window_slots.clear();
        self.seqs.clear();
    }

    /// Adds a sequence's `tokens` at positions `pos0..`, whose KV goes into
    /// `block_table` blocks of `block_size` tokens.
    pub fn push_seq(
        &mut self,
        tokens: &[u32],
        pos0: usize,
        block_table: &[u32],
        block_size: usize,
        logits: LogitsWant,
    ) -> Result<()> {
        if tokens.is_empty() {
            return Err(BackendError::Batch("a sequence with no tokens".into()));
        }
        let end = pos0 + tokens.len();
        if block_size == 0 || block_table.len() * block_size < end {
            return Err(BackendError::Batch(format!(
                "block table of {} blocks cannot hold {end} positions",
                block_table.len()
            )));
        }
        let start = self.tokens.len();
        self.tokens.extend_from_slice(tokens);
        for p in pos0..end {
            self.positions.push(p as u32);
            self.slots.push(block_table[p / block_size] * block_size as u32 + (p % block_size) as u32);
        }
        self.seqs.push(SeqSpan {
            start,
            len: tokens.len(),
            pos0,
            block_table: block_table.to_vec(),
            window_table: Vec::new(),
            logits,
            lora: None,
        });
        Ok(())
    }

    /// Sets the window-pool block table of the sequence pushed last (see
    /// [`SeqSpan::window_table`]) and its rows' window slots. With a window
    /// pool, every sequence of the batch needs one.
    pub fn set_window_table(&mut self, table: &[u32], block_size: usize) -> Result<()> {
        let Some(s) = self.seqs.last_mut() else {
            return Err(BackendError::Batch("a window table with no sequence".into()));
        };
        let end = s.pos0 + s.len;
        if block_size == 0 || table.len() * block_size < end || self.window_slots.len() != s.start {
            return Err(BackendError::Batch(format!(
                "window table of {} blocks cannot hold {end} positions (or a sequence before it has none)",
                table.len()
            )));
        }
        for p in s.pos0..end {
            self.window_slots.push(table[p / block_size] * block_size as u32 + (p % block_size) as u32);
        }
        s.window_table.clear();
        s.window_table.extend_from_slice(table);
        Ok(())
    }

    /// Sets the LoRA adapter of the sequence pushed last (no-op on an
    /// empty batch).
    pub fn set_lora(&mut self, lora: Option<crate::lora::LoraUse>) {
        if let Some(s) = self.seqs.last_mut() {
            s.lora = lora;
        }
    }

    /// Whether any sequence has a LoRA adapter.
    pub fn has_lora(&self) -> bool {
        self.seqs.iter().any(|s| s.lora.is_some())
    }

    /// Rows whose logits are computed, in output order.
    pub fn logit_rows(&self) -> impl Iterator<Item = usize> + '_ {
        self.seqs.iter().flat_map(|s| match s.logits {
            LogitsWant::None => 0..0,
            LogitsWant::Last => s.start + s.len - 1..s.start + s.len,
            LogitsWant::All => s.start..s.start + s.len,
        })
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }
    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}
