//! Upstream's runner safeguards and tool texts as the model sees them (issue 17): oversized
//! tool results persisted under the workspace, read deduplication, `web_search` run alone,
//! old tool results compacted.

use serde_json::{Value, json};

use crate::e2e::{ask, session_rows};
use crate::harness::Fleet;
use crate::scripted_llm::Reply;

/// Returns the tool rows of a request's messages.
fn tool_rows(messages: &[Value]) -> Vec<Value> {
    messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_tool_result_over_max_tool_result_chars_reaches_the_model_as_a_saved_file_and_preview() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .config(json!({"agents": {"defaults": {"maxToolResultChars": 1500}}}))
        .start()
        .await
        .unwrap();
    fleet.llm.push(Reply::tool_calls([(
        "exec",
        json!({"command": "seq 1 2000"}),
    )]));
    fleet.llm.push(Reply::text("counted"));
    assert_eq!(ask(&mut fleet, "count to 2000", None).await, "counted");

    let requests = fleet.llm.requests();
    let sent = tool_rows(&requests[1].messages());
    let call_id = sent[0]["tool_call_id"].as_str().unwrap();
    let saved = fleet
        .workspace()
        .join(".nanobot/tool-results/cli_direct")
        .join(format!("{call_id}.txt"));
    let full = std::fs::read_to_string(&saved).expect("the whole output is saved");
    assert!(
        full.starts_with("1\n2\n3\n") && full.contains("\n2000\n"),
        "{full:.80}"
    );
    let preview: String = full.chars().take(1200).collect();
    let expected = format!(
        "[tool output persisted]\nFull output saved to workspace path: {}\nOriginal size: {} \
         chars\nPreview:\n{preview}\n...\nPreview is also truncated.\nResult truncated. Read the \
         saved file if you need the complete output.",
        saved.canonicalize().unwrap().display(),
        full.chars().count()
    );
    assert_eq!(sent[0]["content"], expected.as_str());
    let rows = session_rows(&fleet, "default", "cli:direct").await;
    let stored = rows.iter().find(|r| r["role"] == "tool").unwrap();
    assert_eq!(
        stored["content"],
        expected.as_str(),
        "the session keeps the reference"
    );
}

#[tokio::test]
async fn an_unchanged_file_read_again_on_another_runner_answers_file_unchanged_unless_forced() {
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .start()
        .await
        .unwrap();
    fleet.add_replica("tools").await.unwrap();
    std::fs::write(fleet.workspace().join("notes.txt"), "alpha\nbeta\n").unwrap();
    let read = |force: Option<bool>| {
        let mut args = json!({"path": "notes.txt"});
        if let Some(force) = force {
            args["force"] = json!(force);
        }
        Reply::tool_calls([("read_file", args)])
    };
    fleet.llm.push(read(None));
    fleet.llm.push(Reply::text("read it"));
    assert_eq!(ask(&mut fleet, "read my notes", None).await, "read it");
    // The next turn runs on a new runner process: the state is the session's, not memory's.
    super::kill_and_restart_agent(&mut fleet).await;
    fleet.llm.push(read(None));
    fleet.llm.push(read(Some(true)));
    fleet.llm.push(Reply::text("same"));
    assert_eq!(ask(&mut fleet, "read them again", None).await, "same");
    std::fs::write(fleet.workspace().join("notes.txt"), "alpha\ngamma\n").unwrap();
    fleet.llm.push(read(None));
    fleet.llm.push(Reply::text("changed"));
    assert_eq!(ask(&mut fleet, "and now?", None).await, "changed");

    let requests = fleet.llm.requests();
    let last_tool = |i: usize| {
        tool_rows(&requests[i].messages())
            .last()
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .unwrap()
    };
    let full = "1| alpha\n2| beta\n\n(End of file — 2 lines total)";
    assert_eq!(last_tool(1), full);
    assert_eq!(last_tool(3), "[File unchanged since last read: notes.txt]");
    assert_eq!(last_tool(4), full, "force reads the file again");
    assert_eq!(
        last_tool(6),
        "1| alpha\n2| gamma\n\n(End of file — 2 lines total)",
        "a changed file is read in full"
    );
}

#[tokio::test]
async fn history_is_replayed_within_the_token_budget_from_a_user_row_and_think_tags_never_reach_the_user()
 {
    // Input budget: 11000 − 1000 − 1024 = 8976 tokens (by bytes / 4). The replayed history
    // fits it (4 turns of about 1,500 tokens), but the whole request does not: the tool
    // definitions and 0.3.5's system prompt (tool contract included) take about 5,500 tokens,
    // so upstream's snip keeps the newest messages that fit, from a user row: the last turn or
    // two, never the first.
    let mut fleet = Fleet::builder()
        .roles(&["agent", "tools"])
        .config(json!({"agents": {"defaults": {"contextWindowTokens": 11000, "maxTokens": 1000}}}))
        .start()
        .await
        .unwrap();
    let filler = "word ".repeat(600);
    for i in 0..4 {
        fleet.llm.push(Reply::text(format!("reply {i} {filler}")));
        ask(&mut fleet, &format!("question {i} {filler}"), None).await;
    }
    fleet.llm.push(Reply::text("</think>Hi there <thi"));
    // The CLI streams raw deltas, then prints the authoritative final text on its own line.
    let printed = ask(&mut fleet, "last one", None).await;
    assert_eq!(printed.lines().last(), Some("Hi there"), "{printed}");

    let sent = fleet.llm.requests()[4].messages();
    let history: Vec<&Value> = sent[1..sent.len() - 1].iter().collect();
    assert_eq!(history[0]["role"], "user", "{history:#?}");
    let texts: Vec<&str> = history
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        texts.iter().any(|t| t.starts_with("question 3")),
        "{texts:?}"
    );
    assert!(
        !texts.iter().any(|t| t.starts_with("question 0")),
        "the oldest turn is over the budget: {texts:?}"
    );
    let rows = session_rows(&fleet, "default", "cli:direct").await;
    assert_eq!(rows.last().unwrap()["content"], "Hi there");
}
