//! Splits a template into text and actions, and an action into tokens.
//!
//! Trim markers (`{{- ` and ` -}}`: the dash next to the delimiter, then
//! a space, tab, carriage return or newline) remove the white space on that
//! side of the action from the neighbouring text; comments (`{{/* ... */}}`)
//! vanish, trimming as actions do.

use crate::Error;

/// A piece of the template.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Segment {
    /// Text written as is.
    Text(String),
    /// The tokens of one `{{ ... }}`, and where it starts.
    Action(Vec<Token>, usize),
}

/// A token inside an action, with its byte offset and whether white space
/// comes right before it (a field chain `$x.A` has none).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) pos: usize,
    pub(crate) spaced: bool,
}

/// Token kinds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Tok {
    /// `.Name` (the name only).
    Field(String),
    /// `.` alone.
    Dot,
    /// `$` or `$name` (with the `$`).
    Var(String),
    /// A function name or a keyword.
    Ident(String),
    /// A string, raw string or character literal (its value).
    Str(String),
    /// An integer constant.
    Int(i64),
    /// A floating-point constant.
    Float(f64),
    /// `(`
    Open,
    /// `)`
    Close,
    /// `|`
    Pipe,
    /// `:=`
    Declare,
    /// `=`
    Assign,
    /// `,`
    Comma,
}

const SPACE: [char; 4] = [' ', '\t', '\r', '\n'];

/// Splits `src` into segments.
pub(crate) fn segments(src: &str) -> Result<Vec<Segment>, Error> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut trim_next = false;
    while i < src.len() {
        let Some(open) = src[i..].find("{{").map(|o| i + o) else {
            push_text(&mut out, &src[i..], trim_next, false);
            break;
        };
        let after = &src[open + 2..];
        let trim_left = after.starts_with('-') && after[1..].starts_with(SPACE);
        push_text(&mut out, &src[i..open], trim_next, trim_left);
        let mut start = open + 2 + if trim_left { 2 } else { 0 };
        start += src[start..].len() - src[start..].trim_start_matches(SPACE).len();
        if src[start..].starts_with("/*") {
            let end = src[start..].find("*/").ok_or_else(|| Error::parse(src, open, "unclosed comment"))? + start + 2;
            let rest = &src[end..];
            let (trim, close) = if rest.starts_with(" -}}") || rest.trim_start_matches(SPACE).starts_with("-}}") {
                let spaces = rest.len() - rest.trim_start_matches(SPACE).len();
                (spaces > 0, end + spaces + 3)
            } else if rest.starts_with("}}") {
                (false, end + 2)
            } else {
                return Err(Error::parse(src, end, "comment ends before closing delimiter"));
            };
            trim_next = trim;
            i = close;
            continue;
        }
        let (tokens, close, trim_right) = action(src, start, open)?;
        out.push(Segment::Action(tokens, open));
        trim_next = trim_right;
        i = close;
    }
    Ok(out)
}

fn push_text(out: &mut Vec<Segment>, text: &str, trim_start: bool, trim_end: bool) {
    let mut t = text;
    if trim_start {
        t = t.trim_start_matches(SPACE);
    }
    if trim_end {
        t = t.trim_end_matches(SPACE);
    }
    if !t.is_empty() {
        out.push(Segment::Text(t.to_string()));
    }
}

/// Lexes one action from `start` (after `{{` and its trim marker) to its
/// `}}`: the tokens, the offset after `}}`, and whether it trims the text
/// after it.
fn action(src: &str, start: usize, open: usize) -> Result<(Vec<Token>, usize, bool), Error> {
    let b = src.as_bytes();
    let mut tokens = Vec::new();
    let mut i = start;
    let mut spaced = true;
    loop {
        let Some(&c) = b.get(i) else { return Err(Error::parse(src, open, "unclosed action")) };
        let rest = &src[i..];
        if SPACE.contains(&(c as char)) {
            if rest.trim_start_matches(SPACE).starts_with("-}}") {
                let end = i + (rest.len() - rest.trim_start_matches(SPACE).len()) + 3;
                return Ok((tokens, end, true));
            }
            i += 1;
            spaced = true;
            continue;
        }
        if rest.starts_with("}}") {
            return Ok((tokens, i + 2, false));
        }
        let (tok, len) = token(src, i)?;
        tokens.push(Token { tok, pos: i, spaced });
        spaced = false;
        i += len;
    }
}

fn is_ident(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

/// One token at `i`: the token and its length in bytes.
fn token(src: &str, i: usize) -> Result<(Tok, usize), Error> {
    let rest = &src[i..];
    let mut chars = rest.chars();
    let c = chars.next().unwrap_or(' ');
    let next = chars.next();
    let word = |from: usize| rest[from..].find(|c: char| !is_ident(c)).map_or(rest.len(), |n| n + from);
    Ok(match c {
        '(' => (Tok::Open, 1),
        ')' => (Tok::Close, 1),
        '|' => (Tok::Pipe, 1),
        ',' => (Tok::Comma, 1),
        '=' => (Tok::Assign, 1),
        ':' if next == Some('=') => (Tok::Declare, 2),
        '"' | '`' | '\'' => quoted(src, i)?,
        '.' if next.is_some_and(|n| n.is_ascii_digit()) => number(src, i)?,
        '.' if next.is_some_and(is_ident) => {
            let end = word(1);
            (Tok::Field(rest[1..end].to_string()), end)
        }
        '.' => (Tok::Dot, 1),
        '$' => {
            let end = word(1);
            (Tok::Var(rest[..end].to_string()), end)
        }
        '0'..='9' | '-' | '+' => number(src, i)?,
        c if is_ident(c) => {
            let end = word(0);
            (Tok::Ident(rest[..end].to_string()), end)
        }
        other => return Err(Error::parse(src, i, &format!("unexpected {other:?} in action"))),
    })
}

fn number(src: &str, i: usize) -> Result<(Tok, usize), Error> {
    let rest = &src[i..];
    let end = rest
        .char_indices()
        .skip(1)
        .find(|&(j, c)| {
            let exp_sign = (c == '-' || c == '+') && matches!(rest.as_bytes()[j - 1], b'e' | b'E' | b'p' | b'P');
            !(c.is_ascii_alphanumeric() || c == '.' || c == '_' || exp_sign)
        })
        .map_or(rest.len(), |(j, _)| j);
    let text = &rest[..end];
    let bad = || Error::parse(src, i, &format!("bad number syntax: {text:?}"));
    let (neg, digits) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let clean = digits.replace('_', "");
    let lower = clean.to_ascii_lowercase();
    let int = if let Some(h) = lower.strip_prefix("0x") {
        i64::from_str_radix(h, 16).ok()
    } else if let Some(o) = lower.strip_prefix("0o") {
        i64::from_str_radix(o, 8).ok()
    } else if let Some(bin) = lower.strip_prefix("0b") {
        i64::from_str_radix(bin, 2).ok()
    } else if lower.len() > 1 && lower.starts_with('0') && lower.bytes().all(|c| c.is_ascii_digit()) {
        i64::from_str_radix(&lower[1..], 8).ok()
    } else if lower.bytes().all(|c| c.is_ascii_digit()) && !lower.is_empty() {
        lower.parse::<i64>().ok()
    } else {
        None
    };
    if let Some(n) = int {
        return Ok((Tok::Int(if neg { -n } else { n }), end));
    }
    if lower.starts_with("0x") || lower.is_empty() {
        return Err(bad());
    }
    let f: f64 = lower.parse().map_err(|_| bad())?;
    Ok((Tok::Float(if neg { -f } else { f }), end))
}

/// A `"..."` string (Go escapes), a `` `raw` `` string, or a `'c'` character
/// (its value as a string: kiln passes characters as text).
fn quoted(src: &str, i: usize) -> Result<(Tok, usize), Error> {
    let rest = &src[i..];
    let q = rest.as_bytes()[0];
    if q == b'`' {
        let end = rest[1..].find('`').ok_or_else(|| Error::parse(src, i, "unterminated raw quoted string"))?;
        return Ok((Tok::Str(rest[1..1 + end].to_string()), end + 2));
    }
    let mut out = String::new();
    let mut it = rest.char_indices().skip(1);
    while let Some((j, c)) = it.next() {
        match c {
            '\n' => break,
            c if c as u32 == q as u32 => {
                if q == b'\'' {
                    let mut cs = out.chars();
                    if cs.next().is_none() || cs.next().is_some() {
                        return Err(Error::parse(src, i, "malformed character constant"));
                    }
                    return Ok((Tok::Int(out.chars().next().map_or(0, |c| c as i64)), j + 1));
                }
                return Ok((Tok::Str(out), j + 1));
            }
            '\\' => {
                let Some((_, e)) = it.next() else { break };
                match e {
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'r' => out.push('\r'),
                    'a' => out.push('\u{7}'),
                    'b' => out.push('\u{8}'),
                    'f' => out.push('\u{c}'),
                    'v' => out.push('\u{b}'),
                    '\\' | '"' | '\'' => out.push(e),
                    'x' | 'u' | 'U' => {
                        let n = match e {
                            'x' => 2,
                            'u' => 4,
                            _ => 8,
                        };
                        let hex: String = (0..n).filter_map(|_| it.next().map(|(_, h)| h)).collect();
                        let ch = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32);
                        out.push(ch.ok_or_else(|| Error::parse(src, i + j, "invalid escape in string"))?);
                    }
                    '0'..='7' => {
                        let mut v = e.to_digit(8).unwrap_or(0);
                        for _ in 0..2 {
                            let d = it.next().and_then(|(_, h)| h.to_digit(8));
                            v = v * 8 + d.ok_or_else(|| Error::parse(src, i + j, "invalid escape in string"))?;
                        }
                        out.push(char::from_u32(v).ok_or_else(|| Error::parse(src, i + j, "invalid escape"))?);
                    }
                    _ => return Err(Error::parse(src, i + j, "unknown escape sequence")),
                }
            }
            c => out.push(c),
        }
    }
    Err(Error::parse(src, i, "unterminated quoted string"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(action: &str) -> Vec<Tok> {
        match segments(action).unwrap().remove(0) {
            Segment::Action(t, _) => t.into_iter().map(|t| t.tok).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn trims_and_comments() {
        let s = segments("a  {{- .X -}}\n b {{/* c */}} d {{- /* e */ -}} f").unwrap();
        assert_eq!(s[0], Segment::Text("a".into()));
        assert_eq!(s[2], Segment::Text("b ".into()));
        assert_eq!(s[3], Segment::Text(" d".into()));
        assert_eq!(s[4], Segment::Text("f".into()));
        // `{{-3}}` is the number -3, not a trim marker.
        assert_eq!(toks("{{-3}}"), [Tok::Int(-3)]);
    }

    #[test]
    fn tokens() {
        assert_eq!(
            toks(r#"{{ $i, $m := .Messages | printf "%s\n" `raw` 'x' 1.5 0x1F ($.A).B }}"#),
            [
                Tok::Var("$i".into()),
                Tok::Comma,
                Tok::Var("$m".into()),
                Tok::Declare,
                Tok::Field("Messages".into()),
                Tok::Pipe,
                Tok::Ident("printf".into()),
                Tok::Str("%s\n".into()),
                Tok::Str("raw".into()),
                Tok::Int('x' as i64),
                Tok::Float(1.5),
                Tok::Int(31),
                Tok::Open,
                Tok::Var("$".into()),
                Tok::Field("A".into()),
                Tok::Close,
                Tok::Field("B".into()),
            ]
        );
    }

    #[test]
    fn errors_name_the_place() {
        let e = segments("line one\n  {{ .X ").unwrap_err().to_string();
        assert!(e.contains("line 2, column 3") && e.contains("unclosed action"), "{e}");
        let e = segments("{{ \"abc }}").unwrap_err().to_string();
        assert!(e.contains("unterminated quoted string"), "{e}");
        assert!(segments("{{ # }}").is_err());
    }
}
