//! Shared helpers of the executor's integration tests: a real `nats-server` and configs.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use nanobot_runtime::config::{Config, load_str};
use nanobot_runtime::testsuite;

/// A `nats-server` with JetStream (the shared harness, `nanobot_runtime::testsuite`), killed on
/// drop.
pub struct NatsServer {
    _server: testsuite::Nats,
    pub url: String,
}

impl NatsServer {
    pub async fn start() -> Self {
        let server = testsuite::Nats::start().await.expect("start nats-server");
        Self {
            url: server.url(),
            _server: server,
        }
    }

    /// Connects a client, after creating the fleet's streams as `nanobot up` does (roles only
    /// check them).
    pub async fn client(&self) -> async_nats::Client {
        let client = async_nats::connect(&self.url)
            .await
            .expect("connect to nats");
        let js = async_nats::jetstream::new(client.clone());
        nanobot_runtime::bus::init_streams(&js, 1)
            .await
            .expect("create streams");
        client
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
