//! Metadata values: scalars, strings and compactly stored typed arrays.

use std::fmt;

/// The type tag of a metadata value, as numbered in the GGUF format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ValueType {
    /// `u8` (id 0).
    U8,
    /// `i8` (id 1).
    I8,
    /// `u16` (id 2).
    U16,
    /// `i16` (id 3).
    I16,
    /// `u32` (id 4).
    U32,
    /// `i32` (id 5).
    I32,
    /// `f32` (id 6).
    F32,
    /// `bool`, one byte (id 7).
    Bool,
    /// UTF-8 string with a `u64` length (id 8).
    String,
    /// Typed array (id 9).
    Array,
    /// `u64` (id 10).
    U64,
    /// `i64` (id 11).
    I64,
    /// `f64` (id 12).
    F64,
}

impl ValueType {
    /// Maps the numeric id stored in the file; `None` for unknown ids.
    pub fn from_id(id: u32) -> Option<Self> {
        use ValueType::*;
        const ALL: [ValueType; 13] = [U8, I8, U16, I16, U32, I32, F32, Bool, String, Array, U64, I64, F64];
        ALL.get(usize::try_from(id).ok()?).copied()
    }

    /// The numeric id stored in the file.
    pub fn id(self) -> u32 {
        self as u32
    }

    /// Bytes per element for fixed-size types; `None` for strings and arrays.
    pub fn fixed_size(self) -> Option<usize> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    /// The smallest number of bytes one encoded element can take.
    pub(crate) fn min_encoded_size(self) -> usize {
        match self {
            ValueType::String => 8,
            ValueType::Array => 12,
            other => other.fixed_size().unwrap_or(1),
        }
    }

    /// Lower-case name for messages (`u32`, `string`, `array`, ...).
    pub fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // the variants are the GGUF value types, named as such
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(String),
    Array(Array),
    U64(u64),
    I64(i64),
    F64(f64),
}

/// A metadata array, stored by element type (a 150k-entry vocabulary is one
/// `Vec<String>`, not 150k boxed values). Arrays may nest.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)] // the variants are the GGUF element types, named as such
pub enum Array {
    U8(Vec<u8>),
    I8(Vec<i8>),
    U16(Vec<u16>),
    I16(Vec<i16>),
    U32(Vec<u32>),
    I32(Vec<i32>),
    F32(Vec<f32>),
    Bool(Vec<bool>),
    String(Vec<String>),
    Array(Vec<Array>),
    U64(Vec<u64>),
    I64(Vec<i64>),
    F64(Vec<f64>),
}

impl Value {
    /// The type tag of this value.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// Any integer value, widened to `i128` (no integer type loses anything).
    pub fn as_integer(&self) -> Option<i128> {
        Some(match *self {
            Value::U8(v) => v.into(),
            Value::I8(v) => v.into(),
            Value::U16(v) => v.into(),
            Value::I16(v) => v.into(),
            Value::U32(v) => v.into(),
            Value::I32(v) => v.into(),
            Value::U64(v) => v.into(),
            Value::I64(v) => v.into(),
            _ => return None,
        })
    }

    /// Short description for error messages: `"string"`, `"i32 -5"`, `"array of 3 u32"`.
    pub(crate) fn describe(&self) -> String {
        match self {
            Value::String(_) => "a string".to_string(),
            Value::Array(a) => format!("an array of {} {}", a.len(), a.elem_type().name()),
            other => format!("{} {}", other.value_type().name(), other.preview(1, 40)),
        }
    }

    /// Renders the value with arrays cut to `max_items` elements and strings
    /// to `max_chars` characters (for dumps and logs).
    pub fn preview(&self, max_items: usize, max_chars: usize) -> String {
        let mut out = String::new();
        write_value(&mut out, self, max_items, max_chars);
        out
    }
}

impl Array {
    /// The element type.
    pub fn elem_type(&self) -> ValueType {
        match self {
            Array::U8(_) => ValueType::U8,
            Array::I8(_) => ValueType::I8,
            Array::U16(_) => ValueType::U16,
            Array::I16(_) => ValueType::I16,
            Array::U32(_) => ValueType::U32,
            Array::I32(_) => ValueType::I32,
            Array::F32(_) => ValueType::F32,
            Array::Bool(_) => ValueType::Bool,
            Array::String(_) => ValueType::String,
            Array::Array(_) => ValueType::Array,
            Array::U64(_) => ValueType::U64,
            Array::I64(_) => ValueType::I64,
            Array::F64(_) => ValueType::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::Array(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` as a [`Value`] (copies; for generic code and display).
    pub fn get(&self, i: usize) -> Option<Value> {
        Some(match self {
            Array::U8(v) => Value::U8(*v.get(i)?),
            Array::I8(v) => Value::I8(*v.get(i)?),
            Array::U16(v) => Value::U16(*v.get(i)?),
            Array::I16(v) => Value::I16(*v.get(i)?),
            Array::U32(v) => Value::U32(*v.get(i)?),
            Array::I32(v) => Value::I32(*v.get(i)?),
            Array::F32(v) => Value::F32(*v.get(i)?),
            Array::Bool(v) => Value::Bool(*v.get(i)?),
            Array::String(v) => Value::String(v.get(i)?.clone()),
            Array::Array(v) => Value::Array(v.get(i)?.clone()),
            Array::U64(v) => Value::U64(*v.get(i)?),
            Array::I64(v) => Value::I64(*v.get(i)?),
            Array::F64(v) => Value::F64(*v.get(i)?),
        })
    }

    /// All elements as integers, if this is an integer array.
    pub fn integers(&self) -> Option<Vec<i128>> {
        fn w<T: Copy + Into<i128>>(v: &[T]) -> Vec<i128> {
            v.iter().map(|&x| x.into()).collect()
        }
        Some(match self {
            Array::U8(v) => w(v),
            Array::I8(v) => w(v),
            Array::U16(v) => w(v),
            Array::I16(v) => w(v),
            Array::U32(v) => w(v),
            Array::I32(v) => w(v),
            Array::U64(v) => w(v),
            Array::I64(v) => w(v),
            _ => return None,
        })
    }
}

fn write_value(out: &mut String, v: &Value, max_items: usize, max_chars: usize) {
    use fmt::Write;
    match v {
        Value::String(s) => write_str(out, s, max_chars),
        Value::Array(a) => write_array(out, a, max_items, max_chars),
        Value::U8(x) => drop(write!(out, "{x}")),
        Value::I8(x) => drop(write!(out, "{x}")),
        Value::U16(x) => drop(write!(out, "{x}")),
        Value::I16(x) => drop(write!(out, "{x}")),
        Value::U32(x) => drop(write!(out, "{x}")),
        Value::I32(x) => drop(write!(out, "{x}")),
        Value::F32(x) => drop(write!(out, "{x}")),
        Value::Bool(x) => drop(write!(out, "{x}")),
        Value::U64(x) => drop(write!(out, "{x}")),
        Value::I64(x) => drop(write!(out, "{x}")),
        Value::F64(x) => drop(write!(out, "{x}")),
    }
}

fn write_str(out: &mut String, s: &str, max_chars: usize) {
    let n = s.chars().count();
    let shown: String = s.chars().take(max_chars).collect();
    out.push_str(&format!("{shown:?}"));
    if n > max_chars {
        out.push_str(&format!("... ({n} chars)"));
    }
}

fn write_array(out: &mut String, a: &Array, max_items: usize, max_chars: usize) {
    out.push('[');
    let shown = a.len().min(max_items);
    for i in 0..shown {
        if i > 0 {
            out.push_str(", ");
        }
        if let Some(v) = a.get(i) {
            write_value(out, &v, max_items, max_chars);
        }
    }
    if a.len() > shown {
        out.push_str(&format!(", ... ({} {})", a.len(), a.elem_type().name()));
    }
    out.push(']');
}

impl fmt::Display for Value {
    /// Full rendering (no truncation); see [`Value::preview`] for a bounded one.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.preview(usize::MAX, usize::MAX))
    }
}

macro_rules! from_impls {
    ($($t:ty => $v:ident / $a:ident),* $(,)?) => {$(
        impl From<$t> for Value {
            fn from(x: $t) -> Self { Value::$v(x) }
        }
        impl From<Vec<$t>> for Array {
            fn from(x: Vec<$t>) -> Self { Array::$a(x) }
        }
        impl From<Vec<$t>> for Value {
            fn from(x: Vec<$t>) -> Self { Value::Array(Array::$a(x)) }
        }
    )*};
}

from_impls! {
    u8 => U8 / U8, i8 => I8 / I8, u16 => U16 / U16, i16 => I16 / I16,
    u32 => U32 / U32, i32 => I32 / I32, f32 => F32 / F32, bool => Bool / Bool,
    String => String / String, u64 => U64 / U64, i64 => I64 / I64, f64 => F64 / F64,
}

impl From<&str> for Value {
    fn from(x: &str) -> Self {
        Value::String(x.to_string())
    }
}

impl From<Vec<&str>> for Value {
    fn from(x: Vec<&str>) -> Self {
        Value::Array(Array::String(x.into_iter().map(str::to_string).collect()))
    }
}

impl From<Array> for Value {
    fn from(x: Array) -> Self {
        Value::Array(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_type_ids_round_trip() {
        for id in 0..20 {
            match ValueType::from_id(id) {
                Some(t) => assert_eq!(t.id(), id),
                None => assert!(id > 12),
            }
        }
    }

    #[test]
    fn preview_truncates() {
        let v = Value::from((0..100u32).collect::<Vec<_>>());
        assert_eq!(v.preview(3, 10), "[0, 1, 2, ... (100 u32)]");
        let s = Value::from("abcdefgh");
        assert_eq!(s.preview(3, 3), "\"abc\"... (8 chars)");
        assert_eq!(Value::from(vec!["a", "b"]).to_string(), "[\"a\", \"b\"]");
    }

    #[test]
    fn integers_widen() {
        assert_eq!(Value::I32(-5).as_integer(), Some(-5));
        assert_eq!(Value::U64(u64::MAX).as_integer(), Some(u64::MAX as i128));
        assert_eq!(Value::F32(1.0).as_integer(), None);
    }
}
