//! Dequantization of every GGUF type against an independent reference (the
//! `gguf` PyPI package; see `scripts/gen-quant-fixtures.py`).

use kiln_kernels::{quant, GgmlType};

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().unwrap())
}

#[test]
fn dequantize_matches_gguf_py() {
    let data = include_bytes!("fixtures/dequant.bin");
    let mut pos = 0;
    let mut seen = Vec::new();
    while pos < data.len() {
        let ty = GgmlType::from_id(u32_at(data, pos)).expect("known type id");
        let (n, nb) = (u32_at(data, pos + 4) as usize, u32_at(data, pos + 8) as usize);
        pos += 12;
        let raw = &data[pos..pos + nb];
        pos += nb;
        let want: Vec<f32> =
            data[pos..pos + 4 * n].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        pos += 4 * n;
        let mut got = vec![f32::NAN; n];
        quant::dequantize_row(ty, raw, &mut got).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // The reference computes in float32 (gguf-py) with possibly another
            // operation order (d*(sc*q) vs (d*sc)*q): allow 1 ulp-ish slack.
            assert!((g - w).abs() <= 1e-6 * w.abs().max(1e-30) * 4.0, "{ty} element {i}: got {g}, want {w}");
        }
        seen.push(ty);
    }
    for ty in quant::ALL_TYPES {
        assert!(seen.contains(&ty), "fixture has no {ty} record");
    }
}
