//! Builds the tree of a template from its segments, checking as Go does
//! that every variable is declared, every function exists, and `break` and
//! `continue` stand inside a `range`.

use crate::lex::{segments, Segment, Tok, Token};
use crate::Error;

/// A node of the tree.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    Text(String),
    Action(Pipe),
    If(Box<Branch>),
    With(Box<Branch>),
    Range(Box<Branch>),
    Break,
    Continue,
}

/// `if`, `with` or `range`: the pipeline, the list, the `else` list.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Branch {
    pub(crate) pipe: Pipe,
    pub(crate) list: Vec<Node>,
    pub(crate) else_list: Option<Vec<Node>>,
}

/// A pipeline: optional variables it declares or assigns, then commands
/// joined by `|`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Pipe {
    pub(crate) pos: usize,
    pub(crate) decl: Vec<String>,
    pub(crate) assign: bool,
    pub(crate) cmds: Vec<Cmd>,
}

/// A command: its words.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cmd {
    pub(crate) pos: usize,
    pub(crate) args: Vec<Arg>,
}

/// A word of a command.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Arg {
    Dot,
    Nil,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    /// `.A.B` from dot.
    Field(Vec<String>),
    /// `$x.A.B`.
    Var(String, Vec<String>),
    /// A function name.
    Func(String),
    /// `(pipeline)`, then fields.
    Sub(Box<Pipe>, Vec<String>),
}

/// Functions a template may call.
pub(crate) const FUNCS: &[&str] = &[
    "and",
    "or",
    "not",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "len",
    "index",
    "slice",
    "print",
    "printf",
    "println",
    "html",
    "js",
    "urlquery",
    "json",
    "currentDate",
    "yesterdayDate",
    "toTypeScriptType",
];

/// Deepest nesting of blocks and parentheses.
const MAX_DEPTH: usize = 100;

struct Parser<'a> {
    src: &'a str,
    segs: Vec<Segment>,
    at: usize,
    vars: Vec<String>,
    ranges: usize,
    depth: usize,
}

/// How a list ended.
enum Stop {
    Eof,
    End(usize),
    Else(Vec<Token>, usize),
}

/// Parses `src`.
pub(crate) fn parse(src: &str) -> Result<Vec<Node>, Error> {
    let mut p = Parser { src, segs: segments(src)?, at: 0, vars: vec!["$".into()], ranges: 0, depth: 0 };
    match p.list()? {
        (nodes, Stop::Eof) => Ok(nodes),
        (_, Stop::End(pos)) => Err(Error::parse(src, pos, "unexpected {{end}}")),
        (_, Stop::Else(_, pos)) => Err(Error::parse(src, pos, "unexpected {{else}}")),
    }
}

impl Parser<'_> {
    fn err(&self, pos: usize, msg: &str) -> Error {
        Error::parse(self.src, pos, msg)
    }

    fn list(&mut self) -> Result<(Vec<Node>, Stop), Error> {
        let mut nodes = Vec::new();
        while let Some(seg) = self.segs.get(self.at).cloned() {
            self.at += 1;
            match seg {
                Segment::Text(t) => nodes.push(Node::Text(t)),
                Segment::Action(toks, pos) => {
                    let first = toks.first().map(|t| &t.tok);
                    let keyword = match first {
                        Some(Tok::Ident(k)) => k.as_str(),
                        None => return Err(self.err(pos, "missing value for command")),
                        _ => "",
                    };
                    match keyword {
                        "end" if toks.len() == 1 => return Ok((nodes, Stop::End(pos))),
                        "end" => return Err(self.err(pos, "unexpected words after end")),
                        "else" => return Ok((nodes, Stop::Else(toks[1..].to_vec(), pos))),
                        "if" | "with" | "range" => {
                            let node = self.branch(keyword, &toks[1..], pos)?;
                            nodes.push(node);
                        }
                        "break" | "continue" => {
                            if self.ranges == 0 {
                                return Err(self.err(pos, &format!("{{{{{keyword}}}}} outside {{{{range}}}}")));
                            }
                            if toks.len() > 1 {
                                return Err(self.err(pos, &format!("unexpected words after {keyword}")));
                            }
                            nodes.push(if keyword == "break" { Node::Break } else { Node::Continue });
                        }
                        "define" | "template" | "block" => {
                            return Err(self
                                .err(pos, &format!("{{{{{keyword}}}}} is not supported (kiln runs single templates)")))
                        }
                        _ => nodes.push(Node::Action(self.pipeline(&toks, pos, false)?)),
                    }
                }
            }
        }
        Ok((nodes, Stop::Eof))
    }

    /// `if`/`with`/`range` with its pipeline tokens; `else if` and
    /// `else with` chains become a nested branch in the else list.
    fn branch(&mut self, kind: &str, toks: &[Token], pos: usize) -> Result<Node, Error> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.err(pos, "blocks nested too deeply"));
        }
        let scope = self.vars.len();
        let pipe = self.pipeline(toks, pos, kind == "range")?;
        if kind == "range" {
            self.ranges += 1;
        }
        let (list, end) = self.list()?;
        if kind == "range" {
            self.ranges -= 1;
        }
        let else_list = match end {
            Stop::Eof => return Err(self.err(pos, &format!("unexpected EOF: {{{{{kind}}}}} has no {{{{end}}}}"))),
            Stop::End(_) => None,
            Stop::Else(rest, else_pos) if rest.is_empty() => match self.list()? {
                (l, Stop::End(_)) => Some(l),
                (_, Stop::Else(_, p)) => return Err(self.err(p, "expected end; found {{else}}")),
                (_, Stop::Eof) => return Err(self.err(else_pos, "unexpected EOF: {{else}} has no {{end}}")),
            },
            Stop::Else(rest, else_pos) => {
                let chained = match &rest[0].tok {
                    Tok::Ident(k) if (k == "if" || k == "with") && kind != "range" => k.clone(),
                    _ => return Err(self.err(else_pos, "expected end; found bad words after {{else}}")),
                };
                // `{{else if x}}...{{end}}` is `{{else}}{{if x}}...{{end}}{{end}}`.
                let nested = self.branch(&chained, &rest[1..], else_pos)?;
                Some(vec![nested])
            }
        };
        self.vars.truncate(scope);
        self.depth -= 1;
        let b = Box::new(Branch { pipe, list, else_list });
        Ok(match kind {
            "if" => Node::If(b),
            "with" => Node::With(b),
            _ => Node::Range(b),
        })
    }

    fn pipeline(&mut self, toks: &[Token], pos: usize, range: bool) -> Result<Pipe, Error> {
        let mut rest = toks;
        let mut decl = Vec::new();
        let mut assign = false;
        // `$x :=`, `$x =`, and in a range `$i, $x :=`.
        let declared = |t: &[Token]| -> Option<usize> {
            match t {
                [Token { tok: Tok::Var(_), .. }, Token { tok: Tok::Declare | Tok::Assign, .. }, ..] => Some(1),
                [Token { tok: Tok::Var(_), .. }, Token { tok: Tok::Comma, .. }, Token { tok: Tok::Var(_), .. }, Token { tok: Tok::Declare | Tok::Assign, .. }, ..]
                    if range =>
                {
                    Some(2)
                }
                _ => None,
            }
        };
        if let Some(n) = declared(rest) {
            for t in rest.iter().take(2 * n - 1).step_by(2) {
                if let Tok::Var(v) = &t.tok {
                    decl.push(v.clone());
                }
            }
            assign = rest[2 * n - 1].tok == Tok::Assign;
            rest = &rest[2 * n..];
        }
        let cmds = self.commands(rest, pos)?;
        if assign {
            for v in &decl {
                if !self.vars.contains(v) {
                    return Err(self.err(pos, &format!("undefined variable \"{v}\"")));
                }
            }
        } else {
            self.vars.extend(decl.iter().cloned());
        }
        Ok(Pipe { pos, decl, assign, cmds })
    }

    fn commands(&mut self, toks: &[Token], pos: usize) -> Result<Vec<Cmd>, Error> {
        let mut cmds = Vec::new();
        for part in split_pipes(toks) {
            let at = part.first().map_or(pos, |t| t.pos);
            if part.is_empty() {
                return Err(self.err(at, "missing command in pipeline"));
            }
            let mut args = Vec::new();
            let mut i = 0;
            while i < part.len() {
                if i > 0 && !part[i].spaced && !matches!(part[i].tok, Tok::Open) {
                    return Err(self.err(part[i].pos, "missing space between arguments"));
                }
                let (arg, used) = self.operand(&part[i..])?;
                args.push(arg);
                i += used;
            }
            cmds.push(Cmd { pos: at, args });
        }
        if cmds.is_empty() {
            return Err(self.err(pos, "missing value for command"));
        }
        Ok(cmds)
    }

    /// One operand: a term and the fields chained to it.
    fn operand(&mut self, toks: &[Token]) -> Result<(Arg, usize), Error> {
        let t = &toks[0];
        let (term, mut used) = match &t.tok {
            Tok::Dot => (Arg::Dot, 1),
            Tok::Field(f) => (Arg::Field(vec![f.clone()]), 1),
            Tok::Var(v) => {
                if !self.vars.contains(v) {
                    return Err(self.err(t.pos, &format!("undefined variable \"{v}\"")));
                }
                (Arg::Var(v.clone(), Vec::new()), 1)
            }
            Tok::Str(s) => (Arg::Str(s.clone()), 1),
            Tok::Int(n) => (Arg::Int(*n), 1),
            Tok::Float(f) => (Arg::Float(*f), 1),
            Tok::Ident(k) => match k.as_str() {
                "true" => (Arg::Bool(true), 1),
                "false" => (Arg::Bool(false), 1),
                "nil" => (Arg::Nil, 1),
                f if FUNCS.contains(&f) => (Arg::Func(f.to_string()), 1),
                "call" => return Err(self.err(t.pos, "function \"call\" is not supported")),
                f => return Err(self.err(t.pos, &format!("function \"{f}\" not defined"))),
            },
            Tok::Open => {
                let close = matching_close(toks).ok_or_else(|| self.err(t.pos, "unclosed left paren"))?;
                self.depth += 1;
                if self.depth > MAX_DEPTH {
                    return Err(self.err(t.pos, "parentheses nested too deeply"));
                }
                let inner = self.pipeline(&toks[1..close], t.pos, false)?;
                self.depth -= 1;
                (Arg::Sub(Box::new(inner), Vec::new()), close + 1)
            }
            Tok::Close => return Err(self.err(t.pos, "unexpected right paren")),
            Tok::Pipe | Tok::Declare | Tok::Assign | Tok::Comma => {
                return Err(self.err(t.pos, "unexpected token in operand"))
            }
        };
        let mut chain = Vec::new();
        while let Some(Token { tok: Tok::Field(f), spaced: false, .. }) = toks.get(used) {
            chain.push(f.clone());
            used += 1;
        }
        if chain.is_empty() {
            return Ok((term, used));
        }
        let arg = match term {
            Arg::Field(mut f) => {
                f.extend(chain);
                Arg::Field(f)
            }
            Arg::Var(v, _) => Arg::Var(v, chain),
            Arg::Sub(p, _) => Arg::Sub(p, chain),
            _ => return Err(self.err(toks[used - 1].pos, "unexpected . after term")),
        };
        Ok((arg, used))
    }
}

/// Splits on `|` outside parentheses.
fn split_pipes(toks: &[Token]) -> Vec<&[Token]> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    for (i, t) in toks.iter().enumerate() {
        match t.tok {
            Tok::Open => depth += 1,
            Tok::Close => depth = depth.saturating_sub(1),
            Tok::Pipe if depth == 0 => {
                out.push(&toks[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < toks.len() || !out.is_empty() {
        out.push(&toks[start..]);
    }
    out
}

/// The index of the `)` that closes `toks[0]`.
fn matching_close(toks: &[Token]) -> Option<usize> {
    let mut depth = 0usize;
    for (i, t) in toks.iter().enumerate() {
        match t.tok {
            Tok::Open => depth += 1,
            Tok::Close => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn else_if_chains_nest() {
        let t = parse("{{ if .A }}a{{ else if .B }}b{{ else }}c{{ end }}").unwrap();
        let Node::If(b) = &t[0] else { panic!() };
        let Some(else_list) = &b.else_list else { panic!() };
        let Node::If(inner) = &else_list[0] else { panic!() };
        assert_eq!(inner.list, [Node::Text("b".into())]);
        assert_eq!(inner.else_list, Some(vec![Node::Text("c".into())]));
    }

    #[test]
    fn refuses_what_go_refuses() {
        for (src, says) in [
            ("{{ $x }}", "undefined variable \"$x\""),
            ("{{ if true }}{{ $y := 1 }}{{ end }}{{ $y }}", "undefined variable \"$y\""),
            ("{{ $z = 1 }}", "undefined variable \"$z\""),
            ("{{ frob .X }}", "function \"frob\" not defined"),
            ("{{ break }}", "outside {{range}}"),
            ("{{ if .X }}", "has no {{end}}"),
            ("{{ end }}", "unexpected {{end}}"),
            ("{{ range .X }}{{ else }}{{ else }}{{ end }}", "expected end"),
            ("{{ template \"x\" }}", "not supported"),
            ("{{ (.X }}", "unclosed left paren"),
            ("{{ .X | }}", "missing command"),
            ("{{ }}", "missing value"),
        ] {
            let e = parse(src).unwrap_err().to_string();
            assert!(e.contains(says), "{src}: {e}");
        }
        let deep = "{{ if 1 }}".repeat(200) + &"{{ end }}".repeat(200);
        assert!(parse(&deep).unwrap_err().to_string().contains("too deeply"));
        let parens = "{{ ".to_string() + &"(".repeat(200) + "1" + &")".repeat(200) + " }}";
        assert!(parse(&parens).unwrap_err().to_string().contains("too deeply"));
    }

    #[test]
    fn range_declarations_are_scoped() {
        parse("{{ range $i, $m := .Messages }}{{ $i }}{{ $m.Role }}{{ end }}").unwrap();
        assert!(parse("{{ range $i, $m := .Messages }}{{ end }}{{ $m }}").is_err());
        assert!(parse("{{ $a, $b := 1 }}").is_err(), "two variables only in a range");
        parse("{{ $s := \"\" }}{{ range .M }}{{ $s = .C }}{{ end }}{{ $s }}").unwrap();
    }
}
