//! Runs a parsed template over a [`Value`], within [`Limits`].

use crate::funcs;
use crate::parse::{Arg, Branch, Cmd, Node, Pipe};
use crate::value::Value;
use crate::{Error, Limits};

/// What a list of nodes asks of the `range` around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    Next,
    Break,
    Continue,
}

pub(crate) struct Exec<'a> {
    src: &'a str,
    pub(crate) out: String,
    vars: Vec<(String, Value)>,
    fuel: u64,
    limits: Limits,
}

type Result<T> = std::result::Result<T, Error>;

impl<'a> Exec<'a> {
    pub(crate) fn new(src: &'a str, root: &Value, limits: Limits) -> Self {
        Exec { src, out: String::new(), vars: vec![("$".into(), root.clone())], fuel: limits.steps, limits }
    }

    pub(crate) fn steps_left(&self) -> u64 {
        self.fuel
    }

    fn err(&self, pos: usize, msg: &str) -> Error {
        Error::exec(self.src, pos, msg)
    }

    fn burn(&mut self) -> Result<()> {
        if self.fuel == 0 {
            return Err(Error::Limit(format!("the template ran more than {} steps", self.limits.steps)));
        }
        self.fuel -= 1;
        Ok(())
    }

    fn write(&mut self, s: &str) -> Result<()> {
        if self.out.len() + s.len() > self.limits.max_output_bytes {
            return Err(Error::Limit(format!("the output exceeds {} bytes", self.limits.max_output_bytes)));
        }
        self.out.push_str(s);
        Ok(())
    }

    pub(crate) fn run(&mut self, nodes: &[Node], dot: &Value) -> Result<()> {
        self.walk(nodes, dot).map(|_| ())
    }

    fn walk(&mut self, nodes: &[Node], dot: &Value) -> Result<Flow> {
        for n in nodes {
            self.burn()?;
            let flow = match n {
                Node::Text(t) => {
                    self.write(t)?;
                    Flow::Next
                }
                Node::Action(p) => {
                    let v = self.pipe(p, dot, true)?;
                    if p.decl.is_empty() {
                        self.write(&v.print())?;
                    }
                    Flow::Next
                }
                Node::If(b) => self.if_or_with(b, dot, false)?,
                Node::With(b) => self.if_or_with(b, dot, true)?,
                Node::Range(b) => self.range(b, dot)?,
                Node::Break => Flow::Break,
                Node::Continue => Flow::Continue,
            };
            if flow != Flow::Next {
                return Ok(flow);
            }
        }
        Ok(Flow::Next)
    }

    fn if_or_with(&mut self, b: &Branch, dot: &Value, with: bool) -> Result<Flow> {
        let mark = self.vars.len();
        let v = self.pipe(&b.pipe, dot, true)?;
        let flow = if v.truth() {
            self.walk(&b.list, if with { &v } else { dot })?
        } else if let Some(e) = &b.else_list {
            self.walk(e, dot)?
        } else {
            Flow::Next
        };
        self.vars.truncate(mark);
        Ok(flow)
    }

    fn range(&mut self, b: &Branch, dot: &Value) -> Result<Flow> {
        let mark = self.vars.len();
        let v = self.pipe(&b.pipe, dot, false)?;
        // Items are taken one at a time: `range 1000000000` runs out of
        // steps, it never allocates them all.
        let count = match &v {
            Value::List(l) => l.items.len(),
            Value::Map(m) => m.entries.len(),
            Value::Int(n) if b.pipe.decl.len() < 2 => usize::try_from(*n).unwrap_or(0),
            Value::Nil => 0,
            other => {
                return Err(self.err(b.pipe.pos, &format!("range can't iterate over {}", other.print())));
            }
        };
        let mut keys = match &v {
            Value::Map(m) => Some(m.entries.iter()),
            _ => None,
        };
        if count == 0 {
            let flow = match &b.else_list {
                Some(e) => self.walk(e, dot)?,
                None => Flow::Next,
            };
            self.vars.truncate(mark);
            return Ok(flow);
        }
        for i in 0..count {
            self.burn()?;
            let (key, item) = match (&v, keys.as_mut().and_then(Iterator::next)) {
                (Value::List(l), _) => (Value::Int(i as i64), l.items[i].clone()),
                (_, Some((k, x))) => (Value::from(k.as_str()), x.clone()),
                _ => (Value::Int(i as i64), Value::Int(i as i64)),
            };
            let inner = self.vars.len();
            match b.pipe.decl.as_slice() {
                [] => {}
                [one] => self.bind(one, item.clone(), b.pipe.assign),
                [k, e, ..] => {
                    self.bind(k, key, b.pipe.assign);
                    self.bind(e, item.clone(), b.pipe.assign);
                }
            }
            let flow = self.walk(&b.list, &item)?;
            self.vars.truncate(inner);
            if flow == Flow::Break {
                break;
            }
        }
        self.vars.truncate(mark);
        Ok(Flow::Next)
    }

    fn bind(&mut self, name: &str, v: Value, assign: bool) {
        if assign {
            if let Some(slot) = self.vars.iter_mut().rev().find(|(n, _)| n == name) {
                slot.1 = v;
                return;
            }
        }
        self.vars.push((name.to_string(), v));
    }

    /// Evaluates a pipeline; `bind`: declare or assign its variables.
    fn pipe(&mut self, p: &Pipe, dot: &Value, bind: bool) -> Result<Value> {
        let mut v = None;
        for c in &p.cmds {
            v = Some(self.command(c, dot, v)?);
        }
        let v = v.unwrap_or_default();
        if bind {
            for name in &p.decl {
                self.bind(name, v.clone(), p.assign);
            }
        }
        Ok(v)
    }

    fn command(&mut self, c: &Cmd, dot: &Value, piped: Option<Value>) -> Result<Value> {
        self.burn()?;
        if let Arg::Func(name) = &c.args[0] {
            return self.call(name, &c.args[1..], piped, dot, c.pos);
        }
        if c.args.len() > 1 || piped.is_some() {
            let what = match &c.args[0] {
                Arg::Field(f) => format!(".{}", f.join(".")),
                _ => "a value".into(),
            };
            return Err(self.err(c.pos, &format!("can't give argument to non-function {what}")));
        }
        if c.args[0] == Arg::Nil {
            return Err(self.err(c.pos, "nil is not a command"));
        }
        self.arg(&c.args[0], dot, c.pos)
    }

    fn call(&mut self, name: &str, args: &[Arg], piped: Option<Value>, dot: &Value, pos: usize) -> Result<Value> {
        if name == "and" || name == "or" {
            if args.is_empty() && piped.is_none() {
                return Err(self.err(pos, &format!("wrong number of args for {name}: want at least 1 got 0")));
            }
            let mut last = Value::Nil;
            for a in args {
                last = self.arg(a, dot, pos)?;
                if last.truth() != (name == "and") {
                    return Ok(last);
                }
            }
            return Ok(piped.unwrap_or(last));
        }
        let mut vals = Vec::with_capacity(args.len() + 1);
        for a in args {
            vals.push(self.arg(a, dot, pos)?);
        }
        vals.extend(piped);
        let v = funcs::call(name, vals).map_err(|e| self.err(pos, &format!("error calling {name}: {e}")))?;
        // A value can grow only through a call: bound it as the output is.
        if matches!(&v, Value::Str(s) if s.len() > self.limits.max_output_bytes) {
            return Err(Error::Limit(format!("a value exceeds {} bytes", self.limits.max_output_bytes)));
        }
        Ok(v)
    }

    fn arg(&mut self, a: &Arg, dot: &Value, pos: usize) -> Result<Value> {
        match a {
            Arg::Dot => Ok(dot.clone()),
            Arg::Nil => Ok(Value::Nil),
            Arg::Bool(b) => Ok(Value::Bool(*b)),
            Arg::Int(n) => Ok(Value::Int(*n)),
            Arg::Float(f) => Ok(Value::Float(*f)),
            Arg::Str(s) => Ok(Value::from(s.as_str())),
            Arg::Field(chain) => self.fields(dot.clone(), chain, pos),
            Arg::Var(name, chain) => {
                let v = self.vars.iter().rev().find(|(n, _)| n == name).map(|(_, v)| v.clone());
                let v = v.ok_or_else(|| self.err(pos, &format!("undefined variable: {name}")))?;
                self.fields(v, chain, pos)
            }
            Arg::Func(name) => self.call(name, &[], None, dot, pos),
            Arg::Sub(p, chain) => {
                let v = self.pipe(p, dot, true)?;
                self.fields(v, chain, pos)
            }
        }
    }

    fn fields(&self, mut v: Value, chain: &[String], pos: usize) -> Result<Value> {
        for name in chain {
            v = match &v {
                Value::Map(m) => m.entries.get(name).cloned().unwrap_or_default(),
                Value::Struct(s) => match s.fields.iter().find(|f| f.name == name) {
                    Some(f) => f.value.clone(),
                    None => return Err(self.err(pos, &format!("can't evaluate field {name} in type {}", s.type_name))),
                },
                Value::Nil => return Err(self.err(pos, &format!("nil pointer evaluating interface {{}}.{name}"))),
                other => {
                    return Err(self.err(pos, &format!("can't evaluate field {name} in type {}", other.type_name())))
                }
            };
        }
        Ok(v)
    }
}
