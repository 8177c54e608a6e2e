//! [`Value`]: the data a template reads, shaped as Go's would be (structs
//! with named fields, maps, slices, untyped nil), with Go's printing
//! (`fmt.Sprint`), truth and JSON encoding (`encoding/json`).

use std::collections::BTreeMap;
use std::fmt::Write;
use std::rc::Rc;

/// How a list, map or struct prints and encodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Repr {
    /// As Go prints it: `[a b]`, `map[k:v]`, `{a b}`.
    #[default]
    Go,
    /// Its `String()` is its JSON (Ollama's tool types).
    Json,
    /// Ollama's property type: prints as its one name or `[a b]`, encodes
    /// as a string when it holds one name.
    TypeNames,
}

/// A Go value.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Value {
    /// A missing map entry or a nil interface (prints `<no value>`).
    #[default]
    Nil,
    /// `bool`.
    Bool(bool),
    /// `int`.
    Int(i64),
    /// `float64` (JSON numbers are these, as Go decodes them).
    Float(f64),
    /// `string`.
    Str(Rc<str>),
    /// A slice.
    List(Rc<List>),
    /// A map with string keys (ranged and printed in key order).
    Map(Rc<Map>),
    /// A struct.
    Struct(Rc<Struct>),
}

/// A slice.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct List {
    /// Its elements.
    pub items: Vec<Value>,
    /// A nil slice: encodes as `null`.
    pub nil: bool,
    /// How it prints.
    pub repr: Repr,
}

/// A map.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Map {
    /// Its entries.
    pub entries: BTreeMap<String, Value>,
    /// How it prints.
    pub repr: Repr,
}

/// A struct: its Go type name (for messages and `toTypeScriptType`) and
/// fields in declaration order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Struct {
    /// `api.Message`, ...
    pub type_name: &'static str,
    /// The fields.
    pub fields: Vec<Field>,
    /// A pointer to the struct (prints with `&`).
    pub pointer: bool,
    /// How it prints.
    pub repr: Repr,
}

/// A struct field.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// Its Go name (`Role`).
    pub name: &'static str,
    /// Its JSON name (`role`); `None`: the Go name.
    pub json: Option<&'static str>,
    /// Left out of JSON when empty.
    pub omitempty: bool,
    /// Its value.
    pub value: Value,
}

impl Field {
    /// A field encoded under its Go name.
    pub fn new(name: &'static str, value: Value) -> Self {
        Field { name, json: None, omitempty: false, value }
    }

    /// A field with a JSON tag.
    pub fn tagged(name: &'static str, json: &'static str, omitempty: bool, value: Value) -> Self {
        Field { name, json: Some(json), omitempty, value }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Str(s.into())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Str(s.into())
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl From<i64> for Value {
    fn from(n: i64) -> Self {
        Value::Int(n)
    }
}

impl Value {
    /// A slice of `items`.
    pub fn list(items: Vec<Value>) -> Self {
        Value::List(Rc::new(List { items, nil: false, repr: Repr::Go }))
    }

    /// A nil slice.
    pub fn nil_list() -> Self {
        Value::List(Rc::new(List { items: Vec::new(), nil: true, repr: Repr::Go }))
    }

    /// A map of `entries`.
    pub fn map(entries: impl IntoIterator<Item = (String, Value)>) -> Self {
        Value::Map(Rc::new(Map { entries: entries.into_iter().collect(), repr: Repr::Go }))
    }

    /// A JSON value as Go's `encoding/json` decodes into `any`: objects are
    /// `map[string]any`, arrays `[]any`, numbers `float64`.
    pub fn from_json(v: &serde_json::Value) -> Self {
        match v {
            serde_json::Value::Null => Value::Nil,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap_or(0.0)),
            serde_json::Value::String(s) => Value::from(s.as_str()),
            serde_json::Value::Array(a) => Value::list(a.iter().map(Value::from_json).collect()),
            serde_json::Value::Object(o) => Value::map(o.iter().map(|(k, v)| (k.clone(), Value::from_json(v)))),
        }
    }

    /// This value with another print form (lists, maps and structs).
    pub fn with_repr(self, repr: Repr) -> Self {
        match self {
            Value::List(l) => Value::List(Rc::new(List { repr, ..(*l).clone() })),
            Value::Map(m) => Value::Map(Rc::new(Map { repr, ..(*m).clone() })),
            Value::Struct(s) => Value::Struct(Rc::new(Struct { repr, ..(*s).clone() })),
            other => other,
        }
    }

    /// Go's name of the value's type, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Nil => "<nil>",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Float(_) => "float64",
            Value::Str(_) => "string",
            Value::List(_) => "slice",
            Value::Map(_) => "map",
            Value::Struct(s) => s.type_name,
        }
    }

    /// Go templates' truth: false, 0, nil and empty strings, slices and
    /// maps are false; structs are true.
    pub fn truth(&self) -> bool {
        match self {
            Value::Nil => false,
            Value::Bool(b) => *b,
            Value::Int(n) => *n != 0,
            Value::Float(f) => *f != 0.0,
            Value::Str(s) => !s.is_empty(),
            Value::List(l) => !l.items.is_empty(),
            Value::Map(m) => !m.entries.is_empty(),
            Value::Struct(_) => true,
        }
    }

    /// What `{{ value }}` writes.
    pub fn print(&self) -> String {
        let mut out = String::new();
        match self {
            Value::Nil => out.push_str("<no value>"),
            v => v.write_go(&mut out),
        }
        out
    }

    /// `fmt.Sprint` of one operand (`%v`).
    pub(crate) fn write_go(&self, out: &mut String) {
        match self {
            Value::Nil => out.push_str("<nil>"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Int(n) => {
                let _ = write!(out, "{n}");
            }
            Value::Float(f) => out.push_str(&go_float_g(*f)),
            Value::Str(s) => out.push_str(s),
            Value::List(l) => match l.repr {
                Repr::Json => out.push_str(&self.json()),
                Repr::TypeNames if l.items.len() == 1 => l.items[0].write_go(out),
                Repr::TypeNames if l.items.is_empty() => {}
                _ => {
                    out.push('[');
                    for (i, v) in l.items.iter().enumerate() {
                        if i > 0 {
                            out.push(' ');
                        }
                        v.write_go(out);
                    }
                    out.push(']');
                }
            },
            Value::Map(m) => match m.repr {
                Repr::Json => out.push_str(&self.json()),
                _ => {
                    out.push_str("map[");
                    for (i, (k, v)) in m.entries.iter().enumerate() {
                        if i > 0 {
                            out.push(' ');
                        }
                        out.push_str(k);
                        out.push(':');
                        v.write_go(out);
                    }
                    out.push(']');
                }
            },
            Value::Struct(s) => match s.repr {
                Repr::Json => out.push_str(&self.json()),
                _ => {
                    if s.pointer {
                        out.push('&');
                    }
                    out.push('{');
                    for (i, f) in s.fields.iter().enumerate() {
                        if i > 0 {
                            out.push(' ');
                        }
                        f.value.write_go(out);
                    }
                    out.push('}');
                }
            },
        }
    }

    /// Go's `json.Marshal` (HTML characters escaped, map keys sorted,
    /// struct fields in order with their tags).
    pub fn json(&self) -> String {
        let mut out = String::new();
        self.write_json(&mut out);
        out
    }

    fn write_json(&self, out: &mut String) {
        match self {
            Value::Nil => out.push_str("null"),
            Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Value::Int(n) => {
                let _ = write!(out, "{n}");
            }
            Value::Float(f) => out.push_str(&go_json_float(*f)),
            Value::Str(s) => json_string(s, out),
            Value::List(l) if l.nil => out.push_str("null"),
            Value::List(l) if l.repr == Repr::TypeNames && l.items.len() == 1 => l.items[0].write_json(out),
            Value::List(l) => {
                out.push('[');
                for (i, v) in l.items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write_json(out);
                }
                out.push(']');
            }
            Value::Map(m) => {
                out.push('{');
                for (i, (k, v)) in m.entries.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    json_string(k, out);
                    out.push(':');
                    v.write_json(out);
                }
                out.push('}');
            }
            Value::Struct(s) => {
                out.push('{');
                let mut first = true;
                for f in &s.fields {
                    if f.omitempty && !f.value.truth() && !matches!(f.value, Value::Struct(_)) {
                        continue;
                    }
                    if !first {
                        out.push(',');
                    }
                    first = false;
                    json_string(f.json.unwrap_or(f.name), out);
                    out.push(':');
                    f.value.write_json(out);
                }
                out.push('}');
            }
        }
    }
}

/// A JSON string as Go writes it: `<`, `>`, `&`, U+2028 and U+2029 escaped.
fn json_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The shortest digits and decimal exponent of `f` (`1.5e3` → ("15", 3)).
fn shortest(f: f64) -> (String, i32) {
    let s = format!("{:e}", f.abs());
    let (mant, exp) = s.split_once('e').unwrap_or((&s, "0"));
    (mant.replace('.', ""), exp.parse().unwrap_or(0))
}

/// `%v` of a float64: `strconv.FormatFloat(f, 'g', -1, 64)` (exponent form
/// below 1e-4 and from 1e6: `1e+06`).
pub(crate) fn go_float_g(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let (digits, exp) = shortest(f);
    let sign = if f < 0.0 { "-" } else { "" };
    if !(-4..6).contains(&exp) {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let es = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{dot}e{es}{:02}", exp.abs());
    }
    format!("{sign}{}", place_point(&digits, exp))
}

/// Digits with the decimal point placed for exponent `exp`.
fn place_point(digits: &str, exp: i32) -> String {
    if exp < 0 {
        return format!("0.{}{digits}", "0".repeat((-exp - 1) as usize));
    }
    let int_len = exp as usize + 1;
    if digits.len() <= int_len {
        format!("{digits}{}", "0".repeat(int_len - digits.len()))
    } else {
        format!("{}.{}", &digits[..int_len], &digits[int_len..])
    }
}

/// A float64 in `encoding/json`: plain below 1e21 and from 1e-6, else
/// exponent form with at least one exponent digit (`1e-7`, `1e+21`).
fn go_json_float(f: f64) -> String {
    if !f.is_finite() {
        return "null".into();
    }
    if f == 0.0 {
        return "0".into();
    }
    let (digits, exp) = shortest(f);
    let sign = if f < 0.0 { "-" } else { "" };
    let abs = f.abs();
    if !(1e-6..1e21).contains(&abs) {
        let (first, rest) = digits.split_at(1);
        let dot = if rest.is_empty() { String::new() } else { format!(".{rest}") };
        let es = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{dot}e{es}{}", exp.abs());
    }
    format!("{sign}{}", place_point(&digits, exp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_print_as_go_does() {
        for (f, v, j) in [
            (3.0, "3", "3"),
            (0.5, "0.5", "0.5"),
            (100000.0, "100000", "100000"),
            (1e6, "1e+06", "1000000"),
            (123456789.0, "1.23456789e+08", "123456789"),
            (1e21, "1e+21", "1e+21"),
            (0.0001, "0.0001", "0.0001"),
            (0.00001, "1e-05", "0.00001"),
            (1e-7, "1e-07", "1e-7"),
            (-2.5, "-2.5", "-2.5"),
        ] {
            assert_eq!(go_float_g(f), v, "{f}");
            assert_eq!(go_json_float(f), j, "{f}");
        }
    }

    #[test]
    fn composites_print_and_encode() {
        let v = Value::from_json(&json!({"b": [1, "x", true], "a": {"c": null}, "h": "<a&b>"}));
        assert_eq!(v.print(), "map[a:map[c:<nil>] b:[1 x true] h:<a&b>]");
        assert_eq!(v.json(), r#"{"a":{"c":null},"b":[1,"x",true],"h":"\u003ca\u0026b\u003e"}"#);
        let s = Value::Struct(Rc::new(Struct {
            type_name: "t",
            fields: vec![
                Field::tagged("Name", "name", false, "f".into()),
                Field::tagged("Desc", "description", true, "".into()),
                Field::new("Calls", Value::nil_list()),
            ],
            pointer: true,
            repr: Repr::Go,
        }));
        assert_eq!(s.print(), "&{f  []}");
        assert_eq!(s.json(), r#"{"name":"f","Calls":null}"#);
        assert_eq!(s.clone().with_repr(Repr::Json).print(), s.json());
        let types = Value::list(vec!["string".into()]).with_repr(Repr::TypeNames);
        assert_eq!((types.print(), types.json()), ("string".into(), "\"string\"".into()));
        assert_eq!(Value::Nil.print(), "<no value>");
    }

    #[test]
    fn truth() {
        for v in [Value::Nil, 0.into(), "".into(), Value::list(vec![]), Value::map([]), false.into()] {
            assert!(!v.truth(), "{v:?}");
        }
        for v in [Value::Struct(Rc::default()), 1.into(), "x".into(), Value::Float(0.1)] {
            assert!(v.truth(), "{v:?}");
        }
    }
}
