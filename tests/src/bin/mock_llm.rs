//! `nanobot-mock-llm`: a fast OpenAI-compatible (and Anthropic-compatible) server for
//! benchmarks and manual runs. Replies `echo: <last user message>` unless `--reply` is given;
//! with `--tool-calls N` every turn first asks for N sequential tool calls.
#![forbid(unsafe_code)]

use std::io::Write as _;
use std::time::Duration;

use clap::Parser;
use serde_json::json;

use nanobot_tests::scripted_llm::{Reply, ScriptedLlm};

/// A scripted LLM endpoint on 127.0.0.1.
#[derive(Debug, Parser)]
#[command(name = "nanobot-mock-llm", version)]
struct Args {
    /// Port to listen on (0 picks a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Delay before every reply, in milliseconds.
    #[arg(long, default_value_t = 0)]
    latency_ms: u64,
    /// Fixed reply text (default: echo the last user message).
    #[arg(long)]
    reply: Option<String>,
    /// Answers each turn with this many sequential tool calls (one per LLM call, alternating
    /// `read_file` of `--tool-file` and `list_dir` of `.`) before the final reply.
    #[arg(long, default_value_t = 0)]
    tool_calls: usize,
    /// File the `read_file` calls of `--tool-calls` read, relative to the workspace.
    #[arg(long, default_value = "notes.txt")]
    tool_file: String,
}

/// Returns the replies of one tool-heavy turn: `calls` single tool calls, then `last`. The
/// n-th LLM call of a turn gets the n-th reply, so parallel sessions stay independent.
fn tool_turn(calls: usize, file: &str, delay: Option<Duration>, last: Reply) -> Vec<Reply> {
    let mut replies = Vec::with_capacity(calls + 1);
    for i in 0..calls {
        let call = if i.is_multiple_of(2) {
            ("read_file", json!({"path": file}))
        } else {
            ("list_dir", json!({"path": "."}))
        };
        let reply = Reply::tool_calls([call]);
        replies.push(match delay {
            Some(d) => reply.with_delay(d),
            None => reply,
        });
    }
    replies.push(last);
    replies
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut reply = args.reply.map_or_else(Reply::echo, Reply::text);
    let delay = (args.latency_ms > 0).then(|| Duration::from_millis(args.latency_ms));
    if let Some(delay) = delay {
        reply = reply.with_delay(delay);
    }
    let llm = ScriptedLlm::builder()
        .port(args.port)
        .fallback(reply.clone())
        .record(false)
        .start()
        .await?;
    if args.tool_calls > 0 {
        // Every user message contains "", so the rule applies to every turn.
        let turn = tool_turn(args.tool_calls, &args.tool_file, delay, reply);
        llm.when_last_user_contains_seq("", turn);
    }
    let mut stdout = std::io::stdout();
    writeln!(stdout, "listening on {}", llm.base_url())?;
    stdout.flush()?;
    wait_for_signal().await?;
    writeln!(stdout, "served {} requests", llm.request_count())?;
    Ok(())
}

async fn wait_for_signal() -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        r = tokio::signal::ctrl_c() => r?,
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;

    async fn call(http: &reqwest::Client, base: &str, messages: &Value) -> Value {
        let body = json!({"model": "m", "messages": messages});
        let url = format!("{base}/chat/completions");
        let response = http.post(url).json(&body).send().await.unwrap();
        response.json().await.unwrap()
    }

    #[tokio::test]
    async fn tool_calls_mode_asks_for_sequential_tool_calls_then_replies() {
        let llm = ScriptedLlm::builder().record(false).start().await.unwrap();
        llm.when_last_user_contains_seq("", tool_turn(3, "a.txt", None, Reply::echo()));
        let http = reqwest::Client::new();
        let mut messages = vec![json!({"role": "user", "content": "hi"})];
        let mut names = Vec::new();
        for _ in 0..3 {
            let out = call(&http, &llm.base_url(), &Value::from(messages.clone())).await;
            let message = out.pointer("/choices/0/message").unwrap().clone();
            let calls = message["tool_calls"].as_array().unwrap();
            assert_eq!(calls.len(), 1, "one call per LLM call: {out}");
            names.push(calls[0].pointer("/function/name").unwrap().clone());
            let id = calls[0]["id"].clone();
            messages.push(message);
            messages.push(json!({"role": "tool", "tool_call_id": id, "content": "ok"}));
        }
        assert_eq!(
            names,
            [json!("read_file"), json!("list_dir"), json!("read_file")]
        );
        let last = call(&http, &llm.base_url(), &Value::from(messages)).await;
        assert_eq!(
            last.pointer("/choices/0/message/content"),
            Some(&json!("echo: hi"))
        );
        assert_eq!(
            last.pointer("/choices/0/finish_reason"),
            Some(&json!("stop"))
        );
        // A new turn (a new user message) starts the sequence again.
        let fresh = json!([{"role": "user", "content": "again"}]);
        let first = call(&http, &llm.base_url(), &fresh).await;
        let args = first
            .pointer("/choices/0/message/tool_calls/0/function/arguments")
            .unwrap();
        assert_eq!(args, &json!("{\"path\":\"a.txt\"}"));
    }
}
