//! Helpers for the integration tests: a valid sample file from the writer,
//! and a raw byte encoder for files the writer refuses to produce.
#![allow(dead_code)]

use kiln_gguf::{Array, GgmlType, GgufWriter};

/// A small valid file with every kind of metadata and three tensor types.
pub fn sample_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", "llama").unwrap();
    w.add_metadata("llama.block_count", 2u32).unwrap();
    w.add_metadata("llama.rope.freq_base", 10000.0f32).unwrap();
    w.add_metadata("tokenizer.ggml.tokens", vec!["<s>", "a", "b", "ab"]).unwrap();
    w.add_metadata("tokenizer.ggml.token_type", vec![3i32, 1, 1, 1]).unwrap();
    w.add_metadata("tokenizer.ggml.add_bos_token", true).unwrap();
    w.add_metadata("nested", Array::Array(vec![Array::U64(vec![1, 2]), Array::Bool(vec![true])])).unwrap();
    w.add_metadata("big", u64::MAX).unwrap();
    w.add_f32_tensor("output_norm.weight", &[4], &[1.0, 2.0, 3.0, 4.0]).unwrap();
    w.add_tensor("blk.0.attn_q.weight", &[32, 2], GgmlType::Q4_1, vec![7u8; 40]).unwrap();
    w.add_tensor("token_embd.weight", &[32, 4], GgmlType::Q8_0, vec![5u8; 4 * 34]).unwrap();
    w.to_bytes().unwrap()
}

/// Byte-level GGUF encoder: writes exactly what it is told.
pub struct Raw(pub Vec<u8>);

impl Raw {
    /// Magic, version and the two counts.
    pub fn header(version: u32, n_tensors: u64, n_kv: u64) -> Self {
        let mut r = Raw(b"GGUF".to_vec());
        r.u32(version).u64(n_tensors).u64(n_kv);
        r
    }

    pub fn u32(&mut self, x: u32) -> &mut Self {
        self.0.extend_from_slice(&x.to_le_bytes());
        self
    }

    pub fn u64(&mut self, x: u64) -> &mut Self {
        self.0.extend_from_slice(&x.to_le_bytes());
        self
    }

    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }

    pub fn str(&mut self, s: &str) -> &mut Self {
        self.u64(s.len() as u64).bytes(s.as_bytes())
    }

    /// A `u32` metadata entry.
    pub fn kv_u32(&mut self, key: &str, v: u32) -> &mut Self {
        self.str(key).u32(4).u32(v)
    }

    /// A tensor info.
    pub fn tensor(&mut self, name: &str, dims: &[u64], type_id: u32, offset: u64) -> &mut Self {
        self.str(name).u32(dims.len() as u32);
        dims.iter().for_each(|&d| {
            self.u64(d);
        });
        self.u32(type_id).u64(offset)
    }

    /// Zero bytes up to the next multiple of `a`.
    pub fn pad(&mut self, a: usize) -> &mut Self {
        while !self.0.len().is_multiple_of(a) {
            self.0.push(0);
        }
        self
    }

    /// `n` bytes of tensor data.
    pub fn data(&mut self, n: usize) -> &mut Self {
        self.0.resize(self.0.len() + n, 0xAB);
        self
    }

    pub fn build(&self) -> Vec<u8> {
        self.0.clone()
    }
}

/// Deterministic xorshift64* generator (no dependency, same sequence everywhere).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}
