//! `create_goal` and `update_goal` (upstream `agent/tools/long_task.py`), served by the
//! turn's runner like `message` and `spawn`: the goal lives in the session's metadata, which
//! only the runner holding the session's lease may write.
//!
//! A call edits the turn's copy of the metadata ([`SessionCheckpoints::edit`]); it reaches
//! Redis with the next save of the turn, in the same write as the call's result row (the
//! batch's `tools_completed` save, or the turn's final commit). A runner killed before that
//! write leaves neither the row nor the goal: the turn is resumed from its last checkpoint
//! and the model calls the tool again. `create_goal` (and `update_goal` with
//! `action='replace'`) may only run in a turn a user's `/goal <task>` started, until the goal
//! is completed, cancelled or blocked (upstream's `goal_mutation_permission`). Both are offered
//! in every turn, as 0.3.5 registers them wherever a session exists; subagents get neither.

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value, json};

use nanobot_core::goal::{self, MAX_OBJECTIVE_CHARS, MAX_SUMMARY_CHARS};
use nanobot_core::session::now_iso;
use nanobot_core::tools::ToolOutcome;

use crate::base::served_tools::{CREATE_GOAL, UPDATE_GOAL, create_goal_schema, update_goal_schema};
use crate::turn::checkpoints::SessionCheckpoints;

pub use crate::base::served_tools::goal_specs as specs;

const CREATE_UNAVAILABLE: &str = "Error: create_goal is unavailable for this turn. Ask the user \
     to submit the complete objective as `/goal <task>`.";
const REPLACE_UNAVAILABLE: &str = "Error: replacing the goal is unavailable for this turn. Ask \
     the user to submit the replacement objective as `/goal <task>`.";
const ALREADY_ACTIVE: &str = "Error: a sustained goal is already active. Use update_goal with \
     action='replace' only if the user explicitly changes the objective.";
const NO_ACTIVE_GOAL: &str = "No active goal to update.";

/// The goal tools of one turn.
pub struct GoalTools<'a> {
    sink: &'a SessionCheckpoints<'a>,
    /// The turn may create or replace a goal (a user's `/goal` started it).
    allowed: AtomicBool,
}

fn text(args: &Map<String, Value>, key: &str) -> String {
    args.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn summary(args: &Map<String, Value>) -> String {
    text(args, "ui_summary")
        .chars()
        .take(MAX_SUMMARY_CHARS)
        .collect()
}

fn summary_line(summary: &str) -> String {
    if summary.is_empty() {
        String::new()
    } else {
        format!("\nSummary line: {summary}")
    }
}

/// Checks a new objective as upstream does after the schema did.
fn objective(args: &Map<String, Value>) -> Result<String, String> {
    let objective = text(args, "objective");
    if objective.chars().count() > MAX_OBJECTIVE_CHARS {
        return Err(format!(
            "Error: objective must not exceed {MAX_OBJECTIVE_CHARS} characters."
        ));
    }
    Ok(objective)
}

impl<'a> GoalTools<'a> {
    /// The tools writing through `sink`; `allowed` when a user's `/goal` started the turn.
    pub fn new(sink: &'a SessionCheckpoints<'a>, allowed: bool) -> Self {
        Self {
            sink,
            allowed: AtomicBool::new(allowed),
        }
    }

    /// Whether `name` is one of these tools.
    pub fn serves(name: &str) -> bool {
        name == CREATE_GOAL || name == UPDATE_GOAL
    }

    /// Runs a call of `name` with `arguments` (JSON text) on the turn's metadata.
    pub async fn execute(&self, name: &str, arguments: &str) -> ToolOutcome {
        let mut allowed = self.allowed.load(Ordering::SeqCst);
        let outcome = self
            .sink
            .edit(|metadata| call(metadata, &mut allowed, name, arguments))
            .await;
        self.allowed.store(allowed, Ordering::SeqCst);
        outcome
    }
}

/// Runs a call of tool `name` with `arguments` (JSON text) on session `metadata`; `allowed`:
/// the turn may create or replace a goal (cleared once the goal ends, as upstream).
pub fn call(
    metadata: &mut Map<String, Value>,
    allowed: &mut bool,
    name: &str,
    arguments: &str,
) -> ToolOutcome {
    let schema = if name == CREATE_GOAL {
        create_goal_schema()
    } else {
        update_goal_schema()
    };
    let outcome =
        match nanobot_tools::params::prepare_params(name, arguments, &schema, |_| Vec::new()) {
            Err(e) => Err(e),
            Ok(args) if name == CREATE_GOAL => create(metadata, *allowed, &args),
            Ok(args) => update(metadata, allowed, &args),
        };
    ToolOutcome::of(outcome)
}

fn create(
    metadata: &mut Map<String, Value>,
    allowed: bool,
    args: &Map<String, Value>,
) -> Result<String, String> {
    if !allowed {
        return Err(CREATE_UNAVAILABLE.into());
    }
    if goal::is_active(metadata) {
        return Err(ALREADY_ACTIVE.to_string());
    }
    let objective = objective(args)?;
    if objective.is_empty() {
        return Err("Error: objective must not be empty.".into());
    }
    let summary = summary(args);
    let blob = json!({
        "status": "active",
        "objective": objective,
        "ui_summary": summary,
        "started_at": now_iso(),
    });
    goal::store(metadata, into_map(blob), true);
    Ok(format!(
        "Goal recorded. Keep working toward the objective using ordinary tools. When fully done \
         and verified, call update_goal with action='complete'.{}",
        summary_line(&summary)
    ))
}

fn update(
    metadata: &mut Map<String, Value>,
    allowed: &mut bool,
    args: &Map<String, Value>,
) -> Result<String, String> {
    let Some(prior) = goal::active_goal(metadata) else {
        return Ok(NO_ACTIVE_GOAL.to_string());
    };
    let action = text(args, "action").to_lowercase();
    if action == "replace" {
        return replace(metadata, &prior, args, *allowed);
    }
    let text = end(metadata, prior, &action, args)?;
    *allowed = false;
    Ok(text)
}

fn into_map(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn replace(
    metadata: &mut Map<String, Value>,
    prior: &Map<String, Value>,
    args: &Map<String, Value>,
    allowed: bool,
) -> Result<String, String> {
    if !allowed {
        return Err(REPLACE_UNAVAILABLE.into());
    }
    let objective = objective(args)?;
    if objective.is_empty() {
        return Err("Error: update_goal action='replace' requires a replacement objective.".into());
    }
    let summary = summary(args);
    let previous = prior
        .get("objective")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let blob = json!({
        "status": "active",
        "objective": objective,
        "ui_summary": summary,
        "started_at": now_iso(),
        "replaced_at": now_iso(),
        "previous_objective": previous,
        "recap": text(args, "recap"),
    });
    goal::store(metadata, into_map(blob), true);
    Ok(format!(
        "Goal replaced. Continue toward the new objective using ordinary tools.{}",
        summary_line(&summary)
    ))
}

/// Completes, cancels or blocks the goal.
fn end(
    metadata: &mut Map<String, Value>,
    mut blob: Map<String, Value>,
    action: &str,
    args: &Map<String, Value>,
) -> Result<String, String> {
    let (status, label) = match action {
        "complete" => ("completed", "complete"),
        "cancel" => ("cancelled", "cancelled"),
        "block" => ("blocked", "blocked"),
        _ => {
            return Err(
                "Error: action must be one of complete, cancel, block, or replace.".to_string(),
            );
        }
    };
    let ended = now_iso();
    let recap = text(args, "recap");
    blob.insert("status".into(), json!(status));
    blob.insert("ended_at".into(), json!(ended));
    blob.insert("recap".into(), json!(recap));
    if action == "complete" {
        blob.insert("completed_at".into(), json!(ended));
    }
    goal::store(metadata, blob, false);
    Ok(if recap.is_empty() {
        format!("Goal marked {label} ({ended}).")
    } else {
        format!("Goal marked {label} ({ended}). Recap:\n{recap}")
    })
}

#[cfg(test)]
#[path = "goal_tools_tests.rs"]
mod tests;
