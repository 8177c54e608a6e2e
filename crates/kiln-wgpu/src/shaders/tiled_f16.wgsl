// The tiled products with f16 tiles and multiply-adds (adapters with
// shader-f16; `enable f16;` heads the module): a thread's partial sums
// are f16 over FOLD_ROUNDS rounds of columns (16 or 32 columns a round),
// then added into its f32 sums, so no f16 sum runs over more than a few
// dozen products. Values past f16's range are clamped into it as they
// enter the tiles. The backend never gives these a gated unit's output
// (unnormed, the largest activations a model has) or F32 weights: the
// down products' tiles stay f32, and F32 matrices'.
alias TF = f16;
const FOLD: bool = true;
const FOLD_ROUNDS: u32 = FOLD_EVERYu;
fn tf(v: f32) -> f16 {
    return f16(clamp(v, -65504.0, 65504.0));
}
