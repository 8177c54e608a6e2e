// kilncheck drives a server through Ollama's official Go client (package
// api), making the calls the `ollama` CLI makes for pull, list, ps, show,
// run, cp, create, rm, and prints what it got. It exits non-zero on the
// first error. OLLAMA_HOST names the server; KILNCHECK_ADAPTER, a LoRA
// adapter's directory for the model, adds `create` with an ADAPTER (the
// files uploaded as blobs, then named in `adapters`, as the CLI does).
package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ollama/ollama/api"
)

func must(what string, err error) {
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL %s: %v\n", what, err)
		os.Exit(1)
	}
	fmt.Printf("ok   %s\n", what)
}

func main() {
	model := "smollm2"
	if len(os.Args) > 1 {
		model = os.Args[1]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := api.ClientFromEnvironment()
	must("client from OLLAMA_HOST", err)

	v, err := c.Version(ctx)
	must("version "+v, err)

	var statuses []string
	err = c.Pull(ctx, &api.PullRequest{Model: model}, func(p api.ProgressResponse) error {
		if len(statuses) == 0 || statuses[len(statuses)-1] != p.Status {
			statuses = append(statuses, p.Status)
		}
		return nil
	})
	must("pull "+model+": "+strings.Join(statuses, " | "), err)

	list, err := c.List(ctx)
	must("list", err)
	for _, m := range list.Models {
		// `ollama list` and `ollama ps` slice the digest's first 12 characters as the ID.
		if len(m.Digest) < 12 {
			must("list: "+m.Name+" has a digest of 12 or more characters", fmt.Errorf("digest %q", m.Digest))
		}
		fmt.Printf("     %s %s %d %s %s %s\n", m.Name, m.Digest[:12], m.Size, m.ModifiedAt.Format(time.RFC3339), m.Details.Format, m.Details.QuantizationLevel)
	}

	show, err := c.Show(ctx, &api.ShowRequest{Model: model})
	must("show", err)
	fmt.Printf("     arch=%v caps=%v family=%s\n", show.ModelInfo["general.architecture"], show.Capabilities, show.Details.Family)

	// run MODEL PROMPT: show, load (an empty generate), then the prompt.
	must("run: load", c.Generate(ctx, &api.GenerateRequest{Model: model}, func(api.GenerateResponse) error { return nil }))
	var out strings.Builder
	stream := true
	err = c.Generate(ctx, &api.GenerateRequest{Model: model, Prompt: "Say hi.", Stream: &stream,
		Options: map[string]any{"num_predict": 8, "temperature": 0}}, func(r api.GenerateResponse) error {
		out.WriteString(r.Response)
		if r.Done {
			fmt.Printf("     done_reason=%s eval_count=%d prompt_eval_count=%d context=%d ids\n", r.DoneReason, r.EvalCount, r.PromptEvalCount, len(r.Context))
		}
		return nil
	})
	must(fmt.Sprintf("run: generate %q", out.String()), err)
	out.Reset()
	err = c.Chat(ctx, &api.ChatRequest{Model: model, Messages: []api.Message{{Role: "user", Content: "Hi!"}},
		Options: map[string]any{"num_predict": 8, "temperature": 0}}, func(r api.ChatResponse) error {
		out.WriteString(r.Message.Content)
		return nil
	})
	must(fmt.Sprintf("run: chat %q", out.String()), err)

	ps, err := c.ListRunning(ctx)
	must("ps", err)
	for _, m := range ps.Models {
		// `ollama ps` shows these as ID and CONTEXT.
		if len(m.Digest) < 12 || m.ContextLength <= 0 {
			must("ps: "+m.Name+" has an ID and a context length", fmt.Errorf("digest %q, context_length %d", m.Digest, m.ContextLength))
		}
		fmt.Printf("     %s %s %d context %d until %s\n", m.Name, m.Digest[:12], m.Size, m.ContextLength, m.ExpiresAt.Format(time.RFC3339))
	}

	must("cp "+model+" kilncheck-copy", c.Copy(ctx, &api.CopyRequest{Source: model, Destination: "kilncheck-copy"}))
	err = c.Create(ctx, &api.CreateRequest{Model: "kilncheck-made", From: model, System: "Be brief.",
		Template: "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"},
		func(p api.ProgressResponse) error { return nil })
	must("create kilncheck-made (FROM, SYSTEM, TEMPLATE)", err)
	made, err := c.Show(ctx, &api.ShowRequest{Model: "kilncheck-made"})
	must("show kilncheck-made: template "+fmt.Sprintf("%q", made.Template), err)
	out.Reset()
	err = c.Chat(ctx, &api.ChatRequest{Model: "kilncheck-made", Messages: []api.Message{{Role: "user", Content: "Hi!"}},
		Options: map[string]any{"num_predict": 8, "temperature": 0}}, func(r api.ChatResponse) error {
		out.WriteString(r.Message.Content)
		return nil
	})
	must(fmt.Sprintf("chat kilncheck-made %q", out.String()), err)

	created := []string{"kilncheck-copy", "kilncheck-made"}
	if dir := os.Getenv("KILNCHECK_ADAPTER"); dir != "" {
		createWithAdapter(ctx, c, model, dir)
		created = append(created, "kilncheck-lora")
	}

	// rm: unload (keep_alive 0), then delete.
	for _, name := range created {
		zero := api.Duration{Duration: 0}
		must("rm "+name+": unload", c.Generate(ctx, &api.GenerateRequest{Model: name, KeepAlive: &zero}, func(api.GenerateResponse) error { return nil }))
		must("rm "+name, c.Delete(ctx, &api.DeleteRequest{Model: name}))
	}
	list, err = c.List(ctx)
	must("list after rm", err)
	for _, m := range list.Models {
		if strings.HasPrefix(m.Name, "kilncheck-") {
			must("list after rm", fmt.Errorf("%s is still listed", m.Name))
		}
	}
	err = c.Pull(ctx, &api.PullRequest{Model: "no-such-model"}, func(api.ProgressResponse) error { return nil })
	if err == nil {
		must("pull of an unknown model fails", fmt.Errorf("it did not"))
	}
	fmt.Printf("ok   pull of an unknown model fails: %v\n", err)
	fmt.Println("all ok")
}

// createWithAdapter uploads the files of the adapter in dir, creates
// kilncheck-lora FROM model with it, and checks that it answers otherwise
// than the model and that show names its ADAPTER.
func createWithAdapter(ctx context.Context, c *api.Client, model, dir string) {
	entries, err := os.ReadDir(dir)
	must("read adapter "+dir, err)
	adapters := map[string]string{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		must("read "+e.Name(), err)
		digest := fmt.Sprintf("sha256:%x", sha256.Sum256(data))
		must("upload "+e.Name()+" "+digest[:19], c.CreateBlob(ctx, digest, bytes.NewReader(data)))
		adapters[e.Name()] = digest
	}
	err = c.Create(ctx, &api.CreateRequest{Model: "kilncheck-lora", From: model, Adapters: adapters},
		func(api.ProgressResponse) error { return nil })
	must("create kilncheck-lora (FROM, ADAPTER)", err)
	generate := func(name string) string {
		var b strings.Builder
		err := c.Generate(ctx, &api.GenerateRequest{Model: name, Prompt: "Name three colors.",
			Options: map[string]any{"num_predict": 12, "temperature": 0}}, func(r api.GenerateResponse) error {
			b.WriteString(r.Response)
			return nil
		})
		must("generate with "+name, err)
		return b.String()
	}
	tuned, base := generate("kilncheck-lora"), generate(model)
	if tuned == base {
		must("the adapter changes the answer", fmt.Errorf("both gave %q", tuned))
	}
	fmt.Printf("ok   kilncheck-lora answers %q, %s %q\n", tuned, model, base)
	shown, err := c.Show(ctx, &api.ShowRequest{Model: "kilncheck-lora"})
	must("show kilncheck-lora", err)
	if !strings.Contains(shown.Modelfile, "\nADAPTER ") {
		must("show kilncheck-lora names its ADAPTER", fmt.Errorf("modelfile %q", shown.Modelfile))
	}
	fmt.Printf("ok   show kilncheck-lora: parent %s, %q\n", shown.Details.ParentModel, strings.SplitN(shown.Modelfile, "\n", 3)[1])
}
