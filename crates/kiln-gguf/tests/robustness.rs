//! Hostile-input robustness: truncation at every byte and random corruption
//! must give errors, never panics or huge allocations.

mod common;

use common::{sample_file, Rng};
use kiln_gguf::{parse, GgufError};

/// End of the last tensor's data: everything after it is padding.
fn data_end(bytes: &[u8]) -> usize {
    let f = parse(bytes).unwrap();
    f.tensors().iter().map(|t| t.data_range().end).max().unwrap()
}

#[test]
fn truncation_at_every_byte_is_an_error() {
    let bytes = sample_file();
    let end = data_end(&bytes);
    assert!(end <= bytes.len() && end > 200, "sample has a real header and data");
    for n in 0..end {
        match parse(&bytes[..n]) {
            Err(GgufError::Malformed { .. }) => {}
            other => {
                panic!("truncated at {n}/{end}: expected a malformed-file error, got {other:?}")
            }
        }
    }
    // Trailing padding after the last tensor is optional.
    for n in end..=bytes.len() {
        assert!(parse(&bytes[..n]).is_ok(), "cut at {n} only removes padding");
    }
}

#[test]
fn truncation_error_says_where() {
    let bytes = sample_file();
    let e = parse(&bytes[..30]).unwrap_err().to_string();
    assert_eq!(e, "header claims 3 tensors and 8 metadata entries, which cannot fit in a 30-byte file");
    let name = b"token_embd.weight";
    let at = bytes.windows(name.len()).position(|w| w == name).unwrap() + name.len();
    let e = parse(&bytes[..at + 6]).unwrap_err().to_string();
    assert!(e.starts_with("tensor info #2: tensor 'token_embd.weight': unexpected end"), "{e}");
    let key = b"nested";
    let at = bytes.windows(key.len()).position(|w| w == key).unwrap() + key.len();
    let e = parse(&bytes[..at + 10]).unwrap_err().to_string();
    assert!(e.starts_with("metadata entry #6: key 'nested': unexpected end"), "{e}");
    let end = data_end(&bytes);
    let e = parse(&bytes[..end - 1]).unwrap_err().to_string();
    assert!(e.contains(&format!("is past the end of the file ({} bytes)", end - 1)), "{e}");
}

#[test]
fn random_header_corruption_never_panics() {
    let bytes = sample_file();
    let header_len = parse(&bytes).unwrap().data_offset();
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let specials = [0u64, 1, 0xFF, 0xFFFF_FFFF, 1 << 32, 1 << 62, u64::MAX, u64::MAX - 7];
    let (mut ok, mut err) = (0, 0);
    for _ in 0..5000 {
        let mut b = bytes.clone();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(header_len);
            if rng.below(3) == 0 {
                // Overwrite a multi-byte field with an extreme value.
                let v = specials[rng.below(specials.len())].to_le_bytes();
                let len = [1, 4, 8][rng.below(3)];
                for (i, &x) in v.iter().take(len).enumerate() {
                    if let Some(slot) = b.get_mut(at + i) {
                        *slot = x;
                    }
                }
            } else {
                b[at] ^= 1 << rng.below(8);
            }
        }
        if rng.below(4) == 0 {
            b.truncate(rng.below(b.len() + 1));
        }
        match parse(&b) {
            Ok(f) => {
                ok += 1;
                // Whatever parsed must be internally consistent.
                for t in f.tensors() {
                    assert_eq!(f.tensor_data(t).len(), t.n_bytes());
                }
            }
            Err(_) => err += 1,
        }
    }
    assert!(err > 2500, "most corruptions must be detected ({ok} ok, {err} errors)");
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(42);
    for i in 0..2000 {
        let len = rng.below(256);
        let mut b: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if i % 2 == 0 && b.len() >= 8 {
            b[..4].copy_from_slice(b"GGUF");
            b[4..8].copy_from_slice(&3u32.to_le_bytes());
        }
        let _ = parse(&b);
    }
}
