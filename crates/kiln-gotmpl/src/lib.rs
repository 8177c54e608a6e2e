//! The subset of Go's `text/template` that Ollama Modelfile `TEMPLATE`s
//! are written in, parsed and run in a sandbox.
//!
//! * Actions `{{ pipeline }}` with `{{-` / `-}}` trimming and `{{/* comments */}}`;
//!   `if` / `else if` / `else`, `range` (over slices, maps in key order and
//!   integers; `$i, $x :=`; `else`; `break`, `continue`), `with` / `else with`.
//! * Pipelines with `|`, parenthesized pipelines, fields (`.A.B`, `$x.A`,
//!   `$.A`), variables (`$x := ...`, `$x = ...`, scoped to their block), literals.
//! * Go's functions `and`, `or` (lazy), `not`, `eq` (several right-hand
//!   sides), `ne`, `lt`, `le`, `gt`, `ge`, `len`, `index`, `slice`, `print`,
//!   `printf`, `println`, `html`, `js`, `urlquery`, and Ollama's `json`,
//!   `currentDate`, `yesterdayDate` (UTC), `toTypeScriptType`.
//! * Not supported, each a parse error that says so: `define`, `template`,
//!   `block`, `call`, methods.
//!
//! Data are [`Value`]s shaped as Go's: structs with named fields, maps,
//! slices, and their printing (`fmt.Sprint`), truth and JSON encoding as Go
//! has them. Errors name the line and column. A render is bounded by
//! [`Limits`] (steps and output size; nesting is bounded when parsing), so
//! a hostile template is an error, never a hang or a crash.
//!
//! ```
//! use kiln_gotmpl::{Template, Value, Limits};
//! let t = Template::parse("{{- range $i, $m := .Messages }}{{ if $i }}, {{ end }}{{ $m }}{{ end }}").unwrap();
//! let data = Value::map([("Messages".to_string(), Value::list(vec!["a".into(), "b".into()]))]);
//! assert_eq!(t.render(&data, Limits::default()).unwrap(), "a, b");
//! ```
#![warn(missing_docs, unreachable_pub)]

mod exec;
mod funcs;
mod lex;
mod parse;
mod value;

pub use value::{Field, List, Map, Repr, Struct, Value};

use parse::{Arg, Node, Pipe};

/// What went wrong, with the place in the template.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// The template does not parse.
    #[error("template: line {line}, column {column}: {message}")]
    Parse {
        /// 1-based line.
        line: usize,
        /// 1-based column (characters).
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// Running it failed.
    #[error("template: line {line}, column {column}: {message}")]
    Exec {
        /// 1-based line.
        line: usize,
        /// 1-based column (characters).
        column: usize,
        /// What is wrong.
        message: String,
    },
    /// It ran past a [`Limits`].
    #[error("template: {0}")]
    Limit(String),
}

fn line_col(src: &str, pos: usize) -> (usize, usize) {
    let before = src.get(..pos).unwrap_or(src);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

impl Error {
    pub(crate) fn parse(src: &str, pos: usize, message: &str) -> Error {
        let (line, column) = line_col(src, pos);
        Error::Parse { line, column, message: message.to_string() }
    }

    pub(crate) fn exec(src: &str, pos: usize, message: &str) -> Error {
        let (line, column) = line_col(src, pos);
        Error::Exec { line, column, message: message.to_string() }
    }
}

/// Bounds on one render.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Nodes, commands and loop iterations one render may run.
    pub steps: u64,
    /// Largest output, in bytes.
    pub max_output_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { steps: 2_000_000, max_output_bytes: 16 << 20 }
    }
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    src: String,
    nodes: Vec<Node>,
}

impl Template {
    /// Parses `src`.
    pub fn parse(src: &str) -> Result<Template, Error> {
        Ok(Template { src: src.to_string(), nodes: parse::parse(src)? })
    }

    /// The source text.
    pub fn source(&self) -> &str {
        &self.src
    }

    /// Renders with `data` as dot (and `$`).
    pub fn render(&self, data: &Value, limits: Limits) -> Result<String, Error> {
        let mut budget = limits;
        self.render_within(data, &mut budget)
    }

    /// Renders within what is left of `budget`, and takes from it the steps
    /// run and the bytes written: several renders that make one output
    /// share one budget.
    pub fn render_within(&self, data: &Value, budget: &mut Limits) -> Result<String, Error> {
        let mut x = exec::Exec::new(&self.src, data, *budget);
        x.run(&self.nodes, data)?;
        budget.steps = x.steps_left();
        budget.max_output_bytes -= x.out.len().min(budget.max_output_bytes);
        Ok(x.out)
    }

    /// Whether a field or variable named `name` (any case) appears anywhere
    /// in an action (`.Messages`, `$.Messages`, `$m.Content` count; what
    /// follows a parenthesized pipeline does not), as Ollama decides which
    /// data a template reads.
    pub fn mentions(&self, name: &str) -> bool {
        fn in_pipe(p: &Pipe, name: &str) -> bool {
            p.decl.iter().any(|d| d[1..].eq_ignore_ascii_case(name))
                || p.cmds.iter().flat_map(|c| &c.args).any(|a| match a {
                    Arg::Field(f) => f.iter().any(|f| f.eq_ignore_ascii_case(name)),
                    Arg::Var(v, f) => {
                        v[1..].eq_ignore_ascii_case(name) || f.iter().any(|f| f.eq_ignore_ascii_case(name))
                    }
                    Arg::Sub(p, _) => in_pipe(p, name),
                    _ => false,
                })
        }
        fn in_nodes(nodes: &[Node], name: &str) -> bool {
            nodes.iter().any(|n| match n {
                Node::Action(p) => in_pipe(p, name),
                Node::If(b) | Node::With(b) | Node::Range(b) => {
                    in_pipe(&b.pipe, name)
                        || in_nodes(&b.list, name)
                        || b.else_list.as_ref().is_some_and(|e| in_nodes(e, name))
                }
                _ => false,
            })
        }
        in_nodes(&self.nodes, name)
    }

    /// Appends `{{ .name }}` (Ollama adds `{{ .Response }}` to templates
    /// that read neither messages nor a response).
    pub fn append_field(&mut self, name: &str) {
        let cmd = parse::Cmd { pos: self.src.len(), args: vec![Arg::Field(vec![name.to_string()])] };
        self.nodes.push(Node::Action(Pipe { pos: self.src.len(), decl: Vec::new(), assign: false, cmds: vec![cmd] }));
    }

    /// The template with everything after the first `.name` field dropped
    /// (in document order, through the bodies of `if`, `with` and `range`
    /// but not their conditions): how Ollama renders the last turn of a
    /// template without `.Messages`, leaving the answer open.
    pub fn cut_after_field(&self, name: &str) -> Template {
        let mut cut = false;
        let nodes = cut_nodes(&self.nodes, name, &mut cut);
        Template { src: self.src.clone(), nodes }
    }
}

fn cut_nodes(nodes: &[Node], name: &str, cut: &mut bool) -> Vec<Node> {
    let mut out = Vec::new();
    for n in nodes {
        if *cut {
            break;
        }
        let kept = match n {
            Node::Action(p) => cut_pipe(p, name, cut).map(Node::Action),
            Node::If(b) | Node::With(b) | Node::Range(b) => {
                let list = cut_nodes(&b.list, name, cut);
                let else_list = match &b.else_list {
                    Some(e) if !*cut => Some(cut_nodes(e, name, cut)),
                    _ => None,
                };
                let b = Box::new(parse::Branch { pipe: b.pipe.clone(), list, else_list });
                Some(match n {
                    Node::If(_) => Node::If(b),
                    Node::With(_) => Node::With(b),
                    _ => Node::Range(b),
                })
            }
            other => Some(other.clone()),
        };
        out.extend(kept);
    }
    out
}

fn cut_pipe(p: &Pipe, name: &str, cut: &mut bool) -> Option<Pipe> {
    let mut cmds = Vec::new();
    for c in &p.cmds {
        let mut args = Vec::new();
        for a in &c.args {
            if *cut {
                break;
            }
            match a {
                Arg::Field(f) if f.iter().any(|f| f == name) => {
                    *cut = true;
                    args.push(a.clone());
                }
                Arg::Sub(inner, chain) => {
                    if let Some(inner) = cut_pipe(inner, name, cut) {
                        args.push(Arg::Sub(Box::new(inner), chain.clone()));
                    }
                }
                other => args.push(other.clone()),
            }
        }
        if !args.is_empty() {
            cmds.push(parse::Cmd { pos: c.pos, args });
        }
    }
    (!cmds.is_empty()).then(|| Pipe { cmds, ..p.clone() })
}
