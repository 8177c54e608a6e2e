//! The Modelfile subset `/api/create` reads: `FROM`, `PARAMETER`,
//! `SYSTEM`, `TEMPLATE` (a Go template, checked here: a mistake is a 400
//! naming its line and column) and one `ADAPTER` (a LoRA adapter's path on
//! the server; manage.rs reads it). Any other instruction is refused. Values may
//! be bare, `"quoted"`, or `"""triple-quoted"""` over several lines; `#`
//! starts a comment line.

use serde_json::{Map, Value};

use crate::error::ApiError;

/// What a Modelfile asks for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Modelfile {
    /// `FROM`: the model.
    pub from: Option<String>,
    /// `SYSTEM`.
    pub system: Option<String>,
    /// `TEMPLATE` (checked: it parses).
    pub template: Option<String>,
    /// `PARAMETER name value` (repeated `stop`s make a list).
    pub parameters: Map<String, Value>,
    /// `ADAPTER`: a LoRA adapter's path, as written.
    pub adapter: Option<String>,
}

fn bad(message: String) -> ApiError {
    ApiError::bad_param("modelfile", message)
}

/// Parses a Modelfile.
pub fn parse(text: &str) -> Result<Modelfile, ApiError> {
    let mut out = Modelfile::default();
    let mut rest = text;
    let mut line_no = 0usize;
    while !rest.is_empty() {
        let (line, after) = rest.split_once('\n').unwrap_or((rest, ""));
        rest = after;
        line_no += 1;
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (word, arg) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        let arg = arg.trim_start();
        // A triple-quoted value may run over several lines.
        let value = if let Some(open) = arg.strip_prefix("\"\"\"") {
            match open.split_once("\"\"\"") {
                Some((v, _)) => v.to_string(),
                None => {
                    let (body, after) = rest
                        .split_once("\"\"\"")
                        .ok_or_else(|| bad(format!("line {line_no}: a \"\"\" value is not closed")))?;
                    line_no += body.matches('\n').count();
                    rest = after.split_once('\n').map_or("", |(_, r)| r);
                    format!("{open}\n{body}")
                }
            }
        } else {
            unquote(arg).to_string()
        };
        match word.to_ascii_uppercase().as_str() {
            "FROM" => out.from = Some(value.trim().to_string()),
            "SYSTEM" => out.system = Some(value),
            "PARAMETER" => parameter(&mut out.parameters, &value, line_no)?,
            "TEMPLATE" if value.trim().is_empty() => out.template = None,
            "TEMPLATE" => {
                kiln_engine::GoChatTemplate::parse(&value)
                    .map_err(|e| bad(format!("TEMPLATE on line {line_no}: {e}")))?;
                out.template = Some(value);
            }
            "ADAPTER" if out.adapter.is_some() => {
                return Err(bad(format!(
                    "line {line_no}: a second ADAPTER: kiln applies one LoRA adapter per model (merge them into one, or make one model per adapter)"
                )))
            }
            "ADAPTER" if value.trim().is_empty() => return Err(bad(format!("line {line_no}: ADAPTER needs a path"))),
            "ADAPTER" => out.adapter = Some(value.trim().to_string()),
            _ => {
                return Err(bad(format!(
                "line {line_no}: unknown or unsupported instruction `{word}` (kiln reads FROM, PARAMETER, SYSTEM, TEMPLATE and ADAPTER)"
            )))
            }
        }
    }
    Ok(out)
}

fn unquote(s: &str) -> &str {
    let s = s.trim();
    s.strip_prefix('"').and_then(|x| x.strip_suffix('"')).unwrap_or(s)
}

/// `PARAMETER name value`: numbers and booleans as such, `stop` as a list.
fn parameter(params: &mut Map<String, Value>, arg: &str, line_no: usize) -> Result<(), ApiError> {
    let (name, value) = arg
        .trim()
        .split_once(char::is_whitespace)
        .ok_or_else(|| bad(format!("line {line_no}: PARAMETER needs a name and a value")))?;
    let value = unquote(value);
    if name == "stop" {
        let list = params.entry("stop").or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(a) = list {
            a.push(Value::String(value.to_string()));
        }
        return Ok(());
    }
    params.insert(name.to_string(), typed(value));
    Ok(())
}

/// A bare value as JSON: an integer, a number, a boolean, else a string.
pub fn typed(value: &str) -> Value {
    if let Ok(i) = value.parse::<i64>() {
        return Value::from(i);
    }
    if let Some(n) = value.parse::<f64>().ok().and_then(serde_json::Number::from_f64) {
        return Value::Number(n);
    }
    match value {
        "true" => Value::Bool(true),
        "false" => Value::Bool(false),
        _ => Value::String(value.to_string()),
    }
}

/// A Modelfile that recreates an alias (`/api/show`'s `modelfile`; its
/// adapter at `adapter`, where the server keeps it), and its parameters
/// one per line (`parameters`).
pub fn render(alias: &kiln_hub::Alias, adapter: Option<&std::path::Path>) -> (String, String) {
    let mut params = String::new();
    for (k, v) in &alias.parameters {
        let values = match v {
            Value::Array(a) => a.clone(),
            other => vec![other.clone()],
        };
        for v in values {
            let v = match v {
                Value::String(s) => format!("\"{s}\""),
                other => other.to_string(),
            };
            params.push_str(&format!("{k} {v}\n"));
        }
    }
    let mut file = format!("FROM {}\n", alias.from);
    if let Some(p) = adapter {
        file.push_str(&format!("ADAPTER {}\n", p.display()));
    }
    if let Some(t) = &alias.template {
        file.push_str(&format!("TEMPLATE \"\"\"{t}\"\"\"\n"));
    }
    if let Some(s) = &alias.system {
        file.push_str(&format!("SYSTEM \"\"\"{s}\"\"\"\n"));
    }
    for l in params.lines() {
        file.push_str(&format!("PARAMETER {l}\n"));
    }
    (file, params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_the_subset() {
        let m = parse(
            "# a pirate\nFROM smollm2:latest\nPARAMETER temperature 0.2\nparameter num_predict 64\n\
             PARAMETER stop \"User:\"\nPARAMETER stop </s>\nSYSTEM \"\"\"You are a pirate.\nSay arr.\"\"\"\n\nTEMPLATE \"\"\n",
        )
        .unwrap();
        assert_eq!(m.from.as_deref(), Some("smollm2:latest"));
        assert_eq!(m.system.as_deref(), Some("You are a pirate.\nSay arr."));
        assert_eq!(json!(m.parameters), json!({"temperature": 0.2, "num_predict": 64, "stop": ["User:", "</s>"]}));
        assert_eq!(m.adapter, None);
        assert_eq!(parse("FROM x\nADAPTER \"/a b/lora\"\n").unwrap().adapter.as_deref(), Some("/a b/lora"));
        assert_eq!(parse("SYSTEM \"\"\"one line\"\"\"").unwrap().system.as_deref(), Some("one line"));
        let t = parse("FROM x\nTEMPLATE \"\"\"{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}\"\"\"\n")
            .unwrap();
        assert_eq!(
            t.template.as_deref(),
            Some("{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}")
        );
    }

    #[test]
    fn refuses_what_it_cannot_honour() {
        for (text, says) in [
            ("FROM x\nLICENSE MIT", "unknown or unsupported instruction `LICENSE`"),
            ("FROM x\nADAPTER a.gguf\nADAPTER b.gguf", "line 3: a second ADAPTER"),
            ("FROM x\nADAPTER", "line 2: ADAPTER needs a path"),
            (
                "FROM x\n\nTEMPLATE \"\"\"{{ if .System }}\n{{ .Nope }\"\"\"",
                "TEMPLATE on line 3: template: line 2, column 10: unexpected '}'",
            ),
            ("FROM x\nTEMPLATE {{ frob }}", "function \"frob\" not defined"),
            ("FROM x\nPARAMETER temperature", "needs a name and a value"),
            ("SYSTEM \"\"\"never closed", "not closed"),
        ] {
            let e = parse(text).unwrap_err();
            assert!(e.to_string().contains(says), "{text}: {e}");
            assert_eq!(e.status(), axum::http::StatusCode::BAD_REQUEST);
        }
    }

    #[test]
    fn renders_back() {
        let a = kiln_hub::Alias {
            from: "smollm2".into(),
            system: Some("S".into()),
            template: Some("{{ range .Messages }}{{ .Content }}\n{{ end }}".into()),
            parameters: json!({"stop": ["a", "b"], "temperature": 0.5}).as_object().unwrap().clone(),
            adapter: None,
        };
        let (file, params) = render(&a, Some(std::path::Path::new("/k/adapters/sha256-1/x.gguf")));
        assert_eq!(params, "stop \"a\"\nstop \"b\"\ntemperature 0.5\n");
        let back = parse(&file).unwrap();
        assert_eq!(back.adapter.as_deref(), Some("/k/adapters/sha256-1/x.gguf"));
        assert_eq!((back.from.as_deref(), back.system.as_deref()), (Some("smollm2"), Some("S")));
        assert_eq!(back.template, a.template);
        assert_eq!(json!(back.parameters), json!(a.parameters));
    }
}
