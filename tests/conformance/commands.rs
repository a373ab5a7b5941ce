//! Command answers against 0.3.5 (through `adapters_commands.py`), in `commands.json`: what
//! `/history [count]`, `/help`, `/goal` and `/trigger` answer.
//!
//! - `history`: [`commands::history_text`] on a session holding the rows, against
//!   `cmd_history` — the count as Python's `int` reads it, clamped to 1..50, user and
//!   assistant text only, cut at 200 characters.
//! - `help`: [`commands::help_text`] against `build_help_text()`.
//! - `goal`: [`commands::goal`] against `cmd_goal` (null: the turn goes to the model).
//! - `trigger_usage`: [`commands::trigger`] without a name against `cmd_trigger`.

use serde_json::{Value, json};

use nanobot_agent::commands;
use nanobot_core::session::Session;

use crate::harness::{self, Case};

const TABLE: &str = include_str!("commands.json");

fn arg(case: &Case, i: usize) -> &Value {
    case.args
        .as_deref()
        .and_then(|a| a.get(i))
        .unwrap_or(&Value::Null)
}

fn call(case: &Case) -> Result<Value, String> {
    Ok(match case.function.as_str() {
        "history" => {
            let session = Session {
                key: "cli:direct".into(),
                messages: serde_json::from_value(arg(case, 0).clone())
                    .map_err(|e| e.to_string())?,
                ..Session::default()
            };
            json!(commands::history_text(&session, arg(case, 1).as_str()))
        }
        "help" => json!(commands::help_text()),
        "goal" => {
            let from_automation = !arg(case, 1).as_bool().unwrap_or(true);
            json!(commands::goal(arg(case, 0).as_str(), from_automation))
        }
        "trigger_usage" => json!(commands::trigger(None)),
        other => return Err(format!("unknown function {other}")),
    })
}

#[test]
fn commands_answer_exactly_as_0_3_5() {
    harness::check(TABLE, call);
}
