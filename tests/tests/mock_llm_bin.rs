//! `nanobot-mock-llm` as a process: announces its URL, answers with the fixed reply after the
//! configured latency, and exits 0 on SIGTERM.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use nanobot_tests::harness::{ServiceProc, wait_until};

#[tokio::test]
async fn mock_llm_prints_its_url_replies_after_latency_and_stops_on_sigterm() {
    let bin = Path::new(env!("CARGO_BIN_EXE_nanobot-mock-llm"));
    let mut proc =
        ServiceProc::spawn_program(bin, &["--latency-ms", "150", "--reply", "pong"], &[]).unwrap();
    let announced = || {
        proc.logs()
            .lines()
            .find_map(|l| l.strip_prefix("listening on ").map(String::from))
    };
    wait_until(|| async { announced().is_some() }, Duration::from_secs(10))
        .await
        .unwrap();
    let base = announced().unwrap();
    assert!(
        base.starts_with("http://127.0.0.1:") && base.ends_with("/v1"),
        "{base}"
    );

    let started = Instant::now();
    let body: Value = reqwest::Client::new()
        .post(format!("{base}/chat/completions"))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "ping"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(150));
    assert_eq!(body["choices"][0]["message"]["content"], "pong");

    proc.sigterm().unwrap();
    let status = proc
        .wait_exit(Duration::from_secs(5))
        .await
        .expect("exits on sigterm");
    assert!(status.success(), "{status}: {}", proc.logs());
    assert!(proc.logs().contains("served 1 requests"));
}
