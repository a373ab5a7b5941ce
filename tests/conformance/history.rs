//! History replay against 0.3.5 (through `adapters_history.py`), in `history.json`: what the
//! model is sent of a session's history.
//!
//! - `get_history`: [`history::get_history`] against `Session.get_history` — the rows from the
//!   archive watermark (a summary checkpoint's hidden row), no message cap unless the caller
//!   sets one, user-aligned, legal tool-call start, command rows, sanitised assistant text,
//!   media and CLI-app breadcrumbs, the token budget (counted as 0.3.5 counts with tiktoken;
//!   the budgets leave a margin our `o200k_base` counts never cross).
//! - `prepare_for_model`: [`history::prepare_for_model`] against
//!   `ContextGovernor.prepare_messages_for_model` — placeholders, malformed calls, orphan,
//!   duplicate, missing and empty results, adjacent user messages.
//! - `replay`: [`history::replay_within`] (what a turn calls) against the two in turn.
//!
//! A case's input is `{"messages", "last_archived", "max_messages", "extend_to_user",
//! "max_tokens"}` (all but `messages` optional).

use serde_json::{Value, json};

use nanobot_core::history;

use crate::harness::{self, Case};

const TABLE: &str = include_str!("history.json");

fn field(case: &Case, key: &str) -> usize {
    case.input[key]
        .as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0)
}

fn messages(case: &Case) -> Result<Vec<Value>, String> {
    serde_json::from_value(case.input["messages"].clone()).map_err(|e| e.to_string())
}

fn call(case: &Case) -> Result<Value, String> {
    let messages = messages(case)?;
    let archived = field(case, "last_archived");
    let tokens = field(case, "max_tokens");
    let extend = case.input["extend_to_user"].as_bool().unwrap_or(false);
    let rows = match case.function.as_str() {
        "get_history" => {
            let cap = field(case, "max_messages");
            history::get_history(&messages, archived, cap, extend, tokens)
        }
        "prepare_for_model" => history::prepare_for_model(messages),
        "replay" => {
            history::replay_within(&messages, archived, history::MAX_REPLAY_MESSAGES, tokens)
        }
        other => return Err(format!("unknown function {other}")),
    };
    Ok(json!(rows))
}

#[test]
fn history_is_replayed_to_the_model_exactly_as_0_3_5() {
    harness::check(TABLE, call);
}

#[test]
fn think_tags_are_deliberately_stripped_from_replayed_assistant_text() {
    let table = harness::parse(TABLE);
    let deliberate: Vec<&Case> = table
        .cases
        .iter()
        .filter(|case| case.deliberate.is_some())
        .collect();
    assert_eq!(deliberate.len(), 1, "the table's deliberate cases");
    let ours = call(deliberate[0]).unwrap();
    // 0.3.5 replays `<think>plan</think>Answer`, `Bye</think>` and `<thi` as stored; we send
    // the answer without its reasoning and drop a row left with nothing to say.
    assert_eq!(
        ours,
        json!([
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "Answer"},
            {"role": "assistant", "content": "Bye"},
        ])
    );
}
