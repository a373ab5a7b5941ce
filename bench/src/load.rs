//! The HTTP load generator: closed-loop sessions against `POST /v1/chat/completions` on
//! loopback, bounded by a request count and a wall-clock window, whichever ends first.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::stats::{self, Summary};

/// One load run: `concurrency` sessions each send a turn, wait for the reply and send the next.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    /// Client sessions running at once (each one request in flight).
    pub concurrency: usize,
    /// Measured requests in total (the run stops when they are issued and answered).
    pub requests: usize,
    /// Unmeasured requests sent first (at most `concurrency` at once).
    pub warmup: usize,
    /// Wall-clock cap of the measured phase; requests still in flight then are abandoned
    /// and counted as unfinished.
    pub window: Duration,
    /// A client session moves to a fresh session id after this many turns, so history (and
    /// with it the prompt) stays short and alike for both systems.
    pub turns_per_session: usize,
    /// Prefix of every `session_id`, unique per run.
    pub session_prefix: String,
}

/// What a load run measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadResult {
    /// Sessions at once.
    pub concurrency: usize,
    /// Turns answered with 200 and the expected reply.
    pub ok: usize,
    /// Turns answered with an error status or an unexpected body.
    pub errors: usize,
    /// Turns still in flight when the window closed.
    pub unfinished: usize,
    /// Seconds from the first measured request to the last answer (or the window's end).
    pub elapsed_s: f64,
    /// Answered turns per second.
    pub turns_per_s: f64,
    /// Latency of the answered turns (unfinished ones are not in it).
    pub latency: Summary,
    /// The first error seen, for the report.
    pub first_error: Option<String>,
}

/// Returns a client sized for `concurrency` connections to one host.
pub fn client(concurrency: usize) -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency.max(1))
        .tcp_nodelay(true)
        .no_proxy()
        .build()
        .context("build the http client")
}

/// What every expected reply mentions (the mock echoes the prompt, the probe names it).
const EXPECTED: &str = "benchmark turn";

/// Returns the request body of one turn; identical for both systems.
pub fn turn_body(session_id: &str, n: usize) -> Value {
    json!({
        "messages": [{"role": "user", "content": format!("benchmark turn {n}: say hello")}],
        "session_id": session_id,
    })
}

/// Sends one turn and checks the reply is a completion with text; returns the error text.
pub async fn send_turn(
    client: &reqwest::Client,
    url: &str,
    body: &Value,
    timeout: Duration,
) -> Result<String, String> {
    let response = client
        .post(url)
        .json(body)
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| format!("send: {e}"))?;
    let status = response.status();
    let text = response.text().await.map_err(|e| format!("read: {e}"))?;
    if !status.is_success() {
        return Err(format!("status {status}: {}", clip(&text)));
    }
    let parsed: Value = serde_json::from_str(&text).map_err(|e| format!("json: {e}"))?;
    // Both the mock (echo) and the probe mention the prompt; anything else (e.g. upstream's
    // "Error calling LLM: …" answered with status 200) is an error.
    match parsed
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
    {
        Some(content) if content.contains(EXPECTED) => Ok(content.to_string()),
        _ => Err(format!("unexpected reply: {}", clip(&text))),
    }
}

fn clip(text: &str) -> String {
    text.chars().take(200).collect()
}

/// Runs `spec` against the API at `base` (`http://127.0.0.1:PORT`).
pub async fn run(base: &str, spec: &LoadSpec) -> anyhow::Result<LoadResult> {
    let url = format!("{base}/v1/chat/completions");
    let client = client(spec.concurrency)?;
    if spec.warmup > 0 {
        let warm = LoadSpec {
            concurrency: spec.concurrency.min(spec.warmup),
            requests: spec.warmup,
            warmup: 0,
            session_prefix: format!("{}-warm", spec.session_prefix),
            ..spec.clone()
        };
        phase(&client, &url, &warm).await;
    }
    Ok(phase(&client, &url, spec).await)
}

#[derive(Debug, Default)]
struct Tally {
    latencies: Vec<Duration>,
    errors: usize,
    unfinished: usize,
    last_done: Option<Instant>,
    first_error: Option<String>,
}

async fn phase(client: &reqwest::Client, url: &str, spec: &LoadSpec) -> LoadResult {
    let issued = Arc::new(AtomicUsize::new(0));
    let tally = Arc::new(Mutex::new(Tally::default()));
    let start = Instant::now();
    let end = start + spec.window;
    let mut workers = Vec::with_capacity(spec.concurrency);
    for worker in 0..spec.concurrency {
        let (client, url, spec) = (client.clone(), url.to_string(), spec.clone());
        let (issued, tally) = (issued.clone(), tally.clone());
        workers.push(tokio::spawn(async move {
            session_loop(worker, &client, &url, &spec, &issued, &tally, end).await;
        }));
    }
    for worker in workers {
        // A worker only ends by returning; a panic would be a bug in this file.
        let _ = worker.await;
    }
    let tally = std::mem::take(&mut *tally.lock().unwrap_or_else(PoisonError::into_inner));
    let finished_at = if tally.unfinished > 0 {
        end
    } else {
        tally.last_done.unwrap_or(end)
    };
    let elapsed = finished_at.duration_since(start).as_secs_f64().max(1e-9);
    LoadResult {
        concurrency: spec.concurrency,
        ok: tally.latencies.len(),
        errors: tally.errors,
        unfinished: tally.unfinished,
        elapsed_s: elapsed,
        turns_per_s: tally.latencies.len() as f64 / elapsed,
        latency: stats::summarize(&tally.latencies),
        first_error: tally.first_error,
    }
}

async fn session_loop(
    worker: usize,
    client: &reqwest::Client,
    url: &str,
    spec: &LoadSpec,
    issued: &AtomicUsize,
    tally: &Mutex<Tally>,
    end: Instant,
) {
    let mut turn = 0usize;
    loop {
        let n = issued.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        if n >= spec.requests || now >= end {
            return;
        }
        let session = format!(
            "{}-w{worker}-s{}",
            spec.session_prefix,
            turn / spec.turns_per_session.max(1)
        );
        turn += 1;
        let body = turn_body(&session, n);
        let outcome = send_turn(client, url, &body, end.duration_since(now)).await;
        let done = Instant::now();
        let mut t = tally.lock().unwrap_or_else(PoisonError::into_inner);
        match outcome {
            Ok(_) => {
                t.latencies.push(done.duration_since(now));
                t.last_done = Some(done);
            }
            Err(_) if done >= end => t.unfinished += 1,
            Err(e) => {
                t.errors += 1;
                t.last_done = Some(done);
                t.first_error.get_or_insert(e);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use axum::Router;
    use axum::extract::State;
    use axum::routing::post;

    use super::*;

    /// What the fake API answers.
    #[derive(Clone, Copy)]
    enum Answer {
        Echo,
        LlmError,
        Hang,
    }

    type Seen = Arc<Mutex<Vec<String>>>;

    async fn api(answer: Answer) -> (String, Seen) {
        let seen: Seen = Arc::default();
        let handler = |State((answer, seen)): State<(Answer, Seen)>, body: String| async move {
            let parsed: Value = serde_json::from_str(&body).unwrap();
            let session = parsed["session_id"].as_str().unwrap().to_string();
            seen.lock().unwrap().push(session);
            let text = parsed
                .pointer("/messages/0/content")
                .unwrap()
                .as_str()
                .unwrap();
            let content = match answer {
                Answer::Echo => format!("echo: {text}"),
                Answer::LlmError => "Error calling LLM: stream ended".into(),
                Answer::Hang => {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    String::new()
                }
            };
            axum::Json(json!({"choices": [{"message": {"content": content}}]}))
        };
        let app = Router::new()
            .route("/v1/chat/completions", post(handler))
            .with_state((answer, seen.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (base, seen)
    }

    fn spec(concurrency: usize, requests: usize, window: Duration) -> LoadSpec {
        LoadSpec {
            concurrency,
            requests,
            warmup: 2,
            window,
            turns_per_session: 2,
            session_prefix: "t".into(),
        }
    }

    #[tokio::test]
    async fn counts_answered_turns_and_rotates_sessions() {
        let (base, seen) = api(Answer::Echo).await;
        let result = run(&base, &spec(4, 20, Duration::from_secs(10)))
            .await
            .unwrap();
        assert_eq!((result.ok, result.errors, result.unfinished), (20, 0, 0));
        assert_eq!(result.latency.count, 20);
        assert!(result.turns_per_s > 0.0);
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 22, "2 warm-up turns and 20 measured ones");
        let measured: BTreeSet<&String> = seen.iter().filter(|s| !s.contains("warm")).collect();
        // 4 sessions × 5 turns, a fresh session id every 2 turns: at least 12 ids.
        assert!(measured.len() >= 12, "sessions rotate: {measured:?}");
    }

    #[tokio::test]
    async fn llm_errors_answered_with_200_are_errors() {
        let (base, _) = api(Answer::LlmError).await;
        let result = run(&base, &spec(2, 6, Duration::from_secs(10)))
            .await
            .unwrap();
        assert_eq!((result.ok, result.errors), (0, 6));
        assert!(result.first_error.unwrap().contains("Error calling LLM"));
    }

    #[tokio::test]
    async fn turns_still_running_when_the_window_closes_are_unfinished() {
        let (base, _) = api(Answer::Hang).await;
        let mut hung = spec(3, 100, Duration::from_millis(300));
        hung.warmup = 0;
        let started = Instant::now();
        let result = run(&base, &hung).await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the window bounds the run"
        );
        assert_eq!((result.ok, result.errors, result.unfinished), (0, 0, 3));
        assert!((result.elapsed_s - 0.3).abs() < 0.2);
    }
}
