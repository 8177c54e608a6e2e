//! The metadata map (file order preserved) and its typed getters.
//!
//! Getters come in two flavours: `get_*` fails with [`GgufError::MissingKey`]
//! when the key is absent, `opt_*` returns `Ok(None)`. Both fail with
//! [`GgufError::WrongType`] when the value has an unusable type. Integers
//! convert between widths whenever the value fits (writers disagree on
//! `u32`/`i32`/`u64` for counts), floats accept `f32` and `f64`.

use std::collections::HashMap;

use crate::error::{GgufError, Result};
use crate::value::{Array, Value};

/// Ordered key -> [`Value`] map with typed getters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
    index: HashMap<String, usize>,
}

fn wrong(key: &str, expected: &str, found: &Value) -> GgufError {
    GgufError::WrongType { key: key.to_string(), message: format!("expected {expected}, found {}", found.describe()) }
}

macro_rules! int_getters {
    ($($get:ident / $opt:ident -> $t:ty),* $(,)?) => {$(
        #[doc = concat!("The value as `", stringify!($t), "` (any integer type that fits); fails if absent.")]
        pub fn $get(&self, key: &str) -> Result<$t> {
            self.$opt(key)?.ok_or_else(|| GgufError::MissingKey { key: key.to_string() })
        }

        #[doc = concat!("The value as `", stringify!($t), "` (any integer type that fits); `None` if absent.")]
        pub fn $opt(&self, key: &str) -> Result<Option<$t>> {
            let Some(v) = self.get(key) else { return Ok(None) };
            v.as_integer()
                .and_then(|i| <$t>::try_from(i).ok())
                .map(Some)
                .ok_or_else(|| wrong(key, concat!("an integer that fits in ", stringify!($t)), v))
        }
    )*};
}

macro_rules! ref_getters {
    ($($get:ident / $opt:ident -> $t:ty, $expected:literal, $pat:pat => $out:expr),* $(,)?) => {$(
        #[doc = concat!("The value as ", $expected, "; fails if absent.")]
        pub fn $get(&self, key: &str) -> Result<$t> {
            self.$opt(key)?.ok_or_else(|| GgufError::MissingKey { key: key.to_string() })
        }

        #[doc = concat!("The value as ", $expected, "; `None` if absent.")]
        pub fn $opt(&self, key: &str) -> Result<Option<$t>> {
            match self.get(key) {
                None => Ok(None),
                Some($pat) => Ok(Some($out)),
                Some(v) => Err(wrong(key, $expected, v)),
            }
        }
    )*};
}

impl Metadata {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a key; fails on a duplicate (GGUF keys are unique).
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Result<()> {
        let key = key.into();
        if self.index.contains_key(&key) {
            return Err(GgufError::malformed(format!("duplicate metadata key '{key}'")));
        }
        self.index.insert(key.clone(), self.entries.len());
        self.entries.push((key, value.into()));
        Ok(())
    }

    /// The raw value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        let &i = self.index.get(key)?;
        self.entries.get(i).map(|(_, v)| v)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.index.contains_key(key)
    }

    /// Entries in file order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Keys in file order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|(k, _)| k.as_str())
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    int_getters! {
        get_u32 / opt_u32 -> u32,
        get_u64 / opt_u64 -> u64,
        get_i32 / opt_i32 -> i32,
        get_i64 / opt_i64 -> i64,
    }

    ref_getters! {
        get_f32 / opt_f32 -> f32, "a float", v @ (Value::F32(_) | Value::F64(_)) => as_f32(v),
        get_bool / opt_bool -> bool, "a bool", Value::Bool(b) => *b,
        get_str / opt_str -> &str, "a string", Value::String(s) => s.as_str(),
        get_array / opt_array -> &Array, "an array", Value::Array(a) => a,
        get_str_array / opt_str_array -> &[String], "an array of strings",
            Value::Array(Array::String(a)) => a.as_slice(),
        get_f32_array / opt_f32_array -> &[f32], "an array of f32",
            Value::Array(Array::F32(a)) => a.as_slice(),
        get_i32_array / opt_i32_array -> &[i32], "an array of i32",
            Value::Array(Array::I32(a)) => a.as_slice(),
    }

    /// An integer array of any element type (typically `u32` or `i32`) as
    /// `u32`s; fails if absent or if an element is negative or too large.
    pub fn get_u32_or_i32_array(&self, key: &str) -> Result<Vec<u32>> {
        self.opt_u32_or_i32_array(key)?.ok_or_else(|| GgufError::MissingKey { key: key.to_string() })
    }

    /// Like [`get_u32_or_i32_array`](Self::get_u32_or_i32_array); `None` if absent.
    pub fn opt_u32_or_i32_array(&self, key: &str) -> Result<Option<Vec<u32>>> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let expected = "an array of integers that fit in u32";
        let Value::Array(a) = v else {
            return Err(wrong(key, expected, v));
        };
        if let Array::U32(x) = a {
            return Ok(Some(x.clone()));
        }
        let ints = a.integers().ok_or_else(|| wrong(key, expected, v))?;
        let mut out = Vec::with_capacity(ints.len());
        for (i, x) in ints.into_iter().enumerate() {
            let y = u32::try_from(x).map_err(|_| GgufError::WrongType {
                key: key.to_string(),
                message: format!("element {i} is {x}, which does not fit in u32"),
            })?;
            out.push(y);
        }
        Ok(Some(out))
    }

    /// `general.architecture` (e.g. `"llama"`).
    pub fn arch(&self) -> Result<&str> {
        self.get_str("general.architecture")
    }

    /// `"{arch}.{suffix}"` as `u32`, e.g. `arch_u32("block_count")`.
    pub fn arch_u32(&self, suffix: &str) -> Result<u32> {
        self.get_u32(&format!("{}.{suffix}", self.arch()?))
    }

    /// `"{arch}.{suffix}"` as `u32`, `None` if absent.
    pub fn opt_arch_u32(&self, suffix: &str) -> Result<Option<u32>> {
        self.opt_u32(&format!("{}.{suffix}", self.arch()?))
    }

    /// `"{arch}.{suffix}"` as `f32`, e.g. `arch_f32("rope.freq_base")`.
    pub fn arch_f32(&self, suffix: &str) -> Result<f32> {
        self.get_f32(&format!("{}.{suffix}", self.arch()?))
    }

    /// `"{arch}.{suffix}"` as `f32`, `None` if absent.
    pub fn opt_arch_f32(&self, suffix: &str) -> Result<Option<f32>> {
        self.opt_f32(&format!("{}.{suffix}", self.arch()?))
    }
}

fn as_f32(v: &Value) -> f32 {
    match *v {
        Value::F32(x) => x,
        Value::F64(x) => x as f32,
        _ => f32::NAN,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Metadata {
        let mut m = Metadata::new();
        m.insert("general.architecture", "llama").unwrap();
        m.insert("llama.block_count", 30u32).unwrap();
        m.insert("llama.context_length", 8192u64).unwrap();
        m.insert("neg", -3i32).unwrap();
        m.insert("llama.rope.freq_base", 10000.0f32).unwrap();
        m.insert("eps", 1e-5f64).unwrap();
        m.insert("types", vec![1i32, 2, 3]).unwrap();
        m.insert("negs", vec![1i32, -2]).unwrap();
        m.insert("vocab", vec!["a", "b"]).unwrap();
        m
    }

    #[test]
    fn integers_convert_when_they_fit() {
        let m = sample();
        assert_eq!(m.get_u32("llama.block_count").unwrap(), 30);
        assert_eq!(m.get_u64("llama.block_count").unwrap(), 30);
        assert_eq!(m.get_u32("llama.context_length").unwrap(), 8192);
        assert_eq!(m.get_i64("neg").unwrap(), -3);
        let e = m.get_u32("neg").unwrap_err().to_string();
        assert!(e.contains("'neg'") && e.contains("i32 -3"), "{e}");
    }

    #[test]
    fn missing_and_wrong_types() {
        let mut m = sample();
        assert!(matches!(m.get_u32("nope"), Err(GgufError::MissingKey { .. })));
        assert_eq!(m.opt_u32("nope").unwrap(), None);
        let e = m.get_str("llama.block_count").unwrap_err().to_string();
        assert_eq!(e, "metadata key 'llama.block_count': expected a string, found u32 30");
        assert!(m.get_str_array("types").is_err());
        assert!(m.insert("neg", 1u8).is_err(), "duplicate key");
    }

    #[test]
    fn arrays_and_arch() {
        let m = sample();
        assert_eq!(m.get_i32_array("types").unwrap(), &[1, 2, 3]);
        assert_eq!(m.get_u32_or_i32_array("types").unwrap(), vec![1, 2, 3]);
        assert!(m.get_u32_or_i32_array("negs").unwrap_err().to_string().contains("element 1 is -2"));
        assert_eq!(m.get_str_array("vocab").unwrap(), &["a".to_string(), "b".to_string()]);
        assert_eq!(m.arch().unwrap(), "llama");
        assert_eq!(m.arch_u32("block_count").unwrap(), 30);
        assert_eq!(m.arch_f32("rope.freq_base").unwrap(), 10000.0);
        assert!((m.get_f32("eps").unwrap() - 1e-5).abs() < 1e-12);
        assert_eq!(m.opt_arch_u32("embedding_length").unwrap(), None);
        let keys: Vec<_> = m.keys().collect();
        assert_eq!(keys[0], "general.architecture");
        assert_eq!(keys.len(), 9);
    }
}
