//! Chat turns through the CLI, the agent runner and the tool executors.

use std::time::Duration;

use prost::Message as _;
use serde_json::json;

use nanobot_proto::subjects;

use super::{TURN, ask, session_rows};
use crate::harness::{Fleet, wait_until};
use crate::scripted_llm::Reply;

#[tokio::test]
async fn plain_turn_is_answered_and_stored_in_redis() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet.llm.push(Reply::text("Hello from the fleet!"));
    let reply = ask(&mut fleet, "hi", None).await;
    assert_eq!(reply, "Hello from the fleet!");

    let requests = fleet.llm.requests();
    assert_eq!(requests.len(), 1);
    let messages = requests[0].messages();
    assert_eq!(messages[0]["role"], "system");
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("## Runtime\n")
    );
    // A plain turn sends the bare text, as 0.3.5 (no time, channel or chat id).
    assert_eq!(messages.last().unwrap()["content"], "hi");
    assert_eq!(requests[0].body["model"], "test-model");
    assert!(
        requests[0].tool_names().contains(&"read_file".to_string()),
        "tools come from the executors"
    );

    let rows = session_rows(&fleet, "default", "cli:direct").await;
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(
        (rows[0]["role"].as_str(), rows[0]["content"].as_str()),
        (Some("user"), Some("hi"))
    );
    assert_eq!(rows[1]["content"], "Hello from the fleet!");
}

#[tokio::test]
async fn two_tool_calls_run_in_the_tools_process() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet.llm.push(Reply::tool_calls([(
        "write_file",
        json!({"path": "notes.txt", "content": "fleet rocks"}),
    )]));
    fleet.llm.push(Reply::tool_calls([(
        "read_file",
        json!({"path": "notes.txt"}),
    )]));
    fleet.llm.push(Reply::text("I wrote and read the note."));
    let reply = ask(&mut fleet, "write a note then read it", Some("cli:tools")).await;
    assert_eq!(reply, "I wrote and read the note.");
    assert_eq!(
        std::fs::read_to_string(fleet.workspace().join("notes.txt")).unwrap(),
        "fleet rocks"
    );

    let requests = fleet.llm.requests();
    assert_eq!(requests.len(), 3);
    let last = requests[2].messages();
    let tool_rows: Vec<_> = last.iter().filter(|m| m["role"] == "tool").collect();
    assert_eq!(tool_rows.len(), 2);
    assert_eq!(tool_rows[0]["name"], "write_file");
    assert!(
        tool_rows[1]["content"]
            .as_str()
            .unwrap()
            .contains("fleet rocks"),
        "{:?}",
        tool_rows[1]
    );
    // The tools process ran this very call: its "finished" line names the tool and the
    // call id the model chose (not just a startup line mentioning the tool).
    let read_call = tool_rows[1]["tool_call_id"].as_str().unwrap();
    let logs = fleet.service("tools").logs();
    assert!(
        logs.lines().any(|l| l.contains("tool call finished")
            && l.contains(read_call)
            && l.contains("read_file")),
        "the executor ran call {read_call}: {logs}"
    );

    let rows = session_rows(&fleet, "default", "cli:tools").await;
    let roles: Vec<&str> = rows.iter().map(|r| r["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant"
        ]
    );
}

#[tokio::test]
async fn two_sessions_run_in_parallel() {
    let fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet.llm.when_last_user_contains(
        "slow",
        Reply::text("slow done").with_delay(Duration::from_secs(4)),
    );
    fleet
        .llm
        .when_last_user_contains("fast", Reply::text("fast done"));
    let slow = fleet.cli(&["agent", "-m", "slow one", "--session", "cli:a"]);
    let fast = async {
        // Start the second session once the first is waiting on the model.
        wait_until(|| async { fleet.llm.request_count() >= 1 }, TURN)
            .await
            .unwrap();
        let out = fleet
            .cli(&["agent", "-m", "fast one", "--session", "cli:b"])
            .await
            .unwrap();
        // The slow session's turn is still running: only its user row is stored so far.
        let slow_rows_meanwhile = session_rows(&fleet, "default", "cli:a").await.len();
        (out, slow_rows_meanwhile)
    };
    let (slow, (fast, slow_rows_meanwhile)) = tokio::join!(slow, fast);
    assert_eq!(String::from_utf8_lossy(&fast.stdout).trim(), "fast done");
    assert_eq!(
        slow_rows_meanwhile, 1,
        "session b was answered while session a's turn ran"
    );
    assert_eq!(
        String::from_utf8_lossy(&slow.unwrap().stdout).trim(),
        "slow done"
    );
}

#[tokio::test]
async fn history_survives_an_agent_restart() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet.llm.push(Reply::text("Nice to meet you, Ada."));
    assert_eq!(
        ask(&mut fleet, "my name is Ada", Some("cli:ada")).await,
        "Nice to meet you, Ada."
    );
    let agent = fleet.service("agent");
    agent.sigterm().unwrap();
    let status = agent
        .wait_exit(Duration::from_secs(5))
        .await
        .expect("agent exits within 5 s of SIGTERM");
    assert!(status.success(), "agent exit status {status:?}");
    agent.restart().unwrap();
    fleet.wait_ready().await.unwrap();

    fleet.llm.push(Reply::text("You are Ada."));
    assert_eq!(
        ask(&mut fleet, "who am I?", Some("cli:ada")).await,
        "You are Ada."
    );
    let second = &fleet.llm.requests()[1];
    let texts: Vec<String> = second
        .messages()
        .iter()
        .map(|m| m["content"].to_string())
        .collect();
    assert_eq!(texts.len(), 4, "system, user, assistant, user: {texts:#?}");
    assert!(texts[1].contains("my name is Ada"));
    assert!(texts[2].contains("Nice to meet you, Ada."));
}

#[tokio::test]
async fn malformed_inbound_bytes_are_dropped_without_crashing_the_runner() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    let client = fleet.nats_client().await.unwrap();
    let js = async_nats::jetstream::new(client);
    js.publish(
        subjects::inbound("default", "cli", "cli:junk"),
        vec![0xff, 0xff, 0x01, 0x02].into(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    let junk = nanobot_proto::InboundMessage {
        id: "x".into(),
        bot: "no-such-bot".into(),
        ..Default::default()
    };
    js.publish(
        subjects::inbound("no-such-bot", "cli", "cli:junk"),
        junk.encode_to_vec().into(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    let log = fleet.service("agent").log_path().to_path_buf();
    let dropped = || {
        let log = log.clone();
        async move {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .matches("dropping message")
                .count()
                >= 2
        }
    };
    wait_until(dropped, TURN)
        .await
        .unwrap_or_else(|_| panic!("agent log: {}", fleet.service("agent").logs()));
    assert!(fleet.service("agent").is_running());
    fleet.llm.push(Reply::text("still here"));
    assert_eq!(ask(&mut fleet, "are you alive?", None).await, "still here");
    assert_eq!(
        fleet.llm.request_count(),
        1,
        "the garbage never reached the model"
    );
}

#[tokio::test]
async fn every_service_exits_zero_within_five_seconds_of_sigterm() {
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools", "memory", "cron"])
        .start()
        .await
        .unwrap();
    for role in ["gateway", "agent", "tools", "memory", "cron"] {
        let service = fleet.service(role);
        service.sigterm().unwrap();
        let status = service.wait_exit(Duration::from_secs(5)).await;
        let logs = service.log_tail(20);
        let status =
            status.unwrap_or_else(|| panic!("{role} still running 5 s after SIGTERM:\n{logs}"));
        assert!(status.success(), "{role} exited with {status:?}:\n{logs}");
    }
}
