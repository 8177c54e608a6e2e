//! The functions templates call: Go's built-ins (`eq`, `len`, `index`,
//! `slice`, `printf`, ...; `and`, `or` are in the interpreter, which
//! evaluates them lazily) and Ollama's (`json`, `currentDate`,
//! `yesterdayDate`, `toTypeScriptType`).

use std::fmt::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::value::{go_float_g, Value};

type Result<T> = std::result::Result<T, String>;

/// Calls built-in `name` with evaluated arguments.
pub(crate) fn call(name: &str, args: Vec<Value>) -> Result<Value> {
    let n = args.len();
    let want =
        |k: usize| if n == k { Ok(()) } else { Err(format!("wrong number of args for {name}: want {k} got {n}")) };
    Ok(match name {
        "not" => {
            want(1)?;
            Value::Bool(!args[0].truth())
        }
        "eq" => Value::Bool(eq(&args)?),
        "ne" => {
            want(2)?;
            Value::Bool(!eq(&args)?)
        }
        "lt" | "le" | "gt" | "ge" => {
            want(2)?;
            let ord = order(&args[0], &args[1])?;
            Value::Bool(match name {
                "lt" => ord.is_lt(),
                "le" => ord.is_le(),
                "gt" => ord.is_gt(),
                _ => ord.is_ge(),
            })
        }
        "len" => {
            want(1)?;
            Value::Int(match &args[0] {
                Value::Str(s) => s.len(),
                Value::List(l) => l.items.len(),
                Value::Map(m) => m.entries.len(),
                Value::Nil => return Err("len of nil pointer".into()),
                other => return Err(format!("len of type {}", other.type_name())),
            } as i64)
        }
        "index" => {
            if n == 0 {
                return Err("wrong number of args for index: want at least 1 got 0".into());
            }
            let mut it = args.into_iter();
            let mut v = it.next().unwrap_or_default();
            for i in it {
                v = index(&v, &i)?;
            }
            v
        }
        "slice" => {
            if !(1..=4).contains(&n) {
                return Err(format!("wrong number of args for slice: want 1 to 4 got {n}"));
            }
            slice(&args)?
        }
        "print" => Value::from(sprint(&args)),
        "println" => {
            let mut s = args.iter().map(Value::print_operand).collect::<Vec<_>>().join(" ");
            s.push('\n');
            Value::from(s)
        }
        "printf" => {
            let Some(Value::Str(f)) = args.first() else {
                return Err("printf: the first argument must be a format string".into());
            };
            Value::from(printf(f, &args[1..]))
        }
        "html" => Value::from(html(&sprint(&args))),
        "js" => Value::from(js(&sprint(&args))),
        "urlquery" => Value::from(urlquery(&sprint(&args))),
        "json" => {
            want(1)?;
            Value::from(args[0].json())
        }
        "currentDate" => Value::from(date(0)),
        "yesterdayDate" => Value::from(date(1)),
        "toTypeScriptType" => {
            want(1)?;
            Value::from(typescript(&args[0]))
        }
        other => return Err(format!("function \"{other}\" not defined")),
    })
}

impl Value {
    /// One operand of `print`/`println` (`<nil>` for nil, as `fmt` writes it).
    fn print_operand(&self) -> String {
        let mut s = String::new();
        self.write_go(&mut s);
        s
    }
}

/// `fmt.Sprint`: spaces between operands when neither is a string.
fn sprint(args: &[Value]) -> String {
    let mut out = String::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 && !matches!(a, Value::Str(_)) && !matches!(args[i - 1], Value::Str(_)) {
            out.push(' ');
        }
        a.write_go(&mut out);
    }
    out
}

fn eq(args: &[Value]) -> Result<bool> {
    let Some((a, rest)) = args.split_first() else { return Err("missing argument for comparison".into()) };
    if rest.is_empty() {
        return Err("missing argument for comparison".into());
    }
    for b in rest {
        let same = match (a, b) {
            (Value::Nil, Value::Nil) => true,
            (Value::Nil, _) | (_, Value::Nil) => false,
            (Value::Bool(x), Value::Bool(y)) => x == y,
            (Value::Int(x), Value::Int(y)) => x == y,
            (Value::Float(x), Value::Float(y)) => x == y,
            (Value::Str(x), Value::Str(y)) => x == y,
            (Value::Bool(_) | Value::Int(_) | Value::Float(_) | Value::Str(_), _)
            | (_, Value::Bool(_) | Value::Int(_) | Value::Float(_) | Value::Str(_)) => {
                return Err("incompatible types for comparison".into())
            }
            _ => return Err(format!("non-comparable types {} and {}", a.type_name(), b.type_name())),
        };
        if same {
            return Ok(true);
        }
    }
    Ok(false)
}

fn order(a: &Value, b: &Value) -> Result<std::cmp::Ordering> {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => Ok(x.cmp(y)),
        (Value::Float(x), Value::Float(y)) => x.partial_cmp(y).ok_or_else(|| "NaN in comparison".to_string()),
        (Value::Str(x), Value::Str(y)) => Ok(x.cmp(y)),
        (Value::Int(_) | Value::Float(_) | Value::Str(_), Value::Int(_) | Value::Float(_) | Value::Str(_)) => {
            Err("incompatible types for comparison".into())
        }
        _ => Err("invalid type for comparison".into()),
    }
}

fn int_arg(v: &Value, what: &str) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        other => Err(format!("cannot {what} with type {}", other.type_name())),
    }
}

fn index(v: &Value, i: &Value) -> Result<Value> {
    match v {
        Value::List(l) => {
            let k = int_arg(i, "index slice")?;
            usize::try_from(k)
                .ok()
                .and_then(|k| l.items.get(k).cloned())
                .ok_or_else(|| format!("index out of range: {k}"))
        }
        Value::Str(s) => {
            let k = int_arg(i, "index string")?;
            usize::try_from(k)
                .ok()
                .and_then(|k| s.as_bytes().get(k))
                .map(|&b| Value::Int(b as i64))
                .ok_or_else(|| format!("index out of range: {k}"))
        }
        Value::Map(m) => match i {
            Value::Str(k) => Ok(m.entries.get(&**k).cloned().unwrap_or_default()),
            other => Err(format!("value has type {}; should be string", other.type_name())),
        },
        Value::Nil => Err("index of untyped nil".into()),
        other => Err(format!("can't index item of type {}", other.type_name())),
    }
}

fn slice(args: &[Value]) -> Result<Value> {
    let idx: Vec<i64> = args[1..].iter().map(|a| int_arg(a, "slice")).collect::<Result<_>>()?;
    let len = match &args[0] {
        Value::Str(s) if idx.len() < 3 => s.len(),
        Value::Str(_) => return Err("cannot 3-index slice a string".into()),
        Value::List(l) => l.items.len(),
        Value::Nil => return Err("slice of untyped nil".into()),
        other => return Err(format!("can't slice item of type {}", other.type_name())),
    };
    let lo = *idx.first().unwrap_or(&0);
    let hi = *idx.get(1).unwrap_or(&(len as i64));
    if lo < 0 || hi < lo || hi > len as i64 || idx.get(2).is_some_and(|&m| m < hi || m > len as i64) {
        return Err(format!("index out of range: {lo}:{hi} of {len}"));
    }
    let (lo, hi) = (lo as usize, hi as usize);
    Ok(match &args[0] {
        Value::Str(s) => {
            let sub = s.get(lo..hi).ok_or_else(|| "the bounds split a character".to_string())?;
            Value::from(sub)
        }
        Value::List(l) => Value::list(l.items[lo..hi].to_vec()).with_repr(l.repr),
        _ => Value::Nil,
    })
}

/// `fmt.Sprintf` for the verbs templates use (`%s %v %d %q %f %g %e %t %x
/// %X %c %%`, flags `-+0 `, width, precision); a mismatch writes Go's
/// `%!verb(type=value)`.
fn printf(f: &str, args: &[Value]) -> String {
    let mut out = String::new();
    let mut next = 0;
    let mut chars = f.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let (mut minus, mut plus, mut zero) = (false, false, false);
        while let Some(&fl) = chars.peek() {
            match fl {
                '-' => minus = true,
                '+' => plus = true,
                '0' => zero = true,
                ' ' | '#' => {}
                _ => break,
            }
            chars.next();
        }
        let num = |chars: &mut std::iter::Peekable<std::str::Chars>| {
            let mut n: Option<usize> = None;
            while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
                n = Some(n.unwrap_or(0).saturating_mul(10).saturating_add(d as usize).min(1 << 16));
                chars.next();
            }
            n
        };
        let width = num(&mut chars);
        let prec = if chars.peek() == Some(&'.') {
            chars.next();
            Some(num(&mut chars).unwrap_or(0))
        } else {
            None
        };
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.get(next) else {
            let _ = write!(out, "%!{verb}(MISSING)");
            continue;
        };
        next += 1;
        let body = match format_one(verb, arg, prec, plus) {
            Some(s) => s,
            None if *arg == Value::Nil => format!("%!{verb}(<nil>)"),
            None => format!("%!{verb}({}={})", arg.type_name(), arg.print_operand()),
        };
        let pad = width.unwrap_or(0).saturating_sub(body.chars().count());
        if minus {
            out.push_str(&body);
            out.extend(std::iter::repeat_n(' ', pad));
        } else if zero && matches!(arg, Value::Int(_) | Value::Float(_)) {
            let (sign, digits) = body.split_at(usize::from(body.starts_with(['-', '+'])));
            out.push_str(sign);
            out.extend(std::iter::repeat_n('0', pad));
            out.push_str(digits);
        } else {
            out.extend(std::iter::repeat_n(' ', pad));
            out.push_str(&body);
        }
    }
    if next < args.len() {
        out.push_str("%!(EXTRA ");
        let extra: Vec<String> =
            args[next..].iter().map(|a| format!("{}={}", a.type_name(), a.print_operand())).collect();
        out.push_str(&extra.join(", "));
        out.push(')');
    }
    out
}

fn format_one(verb: char, arg: &Value, prec: Option<usize>, plus: bool) -> Option<String> {
    let sign = |s: String, neg: bool| if plus && !neg { format!("+{s}") } else { s };
    Some(match (verb, arg) {
        ('v', _) => arg.print_operand(),
        ('s', Value::Str(s)) => match prec {
            Some(p) => s.chars().take(p).collect(),
            None => s.to_string(),
        },
        ('s', Value::List(_) | Value::Map(_) | Value::Struct(_)) => arg.print_operand(),
        ('q', Value::Str(s)) => serde_json::to_string(&**s).unwrap_or_default(),
        ('d', Value::Int(i)) => sign(i.to_string(), *i < 0),
        ('x', Value::Int(i)) => format!("{i:x}"),
        ('X', Value::Int(i)) => format!("{i:X}"),
        ('x', Value::Str(s)) => s.bytes().map(|b| format!("{b:02x}")).collect(),
        ('c', Value::Int(i)) => char::from_u32(u32::try_from(*i).ok()?)?.to_string(),
        ('t', Value::Bool(b)) => b.to_string(),
        ('f' | 'F', Value::Float(f)) => sign(format!("{:.*}", prec.unwrap_or(6), f), *f < 0.0),
        ('e', Value::Float(f)) => {
            let s = format!("{:.*e}", prec.unwrap_or(6), f);
            let (m, e) = s.split_once('e')?;
            let e: i32 = e.parse().ok()?;
            sign(format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs()), *f < 0.0)
        }
        ('g', Value::Float(f)) if prec.is_none() => sign(go_float_g(*f), *f < 0.0),
        _ => return None,
    })
}

/// `html`: Go's `HTMLEscapeString`.
fn html(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '\'' => out.push_str("&#39;"),
            '"' => out.push_str("&#34;"),
            '\0' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// `js`: Go's `JSEscapeString`.
fn js(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '<' | '>' | '&' | '=' => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04X}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// `urlquery`: Go's `QueryEscape`.
fn urlquery(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            b' ' => out.push('+'),
            b => {
                let _ = write!(out, "%{b:02X}");
            }
        }
    }
    out
}

/// Today (UTC) less `days_back` days, as `YYYY-MM-DD`.
fn date(days_back: i64) -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let (y, m, d) = civil(secs.div_euclid(86_400) - days_back);
    format!("{y:04}-{m:02}-{d:02}")
}

/// The calendar date of a day number (days since 1970-01-01).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// Ollama's `toTypeScriptType` of a tool property; `any` for anything else.
fn typescript(v: &Value) -> String {
    let Value::Struct(s) = v else { return "any".into() };
    if s.type_name != "api.ToolProperty" {
        return "any".into();
    }
    let get = |name: &str| s.fields.iter().find(|f| f.name == name).map(|f| &f.value);
    if let Some(Value::List(any_of)) = get("AnyOf") {
        if !any_of.items.is_empty() {
            return any_of.items.iter().map(typescript).collect::<Vec<_>>().join(" | ");
        }
    }
    let types: Vec<&str> = match get("Type") {
        Some(Value::List(l)) => l
            .items
            .iter()
            .filter_map(|t| match t {
                Value::Str(s) => Some(&**s),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    };
    if types.is_empty() {
        return "any".into();
    }
    types
        .iter()
        .map(|t| match *t {
            "string" => "string",
            "number" | "integer" => "number",
            "boolean" => "boolean",
            "array" => "any[]",
            "object" => "Record<string, any>",
            "null" => "null",
            _ => "any",
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::from(v)
    }

    #[test]
    fn comparisons() {
        assert_eq!(call("eq", vec![s("a"), s("b"), s("a")]).unwrap(), Value::Bool(true));
        assert_eq!(call("eq", vec![Value::Nil, s("a")]).unwrap(), Value::Bool(false));
        assert!(call("eq", vec![Value::Int(1), Value::Float(1.0)]).unwrap_err().contains("incompatible"));
        assert!(call("eq", vec![Value::list(vec![]), Value::list(vec![])]).unwrap_err().contains("non-comparable"));
        assert_eq!(call("lt", vec![Value::Int(1), Value::Int(2)]).unwrap(), Value::Bool(true));
        assert_eq!(call("ge", vec![s("b"), s("a")]).unwrap(), Value::Bool(true));
        assert!(call("lt", vec![Value::Bool(true), Value::Bool(false)]).is_err());
        assert!(call("ne", vec![s("a")]).is_err());
    }

    #[test]
    fn collections() {
        let l = Value::list(vec![s("a"), s("b"), s("c")]);
        assert_eq!(call("len", vec![l.clone()]).unwrap(), Value::Int(3));
        assert_eq!(call("index", vec![l.clone(), Value::Int(1)]).unwrap(), s("b"));
        assert!(call("index", vec![l.clone(), Value::Int(3)]).unwrap_err().contains("out of range"));
        assert_eq!(call("slice", vec![l.clone(), Value::Int(1)]).unwrap(), Value::list(vec![s("b"), s("c")]));
        assert!(call("slice", vec![l, Value::Int(2), Value::Int(1)]).is_err());
        assert_eq!(call("slice", vec![s("héllo"), Value::Int(0), Value::Int(1)]).unwrap(), s("h"));
        assert!(call("slice", vec![s("héllo"), Value::Int(0), Value::Int(2)]).is_err());
        let m = Value::map([("k".to_string(), s("v"))]);
        assert_eq!(call("index", vec![m.clone(), s("k")]).unwrap(), s("v"));
        assert_eq!(call("index", vec![m, s("missing")]).unwrap(), Value::Nil);
        assert!(call("len", vec![Value::Int(3)]).is_err());
    }

    #[test]
    fn printing() {
        assert_eq!(call("print", vec![s("a"), Value::Int(1), Value::Int(2), s("b")]).unwrap(), s("a1 2b"));
        assert_eq!(call("println", vec![s("a"), Value::Int(1)]).unwrap(), s("a 1\n"));
        let p = |f: &str, a: Vec<Value>| call("printf", [vec![s(f)], a].concat()).unwrap();
        assert_eq!(p("%s\n\n%s", vec![s("x"), s("y")]), s("x\n\ny"));
        assert_eq!(
            p(
                "%d|%5d|%-3d|%03d|%q|%v|%%",
                vec![Value::Int(7), Value::Int(42), Value::Int(1), Value::Int(5), s("a\"b"), Value::Float(0.5)]
            ),
            s("7|   42|1  |005|\"a\\\"b\"|0.5|%")
        );
        assert_eq!(p("%.2f %t %x", vec![Value::Float(1.23456), Value::Bool(true), Value::Int(255)]), s("1.23 true ff"));
        assert_eq!(p("%d %s", vec![s("x")]), s("%!d(string=x) %!s(MISSING)"));
        assert_eq!(p("%s", vec![s("a"), Value::Int(1)]), s("a%!(EXTRA int=1)"));
        assert_eq!(call("html", vec![s("<a href='x'>&</a>")]).unwrap(), s("&lt;a href=&#39;x&#39;&gt;&amp;&lt;/a&gt;"));
        assert_eq!(call("urlquery", vec![s("a b&c")]).unwrap(), s("a+b%26c"));
        assert_eq!(call("js", vec![s("it's <b>")]).unwrap(), s("it\\'s \\u003Cb\\u003E"));
    }

    #[test]
    fn dates() {
        assert_eq!(civil(0), (1970, 1, 1));
        assert_eq!(civil(19_783), (2024, 3, 1));
        assert_eq!(civil(-1), (1969, 12, 31));
        let today = call("currentDate", vec![]).unwrap().print();
        assert_eq!(today.len(), 10);
        assert!(call("yesterdayDate", vec![]).unwrap().print() < today);
    }
}
