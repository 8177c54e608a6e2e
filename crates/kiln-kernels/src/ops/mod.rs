//! Elementwise ops and attention over the paged KV cache.
//!
//! All functions work on row-major `f32` slices and never allocate per call
//! (attention keeps a per-thread score buffer that only grows).

mod attention;
mod encoder;
mod kv_shift;
mod norm;
pub(crate) mod par;
mod rope;
pub(crate) mod vmath;

pub use attention::{
    paged_attention, paged_attention_masked, paged_attention_with, write_kv, AttnMask, AttnPath, AttnSeq, KvFormat,
    KvLayout, KvType, TILE_ROWS,
};
pub use encoder::{add_layer_norm, attention_within, erf, gelu_erf, gelu_exact, gelu_tanh, WithinShape};
pub use kv_shift::shift_kv;
pub use norm::{
    add_inplace, add_rms_norm, gelu_tanh_mul, rms_norm, rms_norm_inplace, silu_mul, softmax_inplace, swiglu_oai_mul,
};
pub use par::PAR_MIN_ROWS;
pub use rope::{Rope, RopeStyle};

/// Dot product with several independent accumulators so the compiler can
/// vectorize it.
#[inline]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    const L: usize = 16;
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; L];
    let mut ca = a.chunks_exact(L);
    let mut cb = b.chunks_exact(L);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..L {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        s += x * y;
    }
    s
}
