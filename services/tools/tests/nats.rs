//! The executor over a real `nats-server`: tool calls and lists through the queue group,
//! error replies for garbage and unknown bots, and a graceful shutdown that finishes
//! in-flight calls.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;

use futures::StreamExt as _;
use nanobot_proto::{
    CallState, ERROR_CODE_HEADER, ErrorCode, ToolCallRequest, ToolCallResult, ToolListRequest,
    subjects,
};
use nanobot_runtime::bus::{self, RpcError};

use common::{NatsServer, config, config_with_tools};

fn call(name: &str, arguments: serde_json::Value) -> ToolCallRequest {
    ToolCallRequest {
        bot: "default".into(),
        session_key: "cli:test".into(),
        call_id: format!("call-{name}"),
        name: name.into(),
        arguments_json: arguments.to_string(),
        ..Default::default()
    }
}

async fn request(
    client: &async_nats::Client,
    req: &ToolCallRequest,
) -> Result<ToolCallResult, RpcError> {
    bus::request(client, req, Duration::from_secs(10)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executor_serves_calls_survives_garbage_and_drains_on_shutdown() {
    let nats = NatsServer::start().await;
    let client = nats.client().await;
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("notes.txt"), "alpha\nbeta\n").unwrap();

    let (stop, stopped) = oneshot::channel::<()>();
    let executor = tokio::spawn(nanobot_tools::run(
        config(&nats.url, &workspace),
        None,
        async {
            let _ = stopped.await;
        },
    ));

    // Ready once it answers the tool list.
    let deadline = Instant::now() + Duration::from_secs(10);
    let list = loop {
        let req = ToolListRequest {
            bot: "default".into(),
        };
        match bus::request(&client, &req, Duration::from_secs(1)).await {
            Ok(list) => break list,
            Err(e) if Instant::now() > deadline => panic!("executor never became ready: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let names: Vec<&str> = list.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "apply_patch",
            "cron",
            "edit_file",
            "exec",
            "exec_session",
            "find_files",
            "grep",
            "list_dir",
            "list_exec_sessions",
            "read_file",
            "web_fetch",
            "web_search",
            "write_file"
        ]
    );
    assert!(
        list.tools
            .iter()
            .find(|t| t.name == "read_file")
            .unwrap()
            .read_only
    );
    assert!(!list.executor.is_empty());

    let read = request(
        &client,
        &call("read_file", serde_json::json!({"path": "notes.txt"})),
    )
    .await
    .unwrap();
    assert_eq!(
        read.content,
        "1| alpha\n2| beta\n\n(End of file — 2 lines total)"
    );
    assert_eq!(read.call_id, "call-read_file");
    assert!(!read.is_error && read.executor.starts_with("tools-"));

    let exec = request(
        &client,
        &call("exec", serde_json::json!({"command": "echo hi"})),
    )
    .await
    .unwrap();
    assert_eq!(exec.content, "hi\n\n\nExit code: 0");

    // Tool-level failures are results, not NATS errors.
    let escape = request(
        &client,
        &call("read_file", serde_json::json!({"path": "/etc/passwd"})),
    )
    .await
    .unwrap();
    assert!(
        escape.is_error && escape.content.contains("is outside allowed directory"),
        "{}",
        escape.content
    );
    let invalid = request(
        &client,
        &call("exec", serde_json::json!({"command": "ls", "timeout": 0})),
    )
    .await
    .unwrap();
    assert_eq!(
        invalid.content,
        "Error: Invalid parameters for tool 'exec': timeout must be >= 1"
    );

    // Garbage gets a BadRequest reply and the executor keeps serving.
    let garbage = client
        .request(
            subjects::tool_call("default", "read_file"),
            Bytes::from_static(b"\xff\xff\xff\xff"),
        )
        .await
        .unwrap();
    let code = garbage
        .headers
        .as_ref()
        .and_then(|h| h.get(ERROR_CODE_HEADER))
        .map(|v| v.to_string());
    assert_eq!(code.as_deref(), Some(ErrorCode::BadRequest.as_str()));
    let unknown_bot = ToolCallRequest {
        bot: "ghost".into(),
        ..call("read_file", serde_json::json!({"path": "x"}))
    };
    match request(&client, &unknown_bot).await {
        Err(RpcError::Service { code, .. }) => assert_eq!(code, ErrorCode::NotFound),
        other => panic!("expected a not_found reply, got {other:?}"),
    }
    let again = request(
        &client,
        &call(
            "read_file",
            serde_json::json!({"path": "notes.txt", "offset": 2}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(again.content, "2| beta\n\n(End of file — 2 lines total)");

    // A call in flight when shutdown starts still gets its answer; then run returns Ok. The
    // call is in flight once the executor sent its ACCEPTED beat.
    let inbox = client.new_inbox();
    let mut replies = client.subscribe(inbox.clone()).await.unwrap();
    let slow = ToolCallRequest {
        heartbeat_ms: 1000,
        ..call("exec", serde_json::json!({"command": "sleep 1; echo done"}))
    };
    client
        .publish_with_reply(
            subjects::tool_call("default", "exec"),
            inbox,
            prost::Message::encode_to_vec(&slow).into(),
        )
        .await
        .unwrap();
    let mut next_reply = async || {
        let msg = tokio::time::timeout(Duration::from_secs(10), replies.next())
            .await
            .expect("the executor answers")
            .expect("the inbox stays subscribed");
        <ToolCallResult as prost::Message>::decode(msg.payload).unwrap()
    };
    let accepted = next_reply().await;
    assert_eq!(accepted.state(), CallState::Accepted);
    let shutdown_at = Instant::now();
    stop.send(()).unwrap();
    let slow = loop {
        let reply = next_reply().await;
        if reply.state() == CallState::Final {
            break reply;
        }
    };
    assert_eq!(slow.content, "done\n\n\nExit code: 0");
    let result = tokio::time::timeout(Duration::from_secs(5), executor).await;
    let outcome = result
        .expect("run returns within 5 s")
        .expect("run task does not panic");
    assert!(outcome.is_ok(), "{outcome:?}");
    assert!(shutdown_at.elapsed() < Duration::from_secs(5));
}

/// Returns the installed `server-everything` binary; panics with the install hint when it is
/// missing (`make test` installs it, so a missing server is a failure, not a skip).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_bot_workspace_is_created_before_the_first_call() {
    let nats = NatsServer::start().await;
    let client = nats.client().await;
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("not-yet").join("workspace");
    let (stop, stopped) = oneshot::channel::<()>();
    let executor = tokio::spawn(nanobot_tools::run(
        config(&nats.url, &workspace),
        None,
        async {
            let _ = stopped.await;
        },
    ));
    let deadline = Instant::now() + Duration::from_secs(10);
    let exec = loop {
        match request(
            &client,
            &call("exec", serde_json::json!({"command": "pwd"})),
        )
        .await
        {
            Ok(result) => break result,
            Err(e) if Instant::now() > deadline => panic!("executor never answered: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    assert!(workspace.is_dir());
    assert!(!exec.is_error, "{}", exec.content);
    assert!(
        exec.content.starts_with(&workspace.display().to_string()),
        "{}",
        exec.content
    );
    stop.send(()).unwrap();
    executor.await.unwrap().unwrap();
}

fn everything_bin() -> PathBuf {
    let cache = std::env::var("NANOBOT_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
            Path::new(&home).join(".cache/nanobot")
        });
    let bin = cache.join("npm/node_modules/.bin/mcp-server-everything");
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        node && bin.exists(),
        "{} or node missing; run `scripts/deps.sh mcp` (needs node and npm)",
        bin.display()
    );
    bin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_server_tools_are_listed_after_builtins_and_run_through_the_executor() {
    let bin = everything_bin();
    let nats = NatsServer::start().await;
    let client = nats.client().await;
    let dir = tempfile::tempdir().unwrap();
    let tools = serde_json::json!({
        "mcpServers": {"everything": {"command": bin, "enabledTools": ["echo", "get-sum"]}},
    });
    let cfg = config_with_tools(&nats.url, dir.path(), tools);
    let (stop, stopped) = oneshot::channel::<()>();
    let executor = tokio::spawn(nanobot_tools::run(cfg, None, async {
        let _ = stopped.await;
    }));

    let deadline = Instant::now() + Duration::from_secs(30);
    let list = loop {
        let req = ToolListRequest {
            bot: "default".into(),
        };
        match bus::request(&client, &req, Duration::from_secs(1)).await {
            Ok(list) => break list,
            Err(e) if Instant::now() > deadline => panic!("executor never became ready: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    };
    let names: Vec<&str> = list.tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names[names.len() - 2..],
        ["mcp_everything_echo", "mcp_everything_get-sum"],
        "{names:?}"
    );
    assert!(
        names[..names.len() - 2]
            .iter()
            .all(|n| !n.starts_with("mcp_"))
    );
    let echo_spec = &list.tools[names.len() - 2];
    let schema: serde_json::Value = serde_json::from_str(&echo_spec.parameters_json).unwrap();
    assert_eq!(schema["properties"]["message"]["type"], "string");
    assert_eq!(echo_spec.description, "Echoes back the input string");

    let echo = request(
        &client,
        &call(
            "mcp_everything_echo",
            serde_json::json!({"message": "over nats"}),
        ),
    )
    .await
    .unwrap();
    assert_eq!(echo.content, "Echo: over nats");
    assert!(!echo.is_error);

    stop.send(()).unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), executor)
        .await
        .expect("run returns")
        .expect("run task does not panic");
    assert!(outcome.is_ok(), "{outcome:?}");
}

/// `exec_session` reaches the executor running the session on its own subject, CJK and emoji
/// intact; a last-release runner's `write_stdin` (`chars`, `yield_time_ms`) is still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_session_drives_a_session_on_its_executor_and_legacy_write_stdin_still_works() {
    let nats = NatsServer::start().await;
    let client = nats.client().await;
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let executor = tokio::spawn(nanobot_tools::run(
        config(&nats.url, &workspace),
        None,
        async {
            let _ = stopped.await;
        },
    ));
    let start = call(
        "exec",
        serde_json::json!({"cmd": "cat", "yield_time_ms": 0}),
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let started = loop {
        match request(&client, &start).await {
            Ok(result) => break result,
            Err(e) if Instant::now() > deadline => panic!("executor never answered: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    };
    let id = started
        .content
        .split_once("Process running. session_id: ")
        .and_then(|(_, rest)| rest.lines().next())
        .unwrap_or_else(|| panic!("no session: {}", started.content))
        .to_string();
    let on_executor = |name: &str, arguments: serde_json::Value| ToolCallRequest {
        executor: nanobot_proto::exec::executor_of(&id).unwrap().to_string(),
        ..call(name, arguments)
    };
    let echoed = request(
        &client,
        &on_executor(
            "exec_session",
            serde_json::json!({"session_id": id, "input": "你好🐱\n", "wait_for": "🐱"}),
        ),
    )
    .await
    .unwrap();
    assert!(
        echoed.content.starts_with(&format!(
            "你好🐱\n\nProcess running. session_id: {id}\nElapsed: "
        )),
        "{}",
        echoed.content
    );
    let legacy = request(
        &client,
        &on_executor(
            "write_stdin",
            serde_json::json!({"session_id": id, "chars": "再见👋\n", "close_stdin": true,
                               "yield_time_ms": 5000, "max_output_chars": 2000}),
        ),
    )
    .await
    .unwrap();
    assert!(
        legacy
            .content
            .starts_with("再见👋\n\nStdin closed.\nExit code: 0\nElapsed: "),
        "{}",
        legacy.content
    );
    stop.send(()).unwrap();
    executor.await.unwrap().unwrap();
}
