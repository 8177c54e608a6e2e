//! [`Grammars`]: one model's grammar compiler (token trie, parser factory, cache);
//! [`Compiled`]: a compiled constraint that hands out per-sequence matchers.
//!
//! JSON schemas are compiled with these llguidance options, unless the schema
//! carries its own `x-guidance` object:
//! * whitespace between JSON tokens is at most one space, or one newline
//!   followed by up to 40 spaces or 10 tabs: compact, `json.dumps` style (`", "`,
//!   `": "`) and indented JSON are all possible, but a model cannot fill its
//!   budget with blank space (a known failure of llguidance's default
//!   unbounded whitespace);
//! * `oneOf` is enforced as `anyOf` (`coerce_one_of`): the output satisfies at
//!   least one branch; exclusivity is not checked;
//! * unknown schema keywords are errors ([`GrammarError::Unsupported`]), never
//!   silently ignored.

use crate::closing::JsonScan;
use crate::env::KilnTokEnv;
use crate::matcher::Matcher;
use crate::{Constraint, GrammarError, GrammarLimits};
use kiln_tokenize::Tokenizer;
use llguidance::api::{ParserLimits, TopLevelGrammar};
use llguidance::{ParserFactory, TokenParser};
use serde_json::Value;
use std::sync::{Arc, Mutex};
use toktrie::{InferenceCapabilities, TokEnv};

/// Whitespace allowed between JSON tokens (see the module docs).
const JSON_WHITESPACE: &str = r"\x20|\x0D?\x0A(?:\x20{0,40}|\x09{0,10})";

/// One model's grammar compiler. `Send + Sync`; share it by `Arc`.
pub struct Grammars {
    factory: ParserFactory,
    limits: GrammarLimits,
    /// Most recently used last; keys are the constraint's compact JSON.
    cache: Mutex<Vec<(String, Compiled)>>,
    /// Which tokens close or open a JSON structure.
    classes: Arc<crate::closing::TokenClasses>,
}

/// A compiled constraint; cheap to clone.
#[derive(Clone)]
pub struct Compiled {
    inner: Arc<CompiledInner>,
}

struct CompiledInner {
    /// A fresh parser; every matcher starts from a clone. Clones share the
    /// lazily built lexer DFA (behind llguidance's own lock).
    parser: TokenParser,
    vocab_size: usize,
    classes: Arc<crate::closing::TokenClasses>,
    /// The answer starts inside `<think>` (closing first ends the reasoning).
    thinking: bool,
}

impl Grammars {
    /// Builds the token trie of `tok` (about 0.3 s for a 150k vocabulary).
    pub fn new(tok: &Arc<Tokenizer>, limits: GrammarLimits) -> Result<Self, GrammarError> {
        let env: TokEnv = KilnTokEnv::env(tok)?;
        let caps = InferenceCapabilities { ff_tokens: env.tokenize_is_canonical(), ..Default::default() };
        let slices = llguidance::earley::SlicedBiasComputer::general_slices();
        let mut factory = ParserFactory::new(&env, caps, &slices)
            .map_err(|e| GrammarError::Tokenizer(format!("building the token trie: {e}")))?;
        factory.quiet();
        *factory.limits_mut() = ParserLimits {
            initial_lexer_fuel: limits.compile_fuel,
            step_lexer_fuel: limits.step_fuel,
            step_max_items: limits.step_max_items,
            max_lexer_states: limits.max_lexer_states,
            max_grammar_size: limits.max_grammar_size,
            // Errors become HTTP messages: no parser state or grammar dumps.
            verbose_errors: false,
            ..ParserLimits::default()
        };
        let classes = Arc::new(crate::closing::TokenClasses::new(tok));
        Ok(Self { factory, limits, cache: Mutex::new(Vec::new()), classes })
    }

    /// The limits this compiler enforces.
    pub fn limits(&self) -> &GrammarLimits {
        &self.limits
    }

    /// Compiles `c`, or returns the cached result for an identical constraint.
    /// Bounded in time and memory by [`GrammarLimits`]: a hostile schema is an
    /// error, never a stall. The first mask is computed here too, so a
    /// constraint that cannot start fails now rather than mid-generation.
    pub fn compile(&self, c: &Constraint) -> Result<Compiled, GrammarError> {
        // Key order matters (properties are generated in schema order), so the
        // key is the order-preserving compact JSON, not a sorted form.
        let key = serde_json::to_string(c).map_err(|e| GrammarError::Invalid(format!("invalid constraint: {e}")))?;
        if key.len() > self.limits.max_source_bytes {
            return Err(GrammarError::TooLarge(format!(
                "{} bytes, the limit is {} bytes",
                key.len(),
                self.limits.max_source_bytes
            )));
        }
        if let Some(hit) = self.cache_get(&key) {
            return Ok(hit);
        }
        let compiled = self.compile_uncached(c)?;
        self.cache_put(key, compiled.clone());
        Ok(compiled)
    }

    fn compile_uncached(&self, c: &Constraint) -> Result<Compiled, GrammarError> {
        let (what, grammar) = match c {
            Constraint::JsonObject => ("JSON schema", json_grammar(&serde_json::json!({"type": "object"}))?),
            Constraint::JsonSchema(schema) => {
                check_depth(schema, self.limits.max_depth)?;
                ("JSON schema", json_grammar(schema)?)
            }
            Constraint::JsonAfterThinking { schema, opened } => {
                ("JSON schema", json_after_thinking(schema.as_ref(), *opened, self.limits.max_depth)?)
            }
            Constraint::Lark(src) => {
                if src.trim().is_empty() {
                    return Err(GrammarError::Invalid("invalid grammar: the grammar is empty".into()));
                }
                ("grammar", TopLevelGrammar::from_lark(src.clone()))
            }
        };
        let parser =
            self.factory.create_parser(grammar).map_err(|e| GrammarError::from_compile(what, &e.to_string()))?;
        let compiled = Compiled {
            inner: Arc::new(CompiledInner {
                parser,
                vocab_size: self.factory.tok_env().tok_trie().vocab_size(),
                classes: Arc::clone(&self.classes),
                thinking: matches!(c, Constraint::JsonAfterThinking { opened: true, .. }),
            }),
        };
        // A grammar whose first mask exceeds the step budget fails here.
        let mut probe = compiled.matcher();
        probe.compute_mask().map_err(|e| match e {
            GrammarError::Matcher(msg) => GrammarError::from_compile(what, &msg),
            other => other,
        })?;
        Ok(compiled)
    }

    fn cache_get(&self, key: &str) -> Option<Compiled> {
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let pos = cache.iter().position(|(k, _)| k == key)?;
        let entry = cache.remove(pos);
        let hit = entry.1.clone();
        cache.push(entry);
        Some(hit)
    }

    fn cache_put(&self, key: String, compiled: Compiled) {
        if self.limits.cache_entries == 0 {
            return;
        }
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        // Another thread may have compiled the same constraint meanwhile.
        cache.retain(|(k, _)| *k != key);
        while cache.len() >= self.limits.cache_entries {
            cache.remove(0);
        }
        cache.push((key, compiled));
    }

    /// Number of compiled grammars in the cache.
    pub fn cached(&self) -> usize {
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Compiled {
    /// A matcher at the start of the grammar, for one sequence.
    pub fn matcher(&self) -> Matcher {
        let inner = llguidance::Matcher::new(Ok(self.inner.parser.clone()));
        let scan = if self.inner.thinking { JsonScan::thinking() } else { JsonScan::default() };
        Matcher::new(inner, self.inner.vocab_size, Arc::clone(&self.inner.classes), scan)
    }
}

/// The llguidance grammar of a JSON schema with kiln's JSON options.
fn json_grammar(schema: &Value) -> Result<TopLevelGrammar, GrammarError> {
    Ok(TopLevelGrammar::from_json_schema(with_options(schema)?))
}

/// The grammar of [`Constraint::JsonAfterThinking`]: reasoning up to
/// `</think>` (lazy: the first one ends it), a little blank space, then the
/// answer with the options of a JSON-schema constraint.
fn json_after_thinking(
    schema: Option<&Value>,
    opened: bool,
    max_depth: usize,
) -> Result<TopLevelGrammar, GrammarError> {
    let object = serde_json::json!({"type": "object"});
    let schema = schema.unwrap_or(&object);
    check_depth(schema, max_depth)?;
    let schema = with_options(schema)?;
    let start = if opened { "start: think WS answer" } else { "start: (\"<think>\" think WS)? answer" };
    Ok(TopLevelGrammar::from_lark(format!(
        "{start}\nthink[lazy]: /(.|\\n)*<\\/think>/\nWS: /[ \\t\\r\\n]{{0,8}}/\nanswer: %json {schema}\n"
    )))
}

/// A JSON schema with kiln's options: objects closed ([`close_objects`]),
/// bounded whitespace, `oneOf` read as `anyOf` (a schema's own `x-guidance`
/// wins).
fn with_options(schema: &Value) -> Result<Value, GrammarError> {
    let mut schema = match schema {
        Value::Object(_) => schema.clone(),
        // JSON Schema allows booleans: `true` accepts anything, `false` nothing.
        Value::Bool(true) => serde_json::json!({}),
        Value::Bool(false) => {
            return Err(GrammarError::Invalid("invalid JSON schema: `false` accepts no value".into()));
        }
        other => {
            return Err(GrammarError::Invalid(format!(
                "invalid JSON schema: expected an object or a boolean, got {}",
                kind(other)
            )));
        }
    };
    close_objects(&mut schema);
    if let Value::Object(map) = &mut schema {
        if !map.contains_key("x-guidance") {
            map.insert(
                "x-guidance".into(),
                serde_json::json!({"whitespace_pattern": JSON_WHITESPACE, "coerce_one_of": true}),
            );
        }
    }
    Ok(schema)
}

/// Makes every object schema that lists `properties` and says nothing of
/// other properties closed (`additionalProperties: false`), as OpenAI's
/// strict mode requires and as the schemas of typed clients (Pydantic,
/// zod) mean: a model must not wander into keys nobody asked for. A schema
/// that says `additionalProperties` (or `patternProperties`,
/// `unevaluatedProperties`) keeps what it says.
pub fn close_objects(schema: &mut Value) {
    let Value::Object(map) = schema else { return };
    let open = ["additionalProperties", "patternProperties", "unevaluatedProperties"];
    if map.contains_key("properties") && !open.iter().any(|k| map.contains_key(*k)) {
        map.insert("additionalProperties".into(), Value::Bool(false));
    }
    for (key, sub) in map.iter_mut() {
        match (key.as_str(), sub) {
            ("properties" | "$defs" | "definitions" | "dependentSchemas", Value::Object(named)) => {
                named.values_mut().for_each(close_objects)
            }
            ("anyOf" | "oneOf" | "allOf" | "prefixItems", Value::Array(list)) => {
                list.iter_mut().for_each(close_objects)
            }
            ("items" | "additionalProperties" | "not" | "if" | "then" | "else" | "contains", v) => match v {
                Value::Array(list) => list.iter_mut().for_each(close_objects),
                v => close_objects(v),
            },
            _ => {}
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Rejects schemas nested deeper than `max` (llguidance's schema walk recurses).
fn check_depth(v: &Value, max: usize) -> Result<(), GrammarError> {
    // Iterative, so the check itself cannot overflow the stack.
    let mut stack = vec![(v, 1usize)];
    while let Some((v, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Object(m) => Box::new(m.values()),
            Value::Array(a) => Box::new(a.iter()),
            _ => continue,
        };
        if depth > max {
            return Err(GrammarError::TooLarge(format!("the schema nests deeper than {max} levels")));
        }
        stack.extend(children.map(|c| (c, depth + 1)));
    }
    Ok(())
}

#[cfg(test)]
mod close_tests {
    use super::close_objects;
    use serde_json::json;

    #[test]
    fn objects_with_properties_are_closed_unless_they_say_otherwise() {
        let mut s = json!({"type": "object", "properties": {
            "properties": {"type": "object", "properties": {"a": {"type": "string"}}},
            "open": {"type": "object", "properties": {}, "additionalProperties": true},
            "list": {"type": "array", "items": {"properties": {"b": {}}}}},
            "$defs": {"D": {"anyOf": [{"properties": {"c": {}}}]}}});
        close_objects(&mut s);
        assert_eq!(s["additionalProperties"], false);
        assert_eq!(s["properties"]["properties"]["additionalProperties"], false);
        assert!(s["properties"].get("additionalProperties").is_none(), "a map of names is not a schema");
        assert_eq!(s["properties"]["open"]["additionalProperties"], true);
        assert_eq!(s["properties"]["list"]["items"]["additionalProperties"], false);
        assert_eq!(s["$defs"]["D"]["anyOf"][0]["additionalProperties"], false);
    }
}

#[cfg(test)]
#[path = "compile_tests.rs"]
mod tests;
