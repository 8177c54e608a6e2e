// The tiled products in f32 throughout: tiles and multiply-adds in f32
// (every adapter), so no partial sums are folded.
alias TF = f32;
const FOLD: bool = false;
const FOLD_ROUNDS: u32 = 1u;
fn tf(v: f32) -> f32 {
    return v;
}
