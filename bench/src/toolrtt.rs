//! Tool round trip: the same `read_file` call through NATS to `nanobot-tools`, in-process
//! through `nanobot_tools`' registry, and in-process through upstream's Python registry.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::time::Instant;

use nanobot_proto::ToolCallRequest;
use nanobot_runtime::bus;
use nanobot_runtime::config::{DEFAULT_BOT, ToolsConfig};
use nanobot_tools::registry::{Registry, ToolContext};
use nanobot_tools::sandbox::Sandbox;

use crate::servers::TOOL_FILE;
use crate::stats::{self, Summary};

/// Unmeasured calls before each measurement.
const WARMUP: usize = 50;
/// Deadline of one call over NATS.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
/// The upstream timing script, written next to the workspace at run time.
const UPSTREAM_SCRIPT: &str = include_str!("../scripts/upstream_tool_rtt.py");

/// Tool round-trip figures.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ToolRtt {
    /// Request/reply over NATS to the `nanobot-tools` process (1 in flight).
    pub fleet_nats: Summary,
    /// The floor under it: request/reply over the same NATS server to an echo responder in
    /// this process (no decoding, no tool, no logging).
    pub nats_floor: Summary,
    /// The same call through `nanobot_tools::registry::Registry::call` in this process.
    pub rust_in_process: Summary,
    /// The same call through upstream's `ToolRegistry.execute`, in its own Python process.
    pub upstream_in_process: Option<Summary>,
    /// Why the upstream figure is missing, if it is.
    pub upstream_error: Option<String>,
}

fn arguments() -> String {
    json!({"path": TOOL_FILE}).to_string()
}

/// Times `calls` sequential `read_file` calls over NATS to the tools service.
pub async fn over_nats(nats_url: &str, calls: usize) -> anyhow::Result<Summary> {
    let client = async_nats::connect(nats_url)
        .await
        .with_context(|| format!("connect to {nats_url}"))?;
    let mut samples = Vec::with_capacity(calls);
    for i in 0..WARMUP + calls {
        let deadline = chrono::Utc::now() + chrono::Duration::seconds(10);
        let request = ToolCallRequest {
            bot: DEFAULT_BOT.into(),
            session_key: "bench:tool-rtt".into(),
            call_id: format!("rtt-{i}"),
            name: "read_file".into(),
            arguments_json: arguments(),
            deadline_ms: deadline.timestamp_millis(),
            channel: "bench".into(),
            chat_id: "tool-rtt".into(),
            // The single-reply path: the transport floor, without the runner's heartbeats.
            heartbeat_ms: 0,
            in_cron: false,
            file_reads: Vec::new(),
            executor: String::new(),
        };
        let start = Instant::now();
        let result = bus::request(&client, &request, CALL_TIMEOUT)
            .await
            .context("call read_file over nats")?;
        let took = start.elapsed();
        anyhow::ensure!(!result.is_error, "read_file failed: {}", result.content);
        if i >= WARMUP {
            samples.push(took);
        }
    }
    Ok(stats::summarize(&samples))
}

/// Times `calls` sequential request/reply round trips to an echo responder on its own
/// connection, with a payload the size of a tool call: the transport's share of a tool call.
pub async fn nats_floor(nats_url: &str, calls: usize) -> anyhow::Result<Summary> {
    let responder = async_nats::connect(nats_url)
        .await
        .with_context(|| format!("connect to {nats_url}"))?;
    let client = async_nats::connect(nats_url)
        .await
        .with_context(|| format!("connect to {nats_url}"))?;
    let subject = format!("{}.echo", client.new_inbox());
    let mut sub = responder.subscribe(subject.clone()).await?;
    responder.flush().await?;
    let echo = tokio::spawn(async move {
        while let Some(msg) = futures::StreamExt::next(&mut sub).await {
            if let Some(reply) = msg.reply {
                // A lost echo shows up as a request timeout below.
                let _ = responder.publish(reply, msg.payload).await;
            }
        }
    });
    let payload = bytes::Bytes::from(vec![b'x'; 160]);
    let mut samples = Vec::with_capacity(calls);
    for i in 0..WARMUP + calls {
        let start = Instant::now();
        let request = client.request(subject.clone(), payload.clone());
        tokio::time::timeout(CALL_TIMEOUT, request)
            .await
            .context("echo request timed out")?
            .context("echo request")?;
        if i >= WARMUP {
            samples.push(start.elapsed());
        }
    }
    echo.abort();
    Ok(stats::summarize(&samples))
}

/// Times `calls` sequential `read_file` calls through the tools crate's registry directly.
pub async fn in_process(workspace: &Path, calls: usize) -> anyhow::Result<Summary> {
    let registry = Registry::builtin(&ToolsConfig::default(), &Default::default())
        .context("build the registry")?;
    let ctx = ToolContext {
        sandbox: Sandbox::new(workspace, false),
        session_key: "bench:tool-rtt".into(),
        origin: Default::default(),
        file_reads: Vec::new(),
    };
    let args = arguments();
    let mut samples = Vec::with_capacity(calls);
    for i in 0..WARMUP + calls {
        let start = Instant::now();
        let output = registry.call(&ctx, "read_file", &args).await;
        let took = start.elapsed();
        anyhow::ensure!(!output.is_error, "read_file failed: {}", output.content);
        if i >= WARMUP {
            samples.push(took);
        }
    }
    Ok(stats::summarize(&samples))
}

#[derive(Debug, Deserialize)]
struct UpstreamSamples {
    samples_ns: Vec<u64>,
}

/// Times `calls` in-process calls in upstream's Python, run from the venv.
pub async fn upstream(venv: &Path, workspace: &Path, calls: usize) -> anyhow::Result<Summary> {
    let dir = tempfile::tempdir().context("create a script directory")?;
    let script = dir.path().join("upstream_tool_rtt.py");
    std::fs::write(&script, UPSTREAM_SCRIPT).context("write the timing script")?;
    let run = tokio::process::Command::new(venv.join("bin/python"))
        .arg(&script)
        .arg(workspace)
        .arg(TOOL_FILE)
        .arg(calls.to_string())
        .env("HOME", dir.path())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .context("upstream timing script still running after 120 s")?
        .context("run the upstream timing script")?;
    anyhow::ensure!(
        output.status.success(),
        "upstream timing script failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout.lines().last().unwrap_or_default();
    let parsed: UpstreamSamples =
        serde_json::from_str(line).context("parse the upstream timing output")?;
    let samples: Vec<Duration> = parsed
        .samples_ns
        .into_iter()
        .map(Duration::from_nanos)
        .collect();
    Ok(stats::summarize(&samples))
}
