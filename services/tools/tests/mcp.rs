//! MCP through a real executor over a real `nats-server`: a server over SSE that was down
//! when the executor started is reached later, its tools listed and called through the queue
//! group. The server is the real `@modelcontextprotocol/server-everything` (installed by
//! `scripts/deps.sh mcp`; a missing server fails with the install hint).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nanobot_proto::{ToolCallRequest, ToolCallResult, ToolListRequest, ToolListResponse};
use nanobot_runtime::bus;
use nanobot_runtime::testsuite::wait_until;

use common::{Executor, NatsServer, config_with_tools};

fn everything() -> PathBuf {
    let cache = std::env::var("NANOBOT_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
            Path::new(&home).join(".cache/nanobot")
        });
    let bin = cache.join("npm/node_modules/.bin/mcp-server-everything");
    assert!(
        bin.exists(),
        "{} missing; run `scripts/deps.sh mcp` (needs node and npm)",
        bin.display()
    );
    bin
}

/// `server-everything sse` on `port`, killed on drop.
struct SseServer(Child);

impl Drop for SseServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn list(client: &async_nats::Client) -> Vec<String> {
    let req = ToolListRequest {
        bot: "default".into(),
    };
    let response: Result<ToolListResponse, _> =
        bus::request(client, &req, Duration::from_secs(5)).await;
    response
        .map(|r| r.tools.into_iter().map(|t| t.name).collect())
        .unwrap_or_default()
}

async fn echo(client: &async_nats::Client, message: &str) -> ToolCallResult {
    let req = ToolCallRequest {
        bot: "default".into(),
        session_key: "cli:test".into(),
        call_id: "call-echo".into(),
        name: "mcp_late_echo".into(),
        arguments_json: serde_json::json!({"message": message}).to_string(),
        ..Default::default()
    };
    bus::request(client, &req, Duration::from_secs(30))
        .await
        .expect("the executor answers")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_server_down_at_start_is_listed_and_called_once_it_is_up() {
    let bin = everything();
    let nats = NatsServer::start().await;
    let client = nats.client().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let tools = serde_json::json!({
        "ssrfWhitelist": ["127.0.0.1/32"],
        "mcpServers": {"late": {
            "url": format!("http://127.0.0.1:{port}/sse"),
            "headers": {"Authorization": "Bearer t"},
            "enabledTools": ["echo"],
        }},
    });
    let executor = Executor::start(config_with_tools(&nats.url, dir.path(), tools), &client).await;
    assert!(!list(&client).await.iter().any(|n| n.starts_with("mcp_")));
    let down = echo(&client, "early").await;
    assert!(down.is_error, "{down:?}");
    assert!(
        down.content.starts_with(
            "(MCP tool call failed: server 'late' is unreachable, next reconnect attempt in "
        ),
        "{down:?}"
    );

    let _server = SseServer(
        Command::new(&bin)
            .arg("sse")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn server-everything"),
    );
    wait_until(
        || async { list(&client).await.iter().any(|n| n == "mcp_late_echo") },
        Duration::from_secs(30),
    )
    .await
    .expect("the tool list reaches the server once it is up");
    let up = echo(&client, "late").await;
    assert!(!up.is_error, "{up:?}");
    assert_eq!(up.content, "Echo: late");
    executor.stop().await;
}
