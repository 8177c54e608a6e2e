//! One test per kind of defect: each must be refused with a message that
//! names the problem.

mod common;

use common::Raw;
use kiln_gguf::{parse, GgufError, GgufFile, MAX_ARRAY_DEPTH};

fn err(bytes: Vec<u8>) -> String {
    match parse(&bytes) {
        Ok(f) => panic!("expected an error, parsed {f:?}"),
        Err(e) => e.to_string(),
    }
}

fn assert_err(bytes: Vec<u8>, want: &str) {
    let e = err(bytes);
    assert!(e.contains(want), "error {e:?} lacks {want:?}");
}

/// A file with one metadata entry and one F32 tensor of `dims` at `offset`.
fn one_tensor(dims: &[u64], type_id: u32, offset: u64, data: usize) -> Vec<u8> {
    let mut r = Raw::header(3, 1, 1);
    r.kv_u32("k", 1).tensor("t", dims, type_id, offset).pad(32).data(data);
    r.build()
}

#[test]
fn minimal_files_parse() {
    let f = parse(&Raw::header(3, 0, 0).build()).unwrap();
    assert!(f.tensors().is_empty() && f.metadata().is_empty());
    let f = parse(&one_tensor(&[8], 0, 0, 32)).unwrap();
    assert_eq!(f.tensor("t").unwrap().n_bytes(), 32);
}

#[test]
fn magic_and_versions() {
    assert_err(b"GGML\x03\0\0\0".to_vec(), "not a GGUF file");
    assert_err(b"GG".to_vec(), "shorter than the 4-byte magic");
    let e = parse(&Raw::header(1, 0, 0).build()).unwrap_err();
    assert!(matches!(e, GgufError::Unsupported { .. }));
    assert!(e.to_string().contains("GGUF version 1 is not supported"), "{e}");
    assert_err(Raw::header(3u32.swap_bytes(), 0, 0).build(), "big-endian");
    assert_err(Raw::header(4, 0, 0).build(), "GGUF version 4 is not supported");
}

#[test]
fn huge_counts_are_refused_before_allocating() {
    assert_err(Raw::header(3, u64::MAX, 0).build(), "cannot fit");
    assert_err(Raw::header(3, 0, 1 << 60).build(), "cannot fit");
    assert_err(Raw::header(3, 1 << 40, 1 << 40).build(), "cannot fit");
    // String length far beyond the file.
    let mut r = Raw::header(3, 0, 1);
    r.u64(u64::MAX - 3).bytes(b"key").u32(4).u32(1);
    assert_err(r.build(), "claims 18446744073709551612 bytes");
    // Array counts: plain, multiplied overflow for strings, nested arrays.
    for (elem, count) in [(4u32, 1u64 << 40), (8, 1 << 61), (8, u64::MAX), (9, 1 << 60), (0, 100)] {
        let mut r = Raw::header(3, 0, 1);
        r.str("arr").u32(9).u32(elem).u64(count).bytes(&[0; 16]);
        assert_err(r.build(), "array count");
    }
}

#[test]
fn bad_strings_types_and_keys() {
    let mut r = Raw::header(3, 0, 1);
    r.u64(2).bytes(&[0xC3, 0x28]).u32(4).u32(1);
    assert_err(r.build(), "not valid UTF-8");
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(13).u32(1);
    assert_err(r.build(), "key 'k': unknown value type id 13");
    let mut r = Raw::header(3, 0, 1);
    r.str("k").u32(9).u32(77).u64(0);
    assert_err(r.build(), "unknown value type id 77");
    let mut r = Raw::header(3, 0, 2);
    r.kv_u32("k", 1).kv_u32("k", 2);
    assert_err(r.build(), "duplicate metadata key 'k'");
}

fn nested(depth: usize) -> Vec<u8> {
    let mut r = Raw::header(3, 0, 1);
    r.str("deep").u32(9);
    for _ in 1..depth {
        r.u32(9).u64(1);
    }
    r.u32(4).u64(1).u32(7).pad(8);
    r.build()
}

#[test]
fn array_nesting_is_bounded() {
    assert!(parse(&nested(MAX_ARRAY_DEPTH)).is_ok());
    assert_err(nested(MAX_ARRAY_DEPTH + 1), "nested deeper than 8");
    assert_err(nested(100_000), "nested deeper than 8");
}

#[test]
fn alignment_must_be_a_power_of_two() {
    for (a, want) in [(0u32, "is 0"), (3, "is 3"), (48, "is 48")] {
        let mut r = Raw::header(3, 0, 1);
        r.kv_u32("general.alignment", a);
        assert_err(r.build(), want);
    }
    let mut r = Raw::header(3, 0, 1);
    r.str("general.alignment").u32(8).str("32");
    assert_err(r.build(), "general.alignment");
    let mut r = Raw::header(3, 1, 1);
    r.kv_u32("general.alignment", 64).tensor("t", &[16], 0, 0).pad(64).data(64);
    let f = parse(&r.build()).unwrap();
    assert_eq!((f.alignment(), f.data_offset() % 64), (64, 0));
}

#[test]
fn tensor_shape_defects() {
    assert_err(one_tensor(&[1, 1, 1, 1, 1], 0, 0, 32), "tensor 't': has 5 dimensions");
    assert_err(one_tensor(&[], 0, 0, 32), "tensor 't': has 0 dimensions");
    assert_err(one_tensor(&[8, 0], 0, 0, 32), "dimension 1 of shape [8, 0] is zero");
    assert_err(one_tensor(&[1 << 32, 1 << 32, 1 << 32], 0, 0, 32), "more than 2^64 elements");
    assert_err(one_tensor(&[48], 3, 0, 64), "innermost dimension 48 is not a multiple of the Q4_1 block size 32");
    assert_err(one_tensor(&[8], 4, 0, 32), "tensor 't': unknown or unsupported GGML type id 4");
    assert_err(one_tensor(&[8], 1000, 0, 32), "GGML type id 1000");
}

#[test]
fn tensor_offset_defects() {
    assert_err(one_tensor(&[8], 0, 8, 64), "offset 8 is not a multiple of the alignment 32");
    let e = err(one_tensor(&[16], 0, 0, 32));
    assert!(e.ends_with("tensor 't': data range 96..160 is past the end of the file (128 bytes)"), "{e}");
    assert_err(one_tensor(&[8], 0, 1 << 40, 32), "past the end of the file");
    assert_err(one_tensor(&[8], 0, u64::MAX - 31, 32), "data range overflow");
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[16], 0, 0).tensor("b", &[8], 0, 32).pad(32).data(128);
    assert_err(r.build(), "tensors 'a' (bytes 96..160) and 'b' (bytes 128..160) overlap");
    let mut r = Raw::header(3, 2, 0);
    r.tensor("a", &[8], 0, 0).tensor("a", &[8], 0, 32).pad(32).data(64);
    assert_err(r.build(), "duplicate tensor name 'a'");
}

#[test]
fn file_errors_name_the_path() {
    let dir = std::env::temp_dir().join(format!("kiln-gguf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.gguf");
    std::fs::write(&path, one_tensor(&[16], 0, 0, 32)).unwrap();
    let e = GgufFile::open(&path).unwrap_err().to_string();
    assert_eq!(
        e,
        format!("{}: tensor 't': data range 96..160 is past the end of the file (128 bytes)", path.display())
    );
    let empty = dir.join("empty.gguf");
    std::fs::write(&empty, b"").unwrap();
    let e = GgufFile::open(&empty).unwrap_err().to_string();
    assert!(e.starts_with(&format!("{}: not a GGUF file", empty.display())), "{e}");
    let missing = dir.join("missing.gguf");
    let e = GgufFile::open(&missing).unwrap_err();
    assert!(matches!(e, GgufError::Io { .. }) && e.to_string().contains("missing.gguf"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn mapped_bytes_outlive_the_file_handle() {
    let dir = std::env::temp_dir().join(format!("kiln-gguf-map-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ok.gguf");
    std::fs::write(&path, common::sample_file()).unwrap();
    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.path(), Some(path.as_path()));
    let t = f.tensor("blk.0.attn_q.weight").unwrap().clone();
    let bytes = f.tensor_bytes_arc(&t);
    assert_eq!(f.tensor_data(&t).as_ptr(), bytes.as_ptr(), "no copy");
    drop(f);
    assert_eq!(&bytes[..], &[7u8; 40][..]);
    let meta = bytes.file().metadata();
    assert_eq!(meta.arch_u32("block_count").unwrap(), 2);
    assert_eq!(meta.get_str_array("tokenizer.ggml.tokens").unwrap().len(), 4);
    std::fs::remove_dir_all(&dir).unwrap();
}
