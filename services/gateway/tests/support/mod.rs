//! Test fixtures: a real `nats-server`, the gateway run in-process, and a scripted stand-in
//! for the agent runners that consumes inbound messages and publishes replies.

use std::net::SocketAddr;
use std::time::Duration;

use async_nats::jetstream::{self, consumer::pull};
use futures::StreamExt as _;
use prost::Message as _;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use nanobot_proto::{InboundMessage, OutboundKind, OutboundMessage, subjects};
use nanobot_runtime::bus;
use nanobot_runtime::config::{BotConfig, Config};
use nanobot_runtime::testsuite;

/// A `nats-server` with JetStream (the shared harness, `nanobot_runtime::testsuite`) with the
/// fleet's streams created, killed on drop.
pub struct Nats {
    _server: testsuite::Nats,
    pub url: String,
}

fn free_port() -> u16 {
    testsuite::free_port().expect("a free port")
}

impl Nats {
    pub async fn start() -> Self {
        let server = testsuite::Nats::start().await.expect("start nats-server");
        let nats = Self {
            url: server.url(),
            _server: server,
        };
        // As `nanobot up` does: the streams exist before any role starts (roles only check).
        nats.jetstream().await;
        nats
    }

    pub async fn jetstream(&self) -> jetstream::Context {
        let client = async_nats::connect(&self.url)
            .await
            .expect("connect to nats");
        let js = jetstream::new(client);
        bus::init_streams(&js, 1).await.expect("create streams");
        js
    }
}

/// Polls `check` until it holds or panics after `timeout`.
pub async fn wait_until<F, Fut>(timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    while !check().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not met within {timeout:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A config pointing at `nats`, with the API on a free port and workspaces in `workspace`.
pub fn config(nats: &Nats, workspace: &std::path::Path) -> Config {
    let mut cfg = Config::default();
    cfg.bus.url = nats.url.clone();
    cfg.api.port = free_port();
    cfg.api.timeout = 10.0;
    cfg.agents.defaults.model = "test-model".into();
    cfg.agents.defaults.workspace = workspace.to_string_lossy().into_owned();
    cfg
}

/// Adds bot `id` with its own model to `cfg`.
pub fn add_bot(cfg: &mut Config, id: &str, model: &str) {
    let bot = BotConfig {
        model: Some(model.into()),
        ..Default::default()
    };
    cfg.bots.insert(id.into(), bot);
}

/// The gateway running in-process.
pub struct Gateway {
    pub base: String,
    pub http: reqwest::Client,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<anyhow::Result<()>>,
}

impl Gateway {
    /// Starts `nanobot_gateway::run` and waits until the API answers.
    pub async fn start(cfg: Config) -> Self {
        let base = format!("http://127.0.0.1:{}", cfg.api.port);
        let (tx, rx) = oneshot::channel::<()>();
        let health: SocketAddr = "127.0.0.1:0".parse().expect("addr");
        let task = tokio::spawn(nanobot_gateway::run(cfg, Some(health), async move {
            let _ = rx.await;
        }));
        let http = reqwest::Client::new();
        let url = format!("{base}/health");
        wait_until(Duration::from_secs(10), || async {
            http.get(&url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        })
        .await;
        Self {
            base,
            http,
            shutdown: Some(tx),
            task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Signals shutdown; returns what `run` returned.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), &mut self.task)
            .await
            .expect("gateway stops within 10s")
            .expect("gateway task")
    }
}

/// Stands in for the agent runners. Each inbound message's content picks the reply script:
/// - `stream:a|b|c`: deltas `a`, `b`, `c` published out of order (seq 2, 1, 3), a stream end,
///   then the final text `abc`;
/// - `error`: an error reply;
/// - `silent`: no reply at all;
/// - `delay:<ms>:<text>`: waits, then replies `echo: <text>`;
/// - anything else: progress, a tool hint, a final for another request, then `echo: <text>`.
pub struct Runner {
    pub inbound: mpsc::UnboundedReceiver<InboundMessage>,
    task: JoinHandle<()>,
}

impl Runner {
    pub async fn start(nats: &Nats) -> Self {
        let js = nats.jetstream().await;
        let config = pull::Config {
            filter_subject: subjects::INBOUND_ALL.into(),
            ..Default::default()
        };
        let consumer = js
            .create_consumer_on_stream(config, subjects::INBOUND_STREAM)
            .await
            .expect("create the runner consumer");
        let mut messages = consumer.messages().await.expect("consume inbound");
        let (tx, inbound) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            while let Some(Ok(msg)) = messages.next().await {
                let _ = msg.ack().await;
                let inbound = InboundMessage::decode(msg.payload.clone()).expect("decode inbound");
                let _ = tx.send(inbound.clone());
                tokio::spawn(reply(js.clone(), inbound));
            }
        });
        Self { inbound, task }
    }

    /// Returns the next inbound message the runner saw.
    pub async fn next_inbound(&mut self) -> InboundMessage {
        tokio::time::timeout(Duration::from_secs(10), self.inbound.recv())
            .await
            .expect("an inbound message within 10s")
            .expect("runner alive")
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn outbound(to: &InboundMessage, kind: OutboundKind, content: &str, seq: u32) -> OutboundMessage {
    OutboundMessage {
        id: uuid::Uuid::new_v4().to_string(),
        bot: to.bot.clone(),
        channel: to.channel.clone(),
        chat_id: to.chat_id.clone(),
        content: content.into(),
        reply_to: to.id.clone(),
        kind: kind.into(),
        session_key: to.session_key.clone(),
        seq,
        ..Default::default()
    }
}

async fn send(js: &jetstream::Context, msg: &OutboundMessage) {
    let subject = subjects::outbound(&msg.bot, &msg.channel, &msg.chat_id);
    bus::publish(js, subject, Some(&msg.id), msg)
        .await
        .expect("publish outbound");
}

async fn reply(js: jetstream::Context, to: InboundMessage) {
    let content = to.content.clone();
    if let Some(parts) = content.strip_prefix("stream:") {
        let parts: Vec<&str> = parts.split('|').collect();
        let mut order: Vec<usize> = (0..parts.len()).collect();
        if order.len() >= 2 {
            order.swap(0, 1);
        }
        for i in order {
            let seq = u32::try_from(i + 1).expect("small");
            send(
                &js,
                &outbound(&to, OutboundKind::StreamDelta, parts[i], seq),
            )
            .await;
        }
        send(&js, &outbound(&to, OutboundKind::StreamEnd, "", 0)).await;
        send(&js, &outbound(&to, OutboundKind::Final, &parts.concat(), 0)).await;
        return;
    }
    match content.as_str() {
        "error" => {
            send(
                &js,
                &outbound(
                    &to,
                    OutboundKind::Error,
                    "Sorry, the model is unavailable.",
                    0,
                ),
            )
            .await
        }
        "silent" => {}
        _ => {
            let mut text = content.as_str();
            if let Some(rest) = content.strip_prefix("delay:") {
                let (ms, rest) = rest.split_once(':').expect("delay:<ms>:<text>");
                tokio::time::sleep(Duration::from_millis(ms.parse().expect("ms"))).await;
                text = rest;
            }
            send(&js, &outbound(&to, OutboundKind::Progress, "thinking", 0)).await;
            send(
                &js,
                &outbound(&to, OutboundKind::ToolHint, "read_file(\"x\")", 0),
            )
            .await;
            let mut other = outbound(&to, OutboundKind::Final, "not yours", 0);
            other.reply_to = "another-replica-request".into();
            send(&js, &other).await;
            send(
                &js,
                &outbound(&to, OutboundKind::Final, &format!("echo: {text}"), 0),
            )
            .await;
        }
    }
}
