//! Tool batches (upstream `_partition_tool_batches`): consecutive read-only calls run in
//! parallel, anything else alone; results come back in call order. Argument text is repaired
//! when it is almost JSON; an empty result becomes upstream's "completed with no output".
//!
//! Fairness: one reply runs at most [`MAX_CALLS_PER_REPLY`] calls (the rest get an error
//! result telling the model to call them in a later step) and at most [`MAX_IN_FLIGHT`] of
//! them at once, so one session holds at most that many executor slots whatever the model asks.

use std::collections::HashSet;

use futures::StreamExt as _;
use serde_json::{Value, json};
use tracing::Instrument as _;

use super::{Run, assistant_message, call_json};
use crate::args;
use crate::checkpoint::{Checkpoint, Phase};
use crate::hooks::AgentHook;
use crate::provider::{ChatResponse, ToolCall};
use crate::tools::{RETRY_HINT, ToolExecutor, ToolOutcome, ToolScope};

impl Run<'_> {
    /// Runs one batch of tool calls with checkpoints before and after.
    pub(super) async fn tools(&mut self, iteration: u32, response: &ChatResponse) {
        let hook = self.deps.hook;
        if self.requester.streaming {
            let _ = hook.on_stream_end(true);
        }
        let calls = &response.tool_calls;
        let assistant = assistant_message(
            response.content.as_deref().filter(|c| !c.is_empty()),
            response,
            calls,
        );
        self.messages.push(assistant.clone());
        let pending: Vec<Value> = calls.iter().map(call_json).collect();
        let model = self.spec.model.clone();
        self.emit(Checkpoint {
            phase: Phase::AwaitingTools,
            iteration,
            model: model.clone(),
            assistant_message: assistant.clone(),
            completed_tool_results: Vec::new(),
            pending_tool_calls: pending,
        })
        .await;
        let _ = hook.before_execute_tools(response);
        let outcomes = run_calls(
            self.deps.tools,
            &self.spec.scope,
            &self.read_only,
            calls,
            hook,
        )
        .await;
        let mut completed = Vec::with_capacity(calls.len());
        for (call, outcome) in calls.iter().zip(outcomes) {
            if outcome.is_error {
                self.result.tool_errors += 1;
            } else {
                self.result.tools_used.push(call.name.clone());
            }
            let row = json!({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": outcome.content});
            self.messages.push(row.clone());
            completed.push(row);
        }
        self.emit(Checkpoint {
            phase: Phase::ToolsCompleted,
            iteration,
            model,
            assistant_message: assistant,
            completed_tool_results: completed,
            pending_tool_calls: Vec::new(),
        })
        .await;
    }
}

/// Most tool calls of one model reply that are run.
pub const MAX_CALLS_PER_REPLY: usize = 64;
/// Most tool calls of one session in flight at once.
pub const MAX_IN_FLIGHT: usize = 8;

/// Runs one call: repaired arguments, upstream's text for an empty result, the hook after.
async fn run_one(
    tools: &dyn ToolExecutor,
    scope: &ToolScope,
    hook: &dyn AgentHook,
    c: &ToolCall,
) -> ToolOutcome {
    let arguments = args::repaired_text(&c.arguments);
    let span = tracing::info_span!(
        "execute_tool",
        "otel.name" = %format_args!("execute_tool {}", c.name),
        "gen_ai.operation.name" = "execute_tool",
        "gen_ai.tool.name" = %c.name,
        "gen_ai.tool.call.id" = %c.id,
    );
    let started = std::time::Instant::now();
    let mut outcome = tools
        .execute(scope, &c.id, &c.name, &arguments)
        .instrument(span)
        .await;
    nanobot_runtime::metrics::get().tool_call(
        &c.name,
        "runner",
        started.elapsed(),
        outcome.is_error,
    );
    if outcome
        .content
        .as_str()
        .is_some_and(|s| s.trim().is_empty())
        || outcome.content.is_null()
    {
        outcome.content = Value::String(format!("({} completed with no output)", c.name));
    }
    let _ = hook.after_execute_tool(c, &outcome);
    outcome
}

/// Returns the result of a call over [`MAX_CALLS_PER_REPLY`].
fn over_cap(requested: usize) -> ToolOutcome {
    ToolOutcome {
        content: Value::String(format!(
            "Error: too many tool calls in one reply ({requested}); only the first \
             {MAX_CALLS_PER_REPLY} were run. Make the remaining calls in a later step.\
             {RETRY_HINT}"
        )),
        is_error: true,
    }
}

/// Runs `calls` in batches and returns one outcome per call, in order.
pub(crate) async fn run_calls(
    tools: &dyn ToolExecutor,
    scope: &ToolScope,
    read_only: &HashSet<String>,
    calls: &[ToolCall],
    hook: &dyn AgentHook,
) -> Vec<ToolOutcome> {
    let mut out = Vec::with_capacity(calls.len());
    let requested = calls.len();
    let calls = &calls[..requested.min(MAX_CALLS_PER_REPLY)];
    let mut i = 0;
    while i < calls.len() {
        let mut end = i + 1;
        if read_only.contains(&calls[i].name) {
            while end < calls.len() && read_only.contains(&calls[end].name) {
                end += 1;
            }
        }
        let batch = &calls[i..end];
        // Collected first: a lazily mapped iterator inside `buffered` hides the futures'
        // lifetimes from the `Send` check of the spawned turn.
        let calls_run: Vec<_> = batch
            .iter()
            .map(|c| run_one(tools, scope, hook, c))
            .collect();
        let results = futures::stream::iter(calls_run)
            .buffered(MAX_IN_FLIGHT)
            .collect::<Vec<_>>()
            .await;
        out.extend(results);
        i = end;
    }
    out.extend((calls.len()..requested).map(|_| over_cap(requested)));
    out
}
