//! The processes both systems need: `nats-server`, `redis-server` and `nanobot-mock-llm`, each
//! a [`Member`] whose start-to-ready time is measured.

use std::path::Path;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use serde::Serialize;
use tokio::time::Instant;

use nanobot_tests::harness::{ServiceProc, find_server_binary, free_port};

/// How long any process may take to become ready.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How often readiness is polled (small, so start-up times are resolved to a few ms).
const POLL: Duration = Duration::from_millis(2);

/// How long one process took to become ready.
#[derive(Debug, Clone, Serialize)]
pub struct Startup {
    /// Process name (`gateway`, `agent#2`, `nats-server`, `nanobot serve`, …).
    pub name: String,
    /// Milliseconds from spawn to the first successful readiness probe.
    pub spawn_to_ready_ms: f64,
    /// Milliseconds from its "connected to nats" log line to readiness (fleet roles only).
    pub connect_to_ready_ms: Option<f64>,
}

/// One running process of a system under test.
#[derive(Debug)]
pub struct Member {
    /// Process name as reported.
    pub name: String,
    /// The process (killed on drop).
    pub proc: ServiceProc,
    /// Its start-up measurement.
    pub startup: Startup,
    /// Wall-clock time at which it was seen ready.
    pub ready_at: SystemTime,
    /// `host:port` of its health server (`/ready`, `/metrics`; fleet roles only).
    pub health_addr: Option<String>,
}

impl Member {
    /// Returns the pid while the process runs.
    pub fn pid(&self) -> Option<u32> {
        self.proc.pid()
    }
}

/// Spawns `program` and waits until `probe` succeeds; fails with the log tail if the
/// process exits first or the timeout passes.
pub async fn spawn_ready<F, Fut>(
    name: &str,
    program: &Path,
    args: &[String],
    env: &[(&str, &str)],
    mut probe: F,
) -> anyhow::Result<Member>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let spawned = Instant::now();
    let mut proc = ServiceProc::spawn_program(program, args, env)?;
    let ready = wait_ready(name, &mut proc, &mut probe).await?;
    Ok(Member {
        name: name.to_string(),
        startup: Startup {
            name: name.to_string(),
            spawn_to_ready_ms: ms(ready.duration_since(spawned)),
            connect_to_ready_ms: None,
        },
        ready_at: SystemTime::now(),
        health_addr: None,
        proc,
    })
}

/// Polls `probe` until it succeeds; returns the instant it did.
pub async fn wait_ready<F, Fut>(
    name: &str,
    proc: &mut ServiceProc,
    probe: &mut F,
) -> anyhow::Result<Instant>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        if probe().await {
            return Ok(Instant::now());
        }
        if let Some(status) = proc.exit_status() {
            anyhow::bail!("{name} exited with {status}:\n{}", proc.log_tail(40));
        }
        if Instant::now() >= deadline {
            anyhow::bail!(
                "{name} not ready in {READY_TIMEOUT:?}:\n{}",
                proc.log_tail(40)
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Returns whether `GET url` answers 2xx.
pub async fn http_ok(http: &reqwest::Client, url: &str) -> bool {
    http.get(url)
        .timeout(Duration::from_millis(500))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

/// Returns a client for readiness probes.
pub fn probe_client() -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .context("build the probe client")
}

/// Converts a duration to fractional milliseconds.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Starts `nats-server -js` on free loopback ports with its store in `dir`; returns the member
/// and the client URL.
pub async fn nats(dir: &Path) -> anyhow::Result<(Member, String)> {
    let bin = find_server_binary("nats-server", "NATS_SERVER")?;
    let (port, monitor) = (free_port()?, free_port()?);
    let args: Vec<String> = [
        "-js",
        "-a",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "-m",
        &monitor.to_string(),
        "-sd",
        &dir.join("nats").display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    let http = probe_client()?;
    let url = format!("http://127.0.0.1:{monitor}/healthz?js-enabled-only=true");
    let member = spawn_ready("nats-server", &bin, &args, &[], || http_ok(&http, &url)).await?;
    Ok((member, format!("nats://127.0.0.1:{port}")))
}

/// Starts `redis-server` (append-only file, as the harness) on a free loopback port; returns
/// the member and the URL.
pub async fn redis(dir: &Path) -> anyhow::Result<(Member, String)> {
    let bin = find_server_binary("redis-server", "REDIS_SERVER")?;
    let port = free_port()?;
    let data = dir.join("redis");
    std::fs::create_dir_all(&data).context("create the redis directory")?;
    let args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "yes",
        "--dir",
        &data.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    let url = format!("redis://127.0.0.1:{port}");
    let addr = format!("127.0.0.1:{port}");
    let member = spawn_ready("redis-server", &bin, &args, &[], || redis_ping(&addr)).await?;
    Ok((member, url))
}

/// Sends a raw `PING` and checks for `+PONG` (no client library needed for a probe).
async fn redis_ping(addr: &str) -> bool {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let Ok(mut stream) = tokio::net::TcpStream::connect(addr).await else {
        return false;
    };
    if stream.write_all(b"PING\r\n").await.is_err() {
        return false;
    }
    let mut buf = [0u8; 16];
    let read = tokio::time::timeout(Duration::from_millis(500), stream.read(&mut buf)).await;
    matches!(read, Ok(Ok(n)) if buf[..n].starts_with(b"+PONG"))
}

/// How the scripted LLM answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LlmMode {
    /// Delay before every reply, in milliseconds (0: instant).
    pub latency_ms: u64,
    /// Sequential tool calls per turn before the final text.
    pub tool_calls: u32,
}

/// The file the tool-heavy turn reads (written into each workspace by the bench).
pub const TOOL_FILE: &str = "bench-notes.txt";

/// Starts `nanobot-mock-llm` in `mode`; returns the member and the OpenAI base URL.
pub async fn mock_llm(mode: LlmMode) -> anyhow::Result<(Member, String)> {
    let bin = nanobot_tests::harness::bin_path("nanobot-mock-llm")?;
    let port = free_port()?;
    let mut args = vec![
        "--port".to_string(),
        port.to_string(),
        "--latency-ms".into(),
        mode.latency_ms.to_string(),
    ];
    if mode.tool_calls > 0 {
        args.extend([
            "--tool-calls".into(),
            mode.tool_calls.to_string(),
            "--tool-file".into(),
            TOOL_FILE.into(),
        ]);
    }
    let http = probe_client()?;
    let base = format!("http://127.0.0.1:{port}/v1");
    let models = format!("{base}/models");
    let member = spawn_ready("mock-llm", &bin, &args, &[], || http_ok(&http, &models)).await?;
    Ok((member, base))
}

/// Returns `existing` when given (no process), else starts the mock LLM in `mode`.
pub async fn llm(
    mode: LlmMode,
    existing: Option<&str>,
) -> anyhow::Result<(Option<Member>, String)> {
    match existing {
        Some(base) => Ok((None, base.to_string())),
        None => {
            let (member, base) = mock_llm(mode).await?;
            Ok((Some(member), base))
        }
    }
}
