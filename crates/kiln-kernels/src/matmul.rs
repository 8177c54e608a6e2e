//! Quantized matrix multiplication (to be written: see the module list in lib.rs).
use crate::{pool::ThreadPool, GgmlType};

/// A weight matrix of `rows` output features by `cols` input features, stored
/// row-major in GGUF block format `ty` (each row is `ty.row_bytes(cols)` bytes).
#[derive(Debug, Clone, Copy)]
pub struct WeightView<'a> {
    /// Element type.
    pub ty: GgmlType,
    /// Output features.
    pub rows: usize,
    /// Input features.
    pub cols: usize,
    /// `rows * ty.row_bytes(cols)` bytes.
    pub data: &'a [u8],
}

/// `y[t][r] = Σ_c W[r][c] · x[t][c]` for `t < n`; `x` is `n × cols`, `y` is `n × rows`, row-major.
pub fn matmul(pool: &ThreadPool, w: WeightView<'_>, x: &[f32], n: usize, y: &mut [f32]) {
    let _ = (pool, w, x, n, y);
    todo!()
}

/// Several weights sharing one input (Q/K/V, gate/up): the input is prepared
/// (e.g. quantized) once. `ys[i]` is `n × ws[i].rows`.
pub fn matmul_multi(pool: &ThreadPool, ws: &[WeightView<'_>], x: &[f32], n: usize, ys: &mut [&mut [f32]]) {
    let _ = (pool, ws, x, n, ys);
    todo!()
}
