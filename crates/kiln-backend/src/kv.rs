//! The KV memory a backend allocates for the engine: one K and one V pool
//! per layer in fixed-size blocks, and optionally a host tier of block
//! slots. Which block belongs to which sequence is `kiln_core::kv`'s
//! business; this is storage and copies only.

use crate::Result;

/// What to allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvSpec {
    /// Decoder layers.
    pub layers: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Dimension of one head.
    pub head_dim: usize,
    /// Tokens per block.
    pub block_size: usize,
    /// Blocks per layer; `None` lets the backend take what its memory
    /// allows (a GPU: the free memory less its reserve).
    pub num_blocks: Option<usize>,
    /// The longest context: the pool must hold at least one.
    pub max_ctx: usize,
    /// Block slots of the host tier (0: none).
    pub tier_slots: usize,
    /// Prefer the 16-bit format the backend's fastest prompt attention
    /// reads (the CPU's bf16 pairs) where the machine has it.
    pub fast_format: bool,
}

impl KvSpec {
    /// 16-bit values of one token over every layer, K and V.
    pub fn values_per_token(&self) -> usize {
        2 * self.layers * self.kv_heads * self.head_dim
    }
    /// 16-bit values of one block over every layer, K and V (one tier slot).
    pub fn block_values(&self) -> usize {
        self.values_per_token() * self.block_size
    }
}

/// KV memory on a device, with its host tier.
pub trait KvMemory: Send {
    /// Blocks per layer.
    fn num_blocks(&self) -> usize;
    /// Tokens per block.
    fn block_size(&self) -> usize;
    /// Block slots in the host tier.
    fn tier_slots(&self) -> usize;
    /// Most blocks one tier copy moves (`usize::MAX` where any number does).
    fn tier_batch(&self) -> usize;
    /// Copies blocks `blocks[j]` (every layer's K and V) into tier slots
    /// `slots[j]` (distinct slots, at most [`KvMemory::tier_batch`]). A
    /// device may do it asynchronously, in order before the next step.
    fn tier_save(&mut self, blocks: &[u32], slots: &[u32]) -> Result<()>;
    /// Copies tier slots `slots[j]` into blocks `blocks[j]` (distinct
    /// blocks, at most [`KvMemory::tier_batch`]), before the next step.
    fn tier_load(&mut self, slots: &[u32], blocks: &[u32]) -> Result<()>;
    /// The values in tier slot `i`, once every copy so far has finished
    /// (for checks: the engine never reads slots).
    fn tier_slot(&mut self, i: usize) -> Result<Vec<u16>>;
    /// A short name of the storage format (`f16`, `bf16-pairs`, ...).
    fn format_name(&self) -> &'static str;
}
