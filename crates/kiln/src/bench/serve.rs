//! `kiln bench serve`: load-tests an OpenAI-compatible server with N
//! concurrent streaming clients and reports aggregate throughput, TTFT and
//! inter-token latency percentiles, and errors.
//!
//! A token "arrives" with each streamed chunk that carries text; the number
//! of generated tokens is the server's `usage.completion_tokens` when it
//! reports usage, else the number of such chunks.

use std::io::{BufRead, BufReader};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

use super::stats::{gaps_ms, Summary};
use super::system::load_avg;
use super::workload::{self, BodyParams, Workload};

/// Arguments of `kiln bench serve`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ServeBenchArgs {
    /// Base URL of the server (without `/v1`).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// Concurrent streaming clients.
    #[arg(long, default_value_t = 1)]
    concurrency: usize,
    /// Measured requests in total.
    #[arg(long, default_value_t = 16)]
    requests: usize,
    /// Prompt length (question length for chat workloads), in ~tokens.
    #[arg(long, default_value_t = 128)]
    prompt_len: usize,
    /// `max_tokens` of every request (EOS ignored where the server allows).
    #[arg(long, default_value_t = 128)]
    gen_len: usize,
    /// Workload.
    #[arg(long, value_enum, default_value = "random")]
    workload: Workload,
    /// Shared system prompt length for `shared-prefix`, in ~tokens.
    #[arg(long, default_value_t = 1000)]
    prefix_len: usize,
    /// Turns per conversation for `multi-turn`.
    #[arg(long, default_value_t = 4)]
    turns: usize,
    /// `model` field sent with every request.
    #[arg(long, default_value = "default")]
    model: String,
    /// Seed of the generated text.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Unmeasured requests sent first, one at a time.
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Per-request read timeout in seconds.
    #[arg(long, default_value_t = 600)]
    timeout_s: u64,
    /// Print the result as JSON on stdout (the table goes to stderr).
    #[arg(long)]
    json: bool,
}

/// What one request saw.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Outcome {
    /// Why it failed, if it did.
    pub(crate) error: Option<String>,
    /// Send to first text chunk, ms.
    pub(crate) ttft_ms: f64,
    /// Gaps between text chunks, ms.
    pub(crate) itl_ms: Vec<f64>,
    /// Generated tokens.
    pub(crate) gen_tokens: usize,
    /// Prompt tokens as reported by the server.
    pub(crate) prompt_tokens: Option<usize>,
    /// Send to end of stream, ms.
    pub(crate) latency_ms: f64,
    /// The generated text.
    pub(crate) text: String,
}

/// The text of one streamed chunk (`/v1/completions` or chat delta).
fn chunk_text(v: &Value) -> Option<&str> {
    let c = v.get("choices")?.get(0)?;
    c.get("text").and_then(Value::as_str).or_else(|| c.get("delta")?.get("content")?.as_str())
}

/// Sends one streaming request and reads its events.
pub(crate) fn stream_one(agent: &ureq::Agent, url: &str, body: &Value) -> Outcome {
    let start = Instant::now();
    let mut out = Outcome::default();
    let resp = match agent.post(url).set("Content-Type", "application/json").send_string(&body.to_string()) {
        Ok(r) => r,
        Err(ureq::Error::Status(code, r)) => {
            let text = r.into_string().unwrap_or_default();
            out.error = Some(format!("HTTP {code}: {}", text.chars().take(200).collect::<String>()));
            return out;
        }
        Err(e) => {
            out.error = Some(e.to_string());
            return out;
        }
    };
    let mut arrivals = Vec::new();
    let mut usage_tokens = None;
    let mut done = false;
    for line in BufReader::new(resp.into_reader()).lines() {
        let line = match line {
            Ok(l) => l,
            Err(e) => {
                out.error = Some(format!("reading the stream: {e}"));
                break;
            }
        };
        let Some(data) = line.strip_prefix("data:").map(str::trim) else { continue };
        if data == "[DONE]" {
            done = true;
            break;
        }
        let Ok(v) = serde_json::from_str::<Value>(data) else { continue };
        if let Some(e) = v.get("error") {
            out.error = Some(format!("server error: {e}"));
            break;
        }
        if let Some(t) = chunk_text(&v).filter(|t| !t.is_empty()) {
            arrivals.push(Instant::now());
            out.text.push_str(t);
        }
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            usage_tokens = u.get("completion_tokens").and_then(Value::as_u64).map(|x| x as usize);
            out.prompt_tokens = u.get("prompt_tokens").and_then(Value::as_u64).map(|x| x as usize);
        }
    }
    out.latency_ms = start.elapsed().as_secs_f64() * 1e3;
    if out.error.is_none() && !done {
        out.error = Some("the stream ended without [DONE]".into());
    }
    out.ttft_ms = arrivals.first().map_or(f64::NAN, |t| t.duration_since(start).as_secs_f64() * 1e3);
    out.itl_ms = gaps_ms(&arrivals);
    out.gen_tokens = usage_tokens.unwrap_or(arrivals.len());
    out
}

/// Aggregate results of a serving run.
#[derive(Debug, Clone)]
pub(crate) struct ServeReport {
    /// Outcomes in completion order.
    pub(crate) outcomes: Vec<Outcome>,
    /// Wall time of the measured phase, s.
    pub(crate) wall_s: f64,
}

impl ServeReport {
    fn ok(&self) -> impl Iterator<Item = &Outcome> {
        self.outcomes.iter().filter(|o| o.error.is_none())
    }
    /// The result as one flat JSON object.
    pub(crate) fn to_json(&self, a: &ServeBenchArgs) -> Value {
        let ok: Vec<&Outcome> = self.ok().collect();
        let gen: usize = ok.iter().map(|o| o.gen_tokens).sum();
        let ttft = Summary::of(&ok.iter().map(|o| o.ttft_ms).collect::<Vec<_>>());
        let itl = Summary::of(&ok.iter().flat_map(|o| o.itl_ms.iter().copied()).collect::<Vec<_>>());
        let lat = Summary::of(&ok.iter().map(|o| o.latency_ms).collect::<Vec<_>>());
        let prompt = Summary::of(&ok.iter().filter_map(|o| o.prompt_tokens.map(|x| x as f64)).collect::<Vec<_>>());
        let n = |x: f64| if x.is_finite() { json!(x) } else { Value::Null };
        let errors = self.outcomes.len() - ok.len();
        json!({
            "url": a.url, "workload": a.workload.to_possible_value().map(|v| v.get_name().to_string()), "concurrency": a.concurrency,
            "requests": self.outcomes.len(), "ok": ok.len(), "errors": errors,
            "first_error": self.outcomes.iter().find_map(|o| o.error.clone()),
            "prompt_len": a.prompt_len, "gen_len": a.gen_len, "prompt_tokens_mean": n(prompt.mean),
            "gen_tokens_total": gen, "wall_s": n(self.wall_s),
            "output_tok_s": n(gen as f64 / self.wall_s), "requests_per_s": n(ok.len() as f64 / self.wall_s),
            "ttft_ms_p50": n(ttft.p50), "ttft_ms_p90": n(ttft.p90), "ttft_ms_p99": n(ttft.p99),
            "itl_ms_p50": n(itl.p50), "itl_ms_p90": n(itl.p90), "itl_ms_p99": n(itl.p99),
            "latency_ms_p50": n(lat.p50), "latency_ms_p90": n(lat.p90), "latency_ms_p99": n(lat.p99),
            "load_avg_1m": load_avg()[0],
        })
    }
}

/// Human-readable summary of [`ServeReport::to_json`].
fn table(j: &Value) -> String {
    let f = |k: &str| j.get(k).and_then(Value::as_f64).map_or("-".to_string(), |x| format!("{x:.1}"));
    format!(
        "{} workload={} concurrency={} requests={} ok={} errors={} (load {})\n\
         throughput: {} output tok/s, {} requests/s, wall {} s, prompt ~{} tokens\n\
         TTFT ms p50/p90/p99: {}/{}/{}   ITL ms p50/p90/p99: {}/{}/{}   latency ms p50/p90/p99: {}/{}/{}\n{}",
        j["url"].as_str().unwrap_or(""),
        j["workload"].as_str().unwrap_or(""),
        j["concurrency"],
        j["requests"],
        j["ok"],
        j["errors"],
        f("load_avg_1m"),
        f("output_tok_s"),
        f("requests_per_s"),
        f("wall_s"),
        f("prompt_tokens_mean"),
        f("ttft_ms_p50"),
        f("ttft_ms_p90"),
        f("ttft_ms_p99"),
        f("itl_ms_p50"),
        f("itl_ms_p90"),
        f("itl_ms_p99"),
        f("latency_ms_p50"),
        f("latency_ms_p90"),
        f("latency_ms_p99"),
        j["first_error"].as_str().map(|e| format!("first error: {e}\n")).unwrap_or_default(),
    )
}

/// Runs the measured phase: `concurrency` clients share `requests` requests.
pub(crate) fn drive(a: &ServeBenchArgs, bar: &ProgressBar) -> Result<ServeReport> {
    let base = a.url.trim_end_matches('/').trim_end_matches("/v1").to_string();
    let agent = ureq::AgentBuilder::new()
        .timeout_connect(Duration::from_secs(10))
        .timeout_read(Duration::from_secs(a.timeout_s))
        .build();
    let p = BodyParams {
        model: a.model.clone(),
        gen_len: a.gen_len,
        prompt_len: a.prompt_len,
        prefix_len: a.prefix_len,
        turns: a.turns.max(1),
        seed: a.seed,
    };
    let system = workload::system_prompt(&p);
    let endpoint = |w: Workload| {
        if w == Workload::Random {
            format!("{base}/v1/completions")
        } else {
            format!("{base}/v1/chat/completions")
        }
    };
    let url = endpoint(a.workload);
    for w in 0..a.warmup {
        let o = stream_one(&agent, &url, &workload::chat_or_completion_warmup(&p, a.workload, w));
        if let Some(e) = o.error {
            bail!("warm-up request to {url} failed: {e}");
        }
    }
    let next = AtomicUsize::new(0);
    let outcomes = Mutex::new(Vec::with_capacity(a.requests));
    let start = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..a.concurrency.max(1) {
            s.spawn(|| {
                let mut history: Vec<Value> = Vec::new();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= a.requests {
                        break;
                    }
                    let body = match a.workload {
                        Workload::Random => workload::completion_body(&p, i),
                        Workload::SharedPrefix => {
                            workload::chat_body(&p, &workload::shared_prefix_messages(&p, &system, i))
                        }
                        Workload::MultiTurn => {
                            if history.len() >= 2 * p.turns {
                                history.clear();
                            }
                            history.push(json!({"role": "user", "content": workload::question(&p, i)}));
                            workload::chat_body(&p, &history)
                        }
                    };
                    let o = stream_one(&agent, &url, &body);
                    if a.workload == Workload::MultiTurn {
                        history.push(json!({"role": "assistant", "content": o.text}));
                    }
                    bar.inc(1);
                    if let Ok(mut v) = outcomes.lock() {
                        v.push(o);
                    }
                }
            });
        }
    });
    let wall_s = start.elapsed().as_secs_f64();
    let outcomes = outcomes.into_inner().unwrap_or_default();
    Ok(ServeReport { outcomes, wall_s })
}

/// Runs `kiln bench serve`.
pub(crate) fn run(a: ServeBenchArgs) -> Result<()> {
    if a.requests == 0 || a.gen_len == 0 {
        bail!("--requests and --gen-len must be positive");
    }
    let bar = ProgressBar::new(a.requests as u64);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} requests")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let report = drive(&a, &bar)?;
    bar.finish_and_clear();
    let j = report.to_json(&a);
    if a.json {
        eprint!("{}", table(&j));
        println!("{}", serde_json::to_string_pretty(&j)?);
    } else {
        print!("{}", table(&j));
    }
    if report.ok().next().is_none() {
        bail!("every request failed");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A fake OpenAI server: answers every request with `tokens` streamed
    /// chunks (completion or chat shape by path) and a usage chunk.
    fn fake_server(tokens: usize, status: u16) -> (String, std::thread::JoinHandle<Vec<String>>) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        let addr = l.local_addr().map(|a| a.to_string()).unwrap_or_default();
        let h = std::thread::spawn(move || {
            let mut bodies = Vec::new();
            l.set_nonblocking(false).ok();
            for conn in l.incoming() {
                let Ok(mut c) = conn else { break };
                let mut buf = vec![0u8; 1 << 20];
                let mut n = 0;
                // Read headers and the body (Content-Length).
                while let Ok(k) = c.read(&mut buf[n..]) {
                    n += k;
                    let s = String::from_utf8_lossy(&buf[..n]).to_string();
                    if let Some(hdr_end) = s.find("\r\n\r\n") {
                        let len = s
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length:")
                                    .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if n >= hdr_end + 4 + len || k == 0 {
                            bodies.push(s[hdr_end + 4..].to_string());
                            break;
                        }
                    }
                    if k == 0 {
                        break;
                    }
                }
                let req = bodies.last().cloned().unwrap_or_default();
                if req.contains("\"STOP\"") {
                    let _ = c.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                    break;
                }
                if status != 200 {
                    let _ = c.write_all(
                        format!("HTTP/1.1 {status} Nope\r\nContent-Length: 4\r\nConnection: close\r\n\r\nnope")
                            .as_bytes(),
                    );
                    continue;
                }
                let chat = req.contains("\"messages\"");
                let mut out =
                    String::from("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n");
                for i in 0..tokens {
                    let chunk = if chat {
                        json!({"choices": [{"delta": {"content": format!("w{i} ")}}]})
                    } else {
                        json!({"choices": [{"text": format!("w{i} ")}]})
                    };
                    out.push_str(&format!("data: {chunk}\n\n"));
                }
                out.push_str(&format!(
                    "data: {}\n\n",
                    json!({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": tokens}})
                ));
                out.push_str("data: [DONE]\n\n");
                let _ = c.write_all(out.as_bytes());
            }
            bodies
        });
        (format!("http://{addr}"), h)
    }

    fn stop(url: &str) {
        let _ = ureq::post(&format!("{url}/v1/completions")).send_string("{\"model\":\"STOP\"}");
    }

    fn args(url: &str, w: Workload) -> ServeBenchArgs {
        ServeBenchArgs {
            url: url.into(),
            concurrency: 2,
            requests: 6,
            prompt_len: 8,
            gen_len: 5,
            workload: w,
            prefix_len: 20,
            turns: 2,
            model: "m".into(),
            seed: 1,
            warmup: 1,
            timeout_s: 10,
            json: true,
        }
    }

    #[test]
    fn drives_a_fake_server_for_every_workload() -> Result<()> {
        for w in [Workload::Random, Workload::SharedPrefix, Workload::MultiTurn] {
            let (url, h) = fake_server(5, 200);
            let a = args(&url, w);
            let r = drive(&a, &ProgressBar::hidden())?;
            stop(&url);
            let bodies = h.join().unwrap_or_default();
            assert_eq!(bodies.len(), 1 + 6 + 1, "warm-up + requests + stop");
            let j = r.to_json(&a);
            assert_eq!(j["ok"], json!(6), "{w:?}: {j}");
            assert_eq!(j["errors"], json!(0));
            assert_eq!(j["gen_tokens_total"], json!(30));
            assert_eq!(j["prompt_tokens_mean"], json!(11.0));
            assert!(j["output_tok_s"].as_f64().unwrap_or(0.0) > 0.0);
            assert!(j["itl_ms_p50"].as_f64().is_some());
            if w == Workload::MultiTurn {
                // Some request carried a previous assistant answer.
                assert!(bodies.iter().any(|b| b.contains("\"assistant\"") && b.contains("w0 ")), "history not resent");
            }
            if w == Workload::SharedPrefix {
                assert!(bodies.iter().skip(1).take(6).all(|b| b.contains("Background:")));
            }
        }
        Ok(())
    }

    #[test]
    fn http_errors_are_counted_not_fatal() -> Result<()> {
        let (url, h) = fake_server(3, 503);
        let mut a = args(&url, Workload::Random);
        a.warmup = 0;
        let r = drive(&a, &ProgressBar::hidden())?;
        stop(&url);
        let _ = h.join();
        let j = r.to_json(&a);
        assert_eq!(j["errors"], json!(6));
        assert!(j["first_error"].as_str().unwrap_or("").contains("HTTP 503"), "{j}");
        Ok(())
    }

    #[test]
    fn unreachable_server_fails_the_warm_up() {
        let a = args("http://127.0.0.1:9", Workload::Random);
        let e = drive(&a, &ProgressBar::hidden()).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("warm-up request"), "{e}");
    }

    #[test]
    fn chunk_text_shapes() {
        assert_eq!(chunk_text(&json!({"choices": [{"text": "a"}]})), Some("a"));
        assert_eq!(chunk_text(&json!({"choices": [{"delta": {"content": "b"}}]})), Some("b"));
        assert_eq!(chunk_text(&json!({"choices": [{"delta": {"role": "assistant"}}]})), None);
        assert_eq!(chunk_text(&json!({"choices": []})), None);
    }
}
