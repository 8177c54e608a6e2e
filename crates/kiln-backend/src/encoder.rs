//! What encoder models (BERT, XLM-RoBERTa, nomic-bert) need of a device:
//! post-norm blocks with LayerNorms that have a bias, plain (ungated)
//! feed-forward products, and attention in both directions within each
//! sequence of the step, with no KV cache. An encoder step reads the
//! final hidden rows back ([`crate::Backend::read_rows`]); pooling and the
//! heads of rerankers run on the host, where they are a rounding error.
//!
//! One encoder step:
//!
//! ```text
//! step = be.begin_encoder(batch)
//! be.embed_sum(word, positions → x, LayerNorm)      x = LN(word[tok] + pos[p])
//! per layer: be.linear(x · [Q;K;V] → qkv)           with the bias
//!            be.attention_within(qkv → attn)        every row sees its whole sequence
//!            be.linear_add_norm(attn · O → x, LN)   x = LN(x + attn·Oᵀ + b)
//!            be.linear(x · up → act, GELU)
//!            be.linear_add_norm(act · down → x, LN)
//! be.read_rows(x → host)
//! ```

/// A LayerNorm with its weight and bias: `(x - mean) / sqrt(var + eps) ⊙ w + b`.
pub struct LayerNorm<'a, V> {
    /// Weight (γ).
    pub weight: &'a V,
    /// Bias (β).
    pub bias: &'a V,
    /// Epsilon.
    pub eps: f32,
}

/// The activation of a plain product ([`crate::Backend::linear`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    /// None: `a·Wᵀ + b`.
    None,
    /// GELU, exact (erf): BERT's `gelu`.
    GeluErf,
    /// GELU by its tanh approximation (`gelu_new`, `gelu_pytorch_tanh`).
    GeluTanh,
    /// `silu(gate) ⊙ up` of a [`crate::MatrixUse::GateUp`] matrix
    /// (nomic-bert's SwiGLU): the output has the width of one part.
    Swiglu,
}
