//! Elementwise ops and attention over the paged KV cache.
//!
//! All functions work on row-major `f32` slices and never allocate per call
//! (attention keeps a per-thread score buffer that only grows).

mod attention;
mod norm;
mod rope;

pub use attention::{paged_attention, write_kv, AttnSeq, KvLayout};
pub use norm::{add_inplace, rms_norm, rms_norm_inplace, silu_mul, softmax_inplace};
pub use rope::{Rope, RopeStyle};

/// Dot product with several independent accumulators so the compiler can
/// vectorize it.
#[inline]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    dot_impl::<false>(a, b)
}

/// [`dot`], with fused multiply-adds when `FMA` (only inside functions
/// compiled with the `fma` target feature: elsewhere `mul_add` is a libm call).
#[inline(always)]
pub(crate) fn dot_impl<const FMA: bool>(a: &[f32], b: &[f32]) -> f32 {
    const L: usize = 16;
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0f32; L];
    let mut ca = a.chunks_exact(L);
    let mut cb = b.chunks_exact(L);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..L {
            acc[i] = if FMA { x[i].mul_add(y[i], acc[i]) } else { acc[i] + x[i] * y[i] };
        }
    }
    let mut s: f32 = acc.iter().sum();
    for (x, y) in ca.remainder().iter().zip(cb.remainder()) {
        s += x * y;
    }
    s
}

/// `y += a * x`, vectorizable; fused when `FMA` (see [`dot_impl`]).
#[inline(always)]
pub(crate) fn axpy_impl<const FMA: bool>(a: f32, x: &[f32], y: &mut [f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi = if FMA { a.mul_add(*xi, *yi) } else { *yi + a * xi };
    }
}
