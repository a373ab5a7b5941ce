//! Shared helpers of the executor's integration tests: a real `nats-server` and configs.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nanobot_runtime::config::{Config, load_str};

/// A `nats-server` with JetStream on a free loopback port, killed on drop.
pub struct NatsServer {
    child: Child,
    pub url: String,
    _store: tempfile::TempDir,
}

impl NatsServer {
    pub fn start() -> Self {
        let binary = std::env::var("NATS_SERVER")
            .map(PathBuf::from)
            .unwrap_or_else(|_| {
                let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
                Path::new(&home).join(".cache/nanobot/bin/nats-server")
            });
        assert!(
            binary.exists(),
            "nats-server not found at {}: run scripts/deps.sh or set NATS_SERVER",
            binary.display()
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let store = tempfile::tempdir().unwrap();
        let child = Command::new(&binary)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(store.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn nats-server");
        Self {
            child,
            url: format!("nats://127.0.0.1:{port}"),
            _store: store,
        }
    }

    pub async fn client(&self) -> async_nats::Client {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match async_nats::connect(&self.url).await {
                Ok(client) => {
                    // As `nanobot up` does: the streams exist before a role starts.
                    let js = async_nats::jetstream::new(client.clone());
                    nanobot_runtime::bus::init_streams(&js, 1)
                        .await
                        .expect("create streams");
                    return client;
                }
                Err(e) if Instant::now() > deadline => panic!("nats-server never came up: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn config(url: &str, workspace: &Path) -> Config {
    config_with_tools(
        url,
        workspace,
        serde_json::json!({"restrictToWorkspace": true}),
    )
}

pub fn config_with_tools(url: &str, workspace: &Path, tools: serde_json::Value) -> Config {
    let json = serde_json::json!({
        "agents": {"defaults": {"workspace": workspace}},
        "bus": {"url": url},
        "tools": tools,
    });
    load_str(
        Some(&json.to_string()),
        Path::new("config.json"),
        &HashMap::new(),
    )
    .unwrap()
}

/// An in-process executor (`nanobot_tools::run`) stopped through [`Executor::stop`].
pub struct Executor {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Executor {
    /// Starts an executor with `cfg` and waits until it answers the tool list.
    pub async fn start(cfg: Config, client: &async_nats::Client) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(nanobot_tools::run(cfg, None, async {
            let _ = stopped.await;
        }));
        wait_ready(client).await;
        Self { stop, task }
    }

    /// Shuts the executor down and waits for `run` to return.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let outcome = tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("run returns within 10 s")
            .expect("run task does not panic");
        assert!(outcome.is_ok(), "{outcome:?}");
    }
}

/// Waits until some executor answers the tool list of bot `default`.
pub async fn wait_ready(client: &async_nats::Client) -> nanobot_proto::ToolListResponse {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let req = nanobot_proto::ToolListRequest {
            bot: "default".into(),
        };
        match nanobot_runtime::bus::request(client, &req, Duration::from_secs(1)).await {
            Ok(list) => return list,
            Err(e) if Instant::now() > deadline => panic!("executor never became ready: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}
