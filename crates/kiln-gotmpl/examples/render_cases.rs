//! Renders each template of a JSON list over one JSON data file and prints
//! one line per template: the output as a JSON string, or `PARSE-ERR` /
//! `EXEC-ERR` and the message. `scripts/check-gotmpl-with-go.sh` compares
//! these lines with what Go's own `text/template` prints.
//!
//! ```sh
//! cargo run -p kiln-gotmpl --example render_cases -- cases.json data.json
//! ```

use kiln_gotmpl::{Limits, Template, Value};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(cases), Some(data)) = (args.get(1), args.get(2)) else {
        return Err("usage: render_cases CASES.json DATA.json".into());
    };
    let cases: Vec<String> = serde_json::from_str(&std::fs::read_to_string(cases)?)?;
    let data = Value::from_json(&serde_json::from_str(&std::fs::read_to_string(data)?)?);
    for c in cases {
        match Template::parse(&c) {
            Err(e) => println!("PARSE-ERR {e}"),
            Ok(t) => match t.render(&data, Limits::default()) {
                Ok(s) => println!("{}", serde_json::to_string(&s)?),
                Err(e) => println!("EXEC-ERR {e}"),
            },
        }
    }
    Ok(())
}
