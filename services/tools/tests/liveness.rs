//! The tool-call liveness protocol over a real `nats-server`, from both sides: the executor
//! acknowledges and beats while a tool runs; the runner's `ToolClient` notices an executor
//! that dies mid-call within seconds, retries a read-only tool once on another executor, and
//! reports a side-effecting one as possibly applied.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt as _;
use prost::Message as _;
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc};

use nanobot_core::tools::{Liveness, RETRY_HINT, ToolClient, ToolScope};
use nanobot_proto::{CallState, ToolCallRequest, ToolCallResult, subjects};

use common::{Executor, NatsServer, config};

/// Fast timing so failures show in about a second.
const FAST: Liveness = Liveness {
    heartbeat: Duration::from_millis(100),
    ack_timeout: Duration::from_millis(800),
    silence: Duration::from_millis(800),
};
/// The overall deadline every test stays far below.
const DEADLINE: Duration = Duration::from_secs(30);

/// A fake executor on its own connection that takes calls of one tool in the queue group.
struct FakeExecutor {
    taken: mpsc::UnboundedReceiver<ToolCallRequest>,
    die: Arc<Notify>,
}

impl FakeExecutor {
    /// Joins the queue group for `tool`; with `ack` it accepts each call and beats until
    /// told to die, without it it stays silent (dead before acknowledging).
    async fn start(nats: &NatsServer, tool: &str, ack: bool) -> Self {
        let client = nats.client().await;
        let mut calls = client
            .queue_subscribe(
                subjects::tool_call("default", tool),
                subjects::TOOLS_QUEUE_GROUP.into(),
            )
            .await
            .unwrap();
        roundtrip(&client).await;
        let (tx, taken) = mpsc::unbounded_channel();
        let die = Arc::new(Notify::new());
        let dying = die.clone();
        tokio::spawn(async move {
            while let Some(msg) = calls.next().await {
                let request = ToolCallRequest::decode(msg.payload.clone()).unwrap();
                let every = Duration::from_millis(u64::from(request.heartbeat_ms));
                let _ = tx.send(request);
                let (true, Some(inbox)) = (ack, msg.reply) else {
                    continue;
                };
                let beat = |state: CallState| {
                    let msg = ToolCallResult {
                        state: state as i32,
                        executor: "fake".into(),
                        ..Default::default()
                    };
                    Bytes::from(msg.encode_to_vec())
                };
                client
                    .publish(inbox.clone(), beat(CallState::Accepted))
                    .await
                    .unwrap();
                loop {
                    tokio::select! {
                        _ = dying.notified() => {
                            // Gone like a killed process: no more beats, no subscription.
                            drop(calls);
                            let _ = client.drain().await;
                            return;
                        }
                        _ = tokio::time::sleep(every) => {
                            let _ = client.publish(inbox.clone(), beat(CallState::Running)).await;
                        }
                    }
                }
            }
        });
        Self { taken, die }
    }

    /// Waits for the next call this fake takes.
    async fn next_call(&mut self) -> ToolCallRequest {
        tokio::time::timeout(Duration::from_secs(10), self.taken.recv())
            .await
            .expect("the fake executor takes a call")
            .expect("the fake executor runs")
    }
}

/// Returns once the server has processed everything `client` sent before (a message to
/// itself came back), so its subscriptions are live for other connections.
async fn roundtrip(client: &async_nats::Client) {
    let inbox = client.new_inbox();
    let mut echo = client.subscribe(inbox.clone()).await.unwrap();
    client.publish(inbox, Bytes::new()).await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), echo.next())
        .await
        .expect("the server echoes")
        .unwrap();
}

/// Returns a `ToolClient` that learned the tool list (read-only flags) from a real executor,
/// with that executor stopped again, plus the workspace.
async fn client_knowing_tools(nats: &NatsServer) -> (ToolClient, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "alpha\n").unwrap();
    let nc = nats.client().await;
    let executor = Executor::start(config(&nats.url, dir.path()), &nc).await;
    let tools = ToolClient::new(nc, "default", DEADLINE).with_liveness(FAST);
    let specs = tools.specs().await;
    assert!(specs.iter().any(|s| s.name == "read_file" && s.read_only));
    assert!(specs.iter().any(|s| s.name == "exec" && !s.read_only));
    executor.stop().await;
    (tools, dir)
}

async fn run(tools: &ToolClient, name: &str, args: Value) -> (Value, bool, Duration) {
    let started = Instant::now();
    let scope = ToolScope {
        session_key: "cli:test".into(),
        channel: "cli".into(),
        chat_id: "test".into(),
        in_cron: false,
        file_reads: Default::default(),
    };
    let outcome = tools.call(&scope, "call-1", name, &args.to_string()).await;
    (outcome.content, outcome.is_error, started.elapsed())
}

/// Sends call `call_id` of `tool` with `arguments` straight to the executors, asking for
/// beats every `heartbeat_ms`; returns the subscription its answers come on.
async fn send_call(
    nc: &async_nats::Client,
    call_id: &str,
    tool: &str,
    arguments: Value,
    heartbeat_ms: u32,
) -> async_nats::Subscriber {
    let inbox = nc.new_inbox();
    let replies = nc.subscribe(inbox.clone()).await.unwrap();
    let request = ToolCallRequest {
        bot: "default".into(),
        call_id: call_id.into(),
        name: tool.into(),
        arguments_json: arguments.to_string(),
        heartbeat_ms,
        ..Default::default()
    };
    nc.publish_with_reply(
        subjects::tool_call("default", tool),
        inbox,
        Bytes::from(request.encode_to_vec()),
    )
    .await
    .unwrap();
    replies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_acknowledges_then_beats_while_the_tool_runs_then_answers() {
    let nats = NatsServer::start().await;
    let nc = nats.client().await;
    let dir = tempfile::tempdir().unwrap();
    let executor = Executor::start(config(&nats.url, dir.path()), &nc).await;

    let call = json!({"command": "sleep 1.2; echo done"});
    let mut replies = send_call(&nc, "c1", "exec", call, 200).await;
    let mut states = Vec::new();
    let last = loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), replies.next())
            .await
            .expect("the executor keeps talking")
            .unwrap();
        let result = ToolCallResult::decode(msg.payload).unwrap();
        states.push(result.state());
        if result.state() == CallState::Final {
            break result;
        }
        assert!(result.content.is_empty() && result.executor.starts_with("tools-"));
        assert_eq!(result.call_id, "c1");
    };
    assert_eq!(last.content, "done\n\n\nExit code: 0");
    assert_eq!(states[0], CallState::Accepted);
    let beats = states.iter().filter(|s| **s == CallState::Running).count();
    assert!((4..=7).contains(&beats), "{states:?}");
    executor.stop().await;
}

/// A call done within half a heartbeat needs no ACCEPTED: its first and only answer is the
/// FINAL result (one message on the bus instead of two).
#[tokio::test]
async fn a_call_done_within_half_a_heartbeat_is_answered_with_its_result_alone() {
    let nats = NatsServer::start().await;
    let nc = nats.client().await;
    let dir = tempfile::tempdir().unwrap();
    let executor = Executor::start(config(&nats.url, dir.path()), &nc).await;
    let mut replies = send_call(&nc, "quick", "list_dir", json!({"path": "."}), 10_000).await;
    let first = tokio::time::timeout(Duration::from_secs(10), replies.next())
        .await
        .expect("answered")
        .unwrap();
    let first = ToolCallResult::decode(first.payload).unwrap();
    assert_eq!(first.state(), CallState::Final, "{first:?}");
    assert_eq!(first.call_id, "quick");
    executor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_call_is_retried_on_another_executor_when_its_executor_dies() {
    let nats = NatsServer::start().await;
    let (tools, dir) = client_knowing_tools(&nats).await;
    let mut doomed = FakeExecutor::start(&nats, "read_file", true).await;
    let call = tokio::spawn({
        let tools = tools.clone();
        async move { run(&tools, "read_file", json!({"path": "notes.txt"})).await }
    });
    let taken = doomed.next_call().await;
    assert_eq!(taken.heartbeat_ms, 100, "the runner asks for heartbeats");
    let nc = nats.client().await;
    let survivor = Executor::start(config(&nats.url, dir.path()), &nc).await;
    doomed.die.notify_one();

    let (content, is_error, elapsed) = call.await.unwrap();
    assert!(!is_error, "{content}");
    assert_eq!(content, "1| alpha\n\n(End of file — 1 lines total)");
    assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    survivor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn side_effecting_call_lost_with_its_executor_is_reported_not_retried() {
    let nats = NatsServer::start().await;
    let (tools, dir) = client_knowing_tools(&nats).await;
    let mut doomed = FakeExecutor::start(&nats, "exec", true).await;
    let call = tokio::spawn({
        let tools = tools.clone();
        async move { run(&tools, "exec", json!({"command": "touch ran"})).await }
    });
    doomed.next_call().await;
    let nc = nats.client().await;
    let survivor = Executor::start(config(&nats.url, dir.path()), &nc).await;
    let died = Instant::now();
    doomed.die.notify_one();

    let (content, is_error, _) = call.await.unwrap();
    assert!(is_error);
    assert_eq!(
        content,
        format!(
            "Error: the tool executor running 'exec' stopped before it finished; the call may \
             or may not have taken effect{RETRY_HINT}"
        )
    );
    let noticed = died.elapsed();
    assert!(noticed < FAST.silence * 3, "noticed after {noticed:?}");
    assert!(!dir.path().join("ran").exists(), "never re-run elsewhere");
    survivor.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_that_never_acknowledges_is_given_up_after_one_retry() {
    let nats = NatsServer::start().await;
    let (tools, _dir) = client_knowing_tools(&nats).await;
    let mut silent = FakeExecutor::start(&nats, "read_file", false).await;
    let (content, is_error, elapsed) = run(&tools, "read_file", json!({"path": "x"})).await;
    assert!(is_error);
    assert!(
        content
            .as_str()
            .unwrap()
            .starts_with("Error: the tool executor running 'read_file' stopped before"),
        "{content}"
    );
    assert!(elapsed < FAST.ack_timeout * 3, "took {elapsed:?}");
    silent.next_call().await;
    silent.next_call().await;
    assert!(silent.taken.try_recv().is_err(), "retried exactly once");

    drop(silent);
    let none = run(&tools, "web_search", json!({"query": "x"})).await;
    assert_eq!(
        none.0,
        format!("Error: no tool executor is available to run 'web_search'{RETRY_HINT}")
    );
    assert!(none.2 < Duration::from_secs(1), "took {:?}", none.2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_a_long_call_alive_until_the_overall_deadline() {
    let nats = NatsServer::start().await;
    let nc = nats.client().await;
    let dir = tempfile::tempdir().unwrap();
    let executor = Executor::start(config(&nats.url, dir.path()), &nc).await;
    // Silence of 500 ms would give up a 2 s command, were it not for the beats.
    let tight = Liveness {
        heartbeat: Duration::from_millis(100),
        ack_timeout: Duration::from_millis(500),
        silence: Duration::from_millis(500),
    };
    let tools = ToolClient::new(nc.clone(), "default", DEADLINE).with_liveness(tight);
    let (content, is_error, _) = run(&tools, "exec", json!({"command": "sleep 2; echo ok"})).await;
    assert!(!is_error, "{content}");
    assert_eq!(content, "ok\n\n\nExit code: 0");

    let short = ToolClient::new(nc, "default", Duration::from_secs(1)).with_liveness(tight);
    let (content, is_error, elapsed) = run(&short, "exec", json!({"command": "sleep 3"})).await;
    assert!(is_error);
    assert_eq!(
        content,
        format!("Error: tool 'exec' did not finish within 1s{RETRY_HINT}")
    );
    assert!(elapsed < Duration::from_millis(1500), "took {elapsed:?}");
    executor.stop().await;
}
