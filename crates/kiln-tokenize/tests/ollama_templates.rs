//! Against Ollama's own templates and test data, when a checkout of its
//! source is at hand (not in CI: kiln does not carry Ollama's files):
//!
//! ```sh
//! KILN_OLLAMA_SRC=~/src/ollama cargo test -p kiln-tokenize --test ollama_templates -- --ignored
//! ```
//!
//! Every `template/*.gotmpl` must render the three conversations of
//! Ollama's template test exactly as `template/testdata/NAME/CASE` holds.

use kiln_tokenize::{ChatMessage, GoChatTemplate};

#[test]
#[ignore = "needs KILN_OLLAMA_SRC, a checkout of Ollama's source"]
fn ollamas_templates_render_as_its_test_data_says() {
    let Ok(src) = std::env::var("KILN_OLLAMA_SRC") else { panic!("set KILN_OLLAMA_SRC") };
    let dir = std::path::Path::new(&src).join("template");
    let (hello, answer, ask) = (
        "Hello, how are you?",
        "I'm doing great. How can I help you today?",
        "I'd like to show off how chat templating works!",
    );
    let cases = [
        ("user", vec![ChatMessage::new("user", hello)]),
        (
            "user-assistant-user",
            vec![ChatMessage::new("user", hello), ChatMessage::new("assistant", answer), ChatMessage::new("user", ask)],
        ),
        (
            "system-user-assistant-user",
            vec![
                ChatMessage::new("system", "You are a helpful assistant."),
                ChatMessage::new("user", hello),
                ChatMessage::new("assistant", answer),
                ChatMessage::new("user", ask),
            ],
        ),
    ];
    let (mut checked, mut wrong) = (0, Vec::new());
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "gotmpl") {
            continue;
        }
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let template = GoChatTemplate::parse(&std::fs::read_to_string(&path).unwrap().replace("\r\n", "\n"))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for (case, messages) in &cases {
            let Ok(want) = std::fs::read_to_string(dir.join("testdata").join(&name).join(case)) else { continue };
            checked += 1;
            let got = template.render(messages, None, &Default::default()).unwrap();
            if got != want {
                wrong.push(format!("{name}/{case}:\n want {want:?}\n  got {got:?}"));
            }
        }
    }
    assert!(checked > 0, "no templates under {}", dir.display());
    assert!(wrong.is_empty(), "{} of {checked} differ:\n{}", wrong.len(), wrong.join("\n"));
    println!("{checked} renders match");
}
