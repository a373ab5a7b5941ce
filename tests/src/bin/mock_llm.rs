//! `nanobot-mock-llm`: a fast OpenAI-compatible (and Anthropic-compatible) server for
//! benchmarks and manual runs. Replies `echo: <last user message>` unless `--reply` is given.
#![forbid(unsafe_code)]

use std::io::Write as _;
use std::time::Duration;

use clap::Parser;

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
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut reply = args.reply.map_or_else(Reply::echo, Reply::text);
    if args.latency_ms > 0 {
        reply = reply.with_delay(Duration::from_millis(args.latency_ms));
    }
    let llm = ScriptedLlm::builder()
        .port(args.port)
        .fallback(reply)
        .record(false)
        .start()
        .await?;
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
