//! Grouping a mixture-of-experts step's picks by expert for the grouped
//! tensor-core products (`mmq_ids` in kernels/mmq.cu): the tile sizes, the
//! most tiles a step can make, the device sort's shape, and the host's
//! counting sort that the device's `moe_sort` (kernels/elementwise.cu)
//! reproduces. Plain Rust, tested without a GPU.

/// Rows per tile of the grouped products, one kernel form each
/// (`mmq_ids_{fmt}_{1,2,4}`).
pub const TILE_ROWS: [usize; 3] = [16, 32, 64];

/// Most experts the device sort groups (its counters live in 40 KB of
/// shared memory, at least 8 warps' worth).
pub const SORT_MAX_EXPERTS: usize = 1024;

/// Most experts and picks per token the device routes (`moe_route`: a warp
/// per row, up to 64 logits per lane; lane j keeps pick j).
pub const ROUTE_MAX_EXPERTS: usize = 2048;
/// See [`ROUTE_MAX_EXPERTS`].
pub const ROUTE_MAX_K: usize = 32;

/// Warps of the device sort for `e` experts: as many as 40 KB of shared
/// counters hold (a row of `e` per warp, then `e + 1` more), at most 32;
/// `None` past [`SORT_MAX_EXPERTS`].
pub fn sort_warps(e: usize) -> Option<usize> {
    (1..=SORT_MAX_EXPERTS).contains(&e).then(|| ((40 * 1024 / 4 - e - 1) / e).clamp(1, 32))
}

/// The tile form (an index of [`TILE_ROWS`]) for `nk` picks over `e`
/// experts: the narrowest tile that holds twice the mean rows per expert,
/// since routing is uneven (`wanted`: a tile of that many rows, from
/// `--cuda moe-tile`). On the Qwen3-30B-A3B shape's 512-token prompt (mean
/// 32 rows) 64-row tiles took 35.7 ms against 37.4 with 32 and 46.4 with 16
/// (H200, docs/cuda.md).
pub fn tile_form(nk: usize, e: usize, wanted: Option<usize>) -> usize {
    let want = wanted.unwrap_or_else(|| 2 * nk.div_ceil(e.max(1)));
    TILE_ROWS.iter().position(|&bn| want <= bn).unwrap_or(TILE_ROWS.len() - 1)
}

/// Most `bn`-row tiles `nk` picks over `e` experts can make: every expert's
/// rows in whole tiles, at most one of them part-filled.
pub fn tiles_max(nk: usize, e: usize, bn: usize) -> usize {
    nk.div_ceil(bn.max(1)) + e.min(nk)
}

/// One tile of the list: its expert and its index within the expert.
pub fn tile_word(expert: usize, index: usize) -> u32 {
    (expert as u32) << 16 | index as u32
}

/// A step's picks grouped by expert, as the grouped products read them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Grouping {
    /// Each expert's first gathered row, then the end (`e + 1`).
    pub starts: Vec<u32>,
    /// The token of each gathered row.
    pub order: Vec<u32>,
    /// The gathered row of each pick (slot order).
    pub at: Vec<u32>,
    /// The tile count, then each tile ([`tile_word`]), expert by expert.
    pub tiles: Vec<u32>,
}

impl Grouping {
    /// Groups the picks' experts `experts` (slot order, `k` per token) of
    /// `e` experts into `bn`-row tiles: a stable counting sort (an expert's
    /// rows in slot order). Experts past `e` are an error.
    pub fn group(&mut self, experts: &[u32], k: usize, e: usize, bn: usize) -> Result<(), String> {
        if k == 0 || bn == 0 || !experts.len().is_multiple_of(k) {
            return Err(format!("{} picks, {k} per token, in tiles of {bn}", experts.len()));
        }
        if let Some(&x) = experts.iter().find(|&&x| x as usize >= e) {
            return Err(format!("expert {x} of {e}"));
        }
        self.starts.clear();
        self.starts.resize(e + 1, 0);
        for &x in experts {
            self.starts[x as usize + 1] += 1;
        }
        for i in 0..e {
            self.starts[i + 1] += self.starts[i];
        }
        let mut next = self.starts.clone();
        self.order.clear();
        self.order.resize(experts.len(), 0);
        self.at.clear();
        for (slot, &x) in experts.iter().enumerate() {
            let row = next[x as usize];
            next[x as usize] += 1;
            self.order[row as usize] = (slot / k) as u32;
            self.at.push(row);
        }
        self.tiles.clear();
        self.tiles.push(0);
        for (x, w) in self.starts.windows(2).enumerate() {
            self.tiles.extend((0..(w[1] - w[0]).div_ceil(bn as u32) as usize).map(|j| tile_word(x, j)));
        }
        self.tiles[0] = (self.tiles.len() - 1) as u32;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiles_hold_twice_the_mean() {
        // Qwen3-30B-A3B, 512 tokens: 4096 picks over 128 experts, mean 32.
        assert_eq!(TILE_ROWS[tile_form(4096, 128, None)], 64);
        // 16 decode rows: mean 1.
        assert_eq!(TILE_ROWS[tile_form(128, 128, None)], 16);
        assert_eq!(TILE_ROWS[tile_form(40 * 3, 8, None)], 32);
        assert_eq!(TILE_ROWS[tile_form(4096, 128, Some(16))], 16);
        assert_eq!(TILE_ROWS[tile_form(1 << 20, 8, None)], 64, "the widest past it");
    }

    #[test]
    fn sort_fits_its_shared_memory() {
        for e in [1, 8, 128, 256, 512, 1000, SORT_MAX_EXPERTS] {
            let w = sort_warps(e).unwrap();
            assert!((1..=32).contains(&w) && 4 * (w * e + e + 1) <= 40 * 1024, "{e} experts, {w} warps");
        }
        assert_eq!(sort_warps(128), Some(32));
        assert!(sort_warps(0).is_none() && sort_warps(SORT_MAX_EXPERTS + 1).is_none());
    }

    /// Deterministic pseudo-random picks: `n` tokens' `k` distinct experts
    /// of `e`, skewed towards the low ones.
    fn picks(n: usize, k: usize, e: usize, seed: u32) -> Vec<u32> {
        let mut s = seed;
        let mut out = Vec::new();
        for _ in 0..n {
            let mut row: Vec<u32> = Vec::new();
            while row.len() < k {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                let x = ((s >> 8) as u64 * (s >> 8) as u64 / (1u64 << 24) % e as u64) as u32;
                if !row.contains(&x) {
                    row.push(x);
                }
            }
            out.extend(row);
        }
        out
    }

    #[test]
    fn grouping_is_a_stable_sort_with_a_tile_list() {
        let mut g = Grouping::default();
        for (n, k, e) in [(1, 1, 1), (5, 2, 8), (40, 3, 8), (512, 8, 128), (37, 4, 300)] {
            let ex = picks(n, k, e, (n * 31 + e) as u32);
            for (form, &bn) in TILE_ROWS.iter().enumerate() {
                g.group(&ex, k, e, bn).unwrap();
                assert_eq!(g.starts.len(), e + 1);
                assert_eq!(g.starts[e] as usize, n * k);
                // Every pick's row holds its token, within its expert's
                // range; rows rise with the slot within an expert.
                let mut last = vec![None; e];
                for (slot, &row) in g.at.iter().enumerate() {
                    let x = ex[slot] as usize;
                    assert!((g.starts[x]..g.starts[x + 1]).contains(&row));
                    assert_eq!(g.order[row as usize] as usize, slot / k);
                    assert!(last[x].is_none_or(|r| r < row), "stable");
                    last[x] = Some(row);
                }
                // The tiles cover each expert's rows once, within the bound.
                let tiles = &g.tiles[1..];
                assert_eq!(g.tiles[0] as usize, tiles.len());
                assert!(tiles.len() <= tiles_max(n * k, e, bn), "form {form}");
                for x in 0..e {
                    let rows = (g.starts[x + 1] - g.starts[x]) as usize;
                    let mine: Vec<u32> =
                        tiles.iter().filter(|&&t| (t >> 16) as usize == x).map(|t| t & 0xffff).collect();
                    assert_eq!(mine, (0..rows.div_ceil(bn) as u32).collect::<Vec<_>>());
                }
            }
        }
        assert!(g.group(&[3], 1, 3, 16).is_err(), "an expert past the count");
        assert!(g.group(&[0, 1, 2], 2, 3, 16).is_err(), "picks not whole tokens");
    }
}
