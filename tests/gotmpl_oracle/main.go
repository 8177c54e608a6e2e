// Go's own text/template as the oracle for kiln-gotmpl: renders each
// template of a JSON list (the first argument) over a JSON data file (the
// second), with Ollama's options (missingkey=zero) and its `json`
// function, and prints one line per template as render_cases does
// (scripts/check-gotmpl-with-go.sh compares the two).
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"text/template"
)

func main() {
	var cases []string
	b, _ := os.ReadFile(os.Args[1])
	json.Unmarshal(b, &cases)
	var data map[string]any
	d, _ := os.ReadFile(os.Args[2])
	json.Unmarshal(d, &data)
	funcs := template.FuncMap{"json": func(v any) string { b, _ := json.Marshal(v); return string(b) }}
	for _, c := range cases {
		t, err := template.New("").Option("missingkey=zero").Funcs(funcs).Parse(c)
		if err != nil {
			fmt.Println("PARSE-ERR", err)
			continue
		}
		var out bytes.Buffer
		if err := t.Execute(&out, data); err != nil {
			fmt.Println("EXEC-ERR", err)
			continue
		}
		s, _ := json.Marshal(out.String())
		fmt.Println(string(s))
	}
}
