//! Real-world template shapes and the edges of the language: what Go's
//! `text/template` writes for each (worked out from its documented rules),
//! and that hostile templates end in errors, not hangs.

use kiln_gotmpl::{Error, Field, Limits, Repr, Struct, Template, Value};
use std::rc::Rc;

fn msg(role: &str, content: &str) -> Value {
    Value::Struct(Rc::new(Struct {
        type_name: "*template.templateMessage",
        fields: vec![Field::new("Role", role.into()), Field::new("Content", content.into())],
        pointer: true,
        repr: Repr::Go,
    }))
}

fn data(system: &str, messages: &[(&str, &str)]) -> Value {
    Value::map([
        ("System".to_string(), system.into()),
        ("Messages".to_string(), Value::list(messages.iter().map(|(r, c)| msg(r, c)).collect())),
        ("Response".to_string(), "".into()),
    ])
}

fn render(src: &str, data: &Value) -> String {
    Template::parse(src).unwrap_or_else(|e| panic!("{src}: {e}")).render(data, Limits::default()).unwrap()
}

const CONVERSATION: &[(&str, &str)] = &[("user", "Hi"), ("assistant", "Hello!"), ("user", "Bye")];

#[test]
fn chatml() {
    let t = "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n";
    assert_eq!(
        render(t, &data("", CONVERSATION)),
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n\
         <|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n"
    );
}

#[test]
fn llama3_with_last_message_logic() {
    let t = r#"{{- if .System }}<|start_header_id|>system<|end_header_id|>

{{ .System }}<|eot_id|>
{{- end }}
{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 }}
{{- if eq .Role "user" }}<|start_header_id|>user<|end_header_id|>

{{ .Content }}<|eot_id|>{{ if $last }}<|start_header_id|>assistant<|end_header_id|>

{{ end }}
{{- else if eq .Role "assistant" }}<|start_header_id|>assistant<|end_header_id|>

{{ .Content }}{{ if not $last }}<|eot_id|>{{ end }}
{{- end }}
{{- end }}"#;
    assert_eq!(
        render(t, &data("Be kind.", CONVERSATION)),
        "<|start_header_id|>system<|end_header_id|>\n\nBe kind.<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>\
         <|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>\
         <|start_header_id|>assistant<|end_header_id|>\n\n"
    );
    // An assistant message last is left open (no end of turn).
    let open = render(t, &data("", &[("user", "Hi"), ("assistant", "Hel")]));
    assert!(open.ends_with("<|start_header_id|>assistant<|end_header_id|>\n\nHel"), "{open:?}");
}

#[test]
fn legacy_form_and_cutting_after_the_response() {
    let t = Template::parse(
        "{{ if .System }}<<SYS>>{{ .System }}<</SYS>>\n{{ end }}[INST] {{ .Prompt }} [/INST] {{ .Response }}</s>",
    )
    .unwrap();
    assert!(t.mentions("response") && t.mentions("PROMPT") && !t.mentions("messages"));
    let d = |s: &str, p: &str, r: &str| {
        Value::map([
            ("System".to_string(), s.into()),
            ("Prompt".to_string(), p.into()),
            ("Response".to_string(), r.into()),
        ])
    };
    assert_eq!(t.render(&d("S", "Hi", "Yo"), Limits::default()).unwrap(), "<<SYS>>S<</SYS>>\n[INST] Hi [/INST] Yo</s>");
    let last = t.cut_after_field("Response");
    assert_eq!(last.render(&d("", "Bye", ""), Limits::default()).unwrap(), "[INST] Bye [/INST] ");
    assert_eq!(last.render(&d("", "Bye", "Par"), Limits::default()).unwrap(), "[INST] Bye [/INST] Par");
}

#[test]
fn variables_scopes_and_assignment() {
    let t = r#"{{- $sys := "" }}{{ range .Messages }}{{ if eq .Role "system" }}{{ $sys = .Content }}{{ continue }}{{ end }}[{{ $sys }}|{{ .Content }}]{{ end }}"#;
    let d = data("", &[("system", "A"), ("user", "x"), ("system", "B"), ("user", "y")]);
    assert_eq!(render(t, &d), "[A|x][B|y]");
    let t = "{{ range $i, $m := .Messages }}{{ if ge $i 1 }}{{ break }}{{ end }}{{ $i }}:{{ $m.Role }}{{ end }}";
    assert_eq!(render(t, &data("", CONVERSATION)), "0:user");
    let t = "{{ with $x := .System }}<{{ . }}{{ $x }}>{{ else }}none{{ end }}";
    assert_eq!(render(t, &data("s", &[])), "<ss>");
    assert_eq!(render(t, &data("", &[])), "none");
    assert_eq!(render("{{ range .Messages }}x{{ else }}empty{{ end }}", &data("", &[])), "empty");
    assert_eq!(render("{{ range 3 }}{{ . }}{{ end }}", &Value::Nil), "012");
}

#[test]
fn functions_and_pipelines() {
    let d = data("", CONVERSATION);
    for (t, want) in [
        ("{{ len .Messages }}", "3"),
        ("{{ (index .Messages 1).Content }}", "Hello!"),
        ("{{ range slice .Messages 2 }}{{ .Content }}{{ end }}", "Bye"),
        (r#"{{ .System | printf "%q" }}"#, "\"\""),
        (r#"{{ "a" | printf "%s-%s" "b" }}"#, "b-a"),
        ("{{ and 1 0 2 }}|{{ or 0 \"\" \"x\" }}|{{ not .System }}", "0|x|true"),
        (r#"{{ if and (eq (len .Messages) 3) (ne .System "x") }}yes{{ end }}"#, "yes"),
        (r#"{{ eq "b" "a" "b" }}"#, "true"),
        ("{{ print 1 2 \"x\" 3 }}", "1 2x3"),
        ("{{ json .Missing }}|{{ .Missing }}", "null|<no value>"),
        ("{{- /* a comment */ -}} x {{- 1 -}} y", "x1y"),
        ("{{ index .Messages 0 }}", "&{user Hi}"),
        ("{{ json (index .Messages 0) }}", r#"{"Role":"user","Content":"Hi"}"#),
        ("{{ 1.5 }} {{ 0x10 }} {{ 'a' }} {{ -2 }} {{ 1e6 }}", "1.5 16 97 -2 1e+06"),
    ] {
        assert_eq!(render(t, &d), want, "{t}");
    }
}

#[test]
fn errors_name_line_and_column() {
    let d = data("", CONVERSATION);
    let exec = |src: &str| Template::parse(src).unwrap().render(&d, Limits::default()).unwrap_err();
    match exec("line\n  {{ range .Messages }}{{ .Nope }}{{ end }}") {
        Error::Exec { line, column, message } => {
            assert_eq!((line, column), (2, 27));
            assert_eq!(message, "can't evaluate field Nope in type *template.templateMessage");
        }
        other => panic!("{other}"),
    }
    assert!(exec("{{ .Missing.Deeper }}").to_string().contains("nil pointer evaluating interface {}.Deeper"));
    assert!(exec("{{ index .Messages 9 }}").to_string().contains("index out of range: 9"));
    assert!(exec("{{ eq 1 1.0 }}").to_string().contains("incompatible types"));
    assert!(exec("{{ range .System }}{{ end }}").to_string().contains("range can't iterate over"));
    assert!(exec("{{ .Messages 1 }}").to_string().contains("can't give argument to non-function .Messages"));
    match Template::parse("ok\n{{ if .X }}\n{{ else }}{{ else }}{{ end }}").unwrap_err() {
        Error::Parse { line, column, .. } => assert_eq!((line, column), (3, 11)),
        other => panic!("{other}"),
    }
}

#[test]
fn hostile_templates_end_in_errors() {
    let small = Limits { steps: 10_000, max_output_bytes: 1 << 20 };
    // A loop that would run 10^18 times.
    let e = Template::parse("{{ range 1000000000 }}{{ range 1000000000 }}x{{ end }}{{ end }}")
        .unwrap()
        .render(&Value::Nil, small)
        .unwrap_err();
    assert!(matches!(e, Error::Limit(_)), "{e}");
    // Output that doubles.
    let mut t = String::from("{{ $s := \"xxxxxxxx\" }}");
    for _ in 0..40 {
        t.push_str("{{ $s = printf \"%s%s\" $s $s }}");
    }
    t.push_str("{{ $s }}");
    let e = Template::parse(&t).unwrap().render(&Value::Nil, small).unwrap_err();
    assert!(matches!(e, Error::Limit(_)), "{e}");
    // Deep nesting is refused when parsing, before it can exhaust the stack.
    let deep = "{{ with 1 }}".repeat(5000) + &"{{ end }}".repeat(5000);
    assert!(Template::parse(&deep).unwrap_err().to_string().contains("too deeply"));
}

/// Mangled real templates (characters replaced, inserted, dropped; a
/// fixed-seed generator) parse or fail, and render or fail, without a panic.
#[test]
fn mangled_templates_never_panic() {
    let seeds = [
        "{{- range $i, $m := .Messages }}{{ if eq $m.Role \"user\" }}<u>{{ $m.Content }}{{ else if $m.Role }}{{ printf \"%s|%d\" .Role $i }}{{ end }}{{ end }}",
        "{{ if .System }}{{ .System }}{{ end }}[{{ .Prompt }}] {{ .Response }} {{/* note */}} {{- json (slice .Messages 1) -}} é€",
        "{{ with $x := index .Messages 0 }}{{ $x.Content | len }}{{ else }}{{ 'x' }} {{ -1.5e3 }} {{ `raw` }}{{ end }}",
    ];
    let alphabet: Vec<char> = "{}-$.()|\"'`,:= /*abcIfEnd0123456789é€\n\\".chars().collect();
    let d = data("sys", CONVERSATION);
    let limits = Limits { steps: 20_000, max_output_bytes: 1 << 16 };
    let mut state: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as usize
    };
    let (mut parsed, mut rendered) = (0, 0);
    for round in 0..6000 {
        let mut chars: Vec<char> = seeds[round % seeds.len()].chars().collect();
        for _ in 0..1 + next(4) {
            let at = next(chars.len() + 1);
            let c = alphabet[next(alphabet.len())];
            match next(3) {
                0 if at < chars.len() => chars[at] = c,
                1 if at < chars.len() => {
                    chars.remove(at);
                }
                _ => chars.insert(at, c),
            }
        }
        let src: String = chars.into_iter().collect();
        if let Ok(t) = Template::parse(&src) {
            parsed += 1;
            if t.render(&d, limits).is_ok() {
                rendered += 1;
            }
            let _ = t.cut_after_field("Response").render(&d, limits);
        }
    }
    assert!(
        parsed > 500 && rendered > 100,
        "parsed {parsed}, rendered {rendered}: the mangling is too rough to test much"
    );
}
