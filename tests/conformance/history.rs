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
//! - `replay`: [`history::replay_within`] (what a turn calls) against the two in turn;
//!   `load_and_replay` the same against 0.3.5's replay of rows as it loads them (stored
//!   `write_stdin` calls migrated to `exec_session`, which our replay does row by row).
//! - `fit_to_budget`: the runner's snip ([`snip::for_model`] under [`input_budget`]) against
//!   0.3.5's pressure check then `ContextGovernor.fit_to_budget`, without tools. We estimate a
//!   request by its bytes where 0.3.5 counts `cl100k_base` tokens, so the cases keep budgets
//!   whose decisions both estimates share. A request still over budget after the snip is
//!   `{"error": "over budget"}` ([`snip::still_over`]; 0.3.5's `ContextWindowExceededError`).
//!
//! A case's input is `{"messages", "last_archived", "max_messages", "extend_to_user",
//! "max_tokens"}` (all but `messages` optional).

use std::borrow::Cow;

use serde_json::{Value, json};

use nanobot_core::history;
use nanobot_core::runner::{compact::input_budget, snip};

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
        "fit_to_budget" => {
            let window = u32::try_from(field(case, "context_window")).map_err(|e| e.to_string())?;
            let max_tokens = u32::try_from(field(case, "max_tokens")).map_err(|e| e.to_string())?;
            let budget = input_budget(window, max_tokens, None);
            let sent = snip::for_model(Cow::Owned(messages), budget, 0).into_owned();
            if snip::still_over(&sent, budget, 0).is_some() {
                return Ok(json!({"error": "over budget"}));
            }
            sent
        }
        "replay" | "load_and_replay" => {
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

/// The cases marked `deliberate`, by name.
fn deliberate(table: &harness::Table) -> Vec<&Case> {
    table
        .cases
        .iter()
        .filter(|case| case.deliberate.is_some())
        .collect()
}

fn deliberate_case<'a>(table: &'a harness::Table, prefix: &str) -> &'a Case {
    deliberate(table)
        .into_iter()
        .find(|case| case.name.starts_with(prefix))
        .expect("a deliberate case")
}

#[test]
fn think_tags_are_deliberately_stripped_from_replayed_assistant_text() {
    let table = harness::parse(TABLE);
    assert_eq!(deliberate(&table).len(), 2, "the table's deliberate cases");
    let ours = call(deliberate_case(&table, "think tags")).unwrap();
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

#[test]
fn a_request_estimated_by_bytes_is_snipped_to_a_legal_tail_within_budget() {
    let table = harness::parse(TABLE);
    let case = deliberate_case(&table, "a request over budget by 0.3.5's token count");
    let ours = call(case).unwrap();
    let sent: Vec<(&str, &str)> = ours
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].as_str().unwrap(), m["content"].as_str().unwrap()))
        .collect();
    // 0.3.5 keeps turns 6 and 7; our estimate fits turn 7 only, from its user row.
    assert_eq!(sent.len(), 4, "{sent:?}");
    assert_eq!(sent[0].0, "system");
    assert!(sent[1].1.starts_with("question 7"), "{sent:?}");
    assert!(sent[2].1.starts_with("answer 7"), "{sent:?}");
    assert_eq!(sent[3], ("user", "now"));
    let expected = case.expected.as_array().unwrap();
    assert_eq!(expected.len(), 6, "0.3.5 sends one turn more");
}
