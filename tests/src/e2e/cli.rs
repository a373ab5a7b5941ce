//! `nanobot agent` as a channel: it streams, the local default model answers with one model
//! call, and its turns survive a NATS restart (issue 10 item 7, issue 18 item 5).

use std::process::{Output, Stdio};
use std::time::Duration;

use serde_json::json;
use tokio::io::AsyncReadExt as _;

use nanobot_proto::OutboundKind;

use super::{TURN, ask, outbound_messages};
use crate::harness::{Fleet, bin_path, wait_until};
use crate::scripted_llm::Reply;

/// A model call that outlasts any test: the turn is provably still running while it waits.
const HELD: Duration = Duration::from_secs(600);

/// Returns `nanobot agent -m text --session session` against `fleet`, without inherited
/// `NANOBOT_*` variables.
fn agent_command(fleet: &Fleet, text: &str, session: &str) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(bin_path("nanobot").unwrap());
    command
        .arg("--config")
        .arg(fleet.config_path())
        .args(["agent", "-m", text, "--session", session])
        .env("NANOBOT_CONFIG", fleet.config_path())
        .kill_on_drop(true);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("NANOBOT_") {
            command.env_remove(key);
        }
    }
    command
}

#[tokio::test]
async fn nanobot_agent_prints_streamed_text_while_the_turn_is_still_running() {
    let fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet.llm.push(
        Reply::tool_calls([("read_file", json!({"path": "missing.txt"}))])
            .with_text("Let me look around."),
    );
    fleet
        .llm
        .push(Reply::text("Nothing here.").with_delay(HELD));
    let mut child = agent_command(&fleet, "look", "cli:stream")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = String::new();
    let read = async {
        let mut buf = [0u8; 256];
        while !seen.contains("Let me look around.") {
            let n = stdout.read(&mut buf).await.unwrap();
            assert!(n > 0, "nanobot agent closed stdout after {seen:?}");
            seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    };
    tokio::time::timeout(TURN, read)
        .await
        .expect("the first segment is printed");
    // The turn is inside its second model call, held: the reply is not final yet.
    let second_call = || std::future::ready(fleet.llm.request_count() >= 2);
    wait_until(second_call, TURN).await.unwrap();
    assert!(
        child.try_wait().unwrap().is_none(),
        "nanobot agent is still waiting"
    );
    assert!(!seen.contains("Nothing here."));
    child.kill().await.unwrap();
}

#[tokio::test]
async fn a_streamed_reply_is_printed_once_and_matches_the_final_text() {
    let mut fleet = Fleet::builder().roles(&["agent"]).start().await.unwrap();
    let text = "Streaming works: **bold** and `code`, line one.\nLine two.";
    fleet.llm.push(Reply::text(text));
    let reply = ask(&mut fleet, "stream please", Some("cli:streamed")).await;
    assert_eq!(reply, text);
    let request = &fleet.llm.requests()[0];
    assert_eq!(
        request.body["stream"], true,
        "the runner streamed the model"
    );
    let outbound = outbound_messages(&fleet).await;
    let deltas: String = outbound
        .iter()
        .filter(|m| m.kind == OutboundKind::StreamDelta as i32)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(deltas, text, "the CLI asked for stream deltas");
}

#[tokio::test]
async fn text_streamed_before_tools_and_the_answer_after_are_separate_lines() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet.llm.push(
        Reply::tool_calls([("list_dir", json!({"path": "."}))]).with_text("Let me look around."),
    );
    fleet.llm.push(Reply::text("Done looking."));
    let reply = ask(&mut fleet, "look", Some("cli:segments")).await;
    assert_eq!(reply, "Let me look around.\nDone looking.");
    // The runner ends the segment before the tools run (upstream's `_stream_end` resuming).
    let kinds: Vec<OutboundKind> = outbound_messages(&fleet)
        .await
        .iter()
        .map(|m| m.kind())
        .filter(|k| *k != OutboundKind::StreamDelta)
        .collect();
    assert_eq!(
        kinds,
        [
            OutboundKind::StreamEnd,
            OutboundKind::ToolHint,
            OutboundKind::StreamEnd,
            OutboundKind::Final
        ]
    );
}

#[tokio::test]
async fn the_local_default_model_answers_a_capped_reply_with_one_model_call() {
    let mut fleet = Fleet::builder()
        .roles(&["agent"])
        .local_model()
        .start()
        .await
        .unwrap();
    fleet.llm.push(Reply::finish_length(
        "Hello! I am a tiny local model and my reply is cut",
    ));
    fleet
        .llm
        .push(Reply::text("a continuation nobody should ask for"));
    let reply = ask(&mut fleet, "hello", None).await;
    assert_eq!(reply, "Hello! I am a tiny local model and my reply is cut");
    let requests = fleet.llm.requests();
    assert_eq!(requests.len(), 1, "no length-recovery continuation");
    assert_eq!(requests[0].body["model"], "SmolLM2-135M-Instruct");
}

#[tokio::test]
async fn cli_turns_across_a_nats_restart_all_print_their_replies() {
    const CLIENTS: usize = 4;
    let mut fleet = Fleet::builder().roles(&["agent"]).start().await.unwrap();
    // Every turn is inside its model call when NATS goes away; replies are published after.
    fleet
        .llm
        .set_fallback(Reply::echo().with_delay(Duration::from_secs(2)));
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let mut command = agent_command(&fleet, &format!("question {i}"), &format!("cli:r{i}"));
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        clients.push(tokio::spawn(async move {
            tokio::time::timeout(TURN * 3, command.output())
                .await
                .expect("nanobot agent finishes")
                .expect("run nanobot agent")
        }));
    }
    let all_asked = || std::future::ready(fleet.llm.request_count() >= CLIENTS);
    wait_until(all_asked, TURN).await.unwrap();
    fleet.nats.restart().await.unwrap();

    let mut outputs: Vec<Output> = Vec::new();
    for client in clients {
        outputs.push(client.await.unwrap());
    }
    for (i, out) in outputs.iter().enumerate() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "client {i} failed: {stderr}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            stdout.trim(),
            format!("echo: question {i}"),
            "client {i}: {stderr}"
        );
    }
}
