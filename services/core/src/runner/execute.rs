//! Tool batches (upstream `_partition_tool_batches`): consecutive concurrency-safe calls
//! (read-only and not exclusive, so never `web_search`) run in parallel, anything else alone; results come back in call order. Argument text is repaired
//! when it is almost JSON; an empty result becomes upstream's "completed with no output".
//!
//! Repeated external lookups (upstream `repeated_external_lookup_error`): from the third
//! `web_fetch` of one URL or `web_search` of one query in a turn, the call is not run and the
//! model gets upstream's refusal. The counts live in the turn's memory: a turn resumed after a
//! crash starts them again.
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
use nanobot_runtime::metrics::ToolName;

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
        let blocked: Vec<bool> = calls
            .iter()
            .take(MAX_CALLS_PER_REPLY)
            .map(|c| {
                lookup_signature(c).is_some_and(|key| {
                    let seen = self.lookups.entry(key).or_default();
                    *seen += 1;
                    *seen > MAX_REPEAT_EXTERNAL_LOOKUPS
                })
            })
            .collect();
        let outcomes = run_calls(
            self.deps.tools,
            &self.spec.scope,
            &self.offered,
            &self.concurrent,
            calls,
            &blocked,
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
            let content = self
                .spec
                .offload
                .apply(
                    &self.spec.scope.session_key,
                    &call.name,
                    &call.id,
                    outcome.content,
                )
                .await;
            let row = json!({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content});
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

/// Times one URL or query may be looked up in a turn (upstream `_MAX_REPEAT_EXTERNAL_LOOKUPS`).
pub const MAX_REPEAT_EXTERNAL_LOOKUPS: u32 = 2;
/// Upstream's result for a lookup past [`MAX_REPEAT_EXTERNAL_LOOKUPS`].
pub const REPEATED_LOOKUP_ERROR: &str = "Error: repeated external lookup blocked. Use the results \
     you already have to answer, or try a meaningfully different source.";

/// Returns what a `web_fetch` / `web_search` call looks up (trimmed, lowercased), else `None`.
fn lookup_signature(c: &ToolCall) -> Option<String> {
    let field = match c.name.as_str() {
        "web_fetch" => "url",
        "web_search" => "query",
        _ => return None,
    };
    let args: Value = serde_json::from_str(&args::repaired_text(&c.arguments)).ok()?;
    let target = args.get(field)?.as_str()?.trim().to_lowercase();
    (!target.is_empty()).then(|| format!("{}:{target}", c.name))
}

/// Runs one call: repaired arguments, upstream's text for an empty result, the hook after.
/// Its metrics carry the tool's name only when the turn `offered` it (else `unknown`).
async fn run_one(
    tools: &dyn ToolExecutor,
    scope: &ToolScope,
    offered: &HashSet<String>,
    hook: &dyn AgentHook,
    c: &ToolCall,
    blocked: bool,
) -> ToolOutcome {
    if blocked {
        let outcome = ToolOutcome {
            content: Value::String(format!("{REPEATED_LOOKUP_ERROR}{RETRY_HINT}")),
            is_error: true,
        };
        let _ = hook.after_execute_tool(c, &outcome);
        return outcome;
    }
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
        ToolName::new(&c.name, offered.contains(&c.name)),
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

/// Runs `calls` in batches and returns one outcome per call, in order; a call whose index is
/// `true` in `blocked` gets [`REPEATED_LOOKUP_ERROR`] instead of running. `offered` names the
/// tools the turn offered (the only names its metrics carry).
pub(crate) async fn run_calls(
    tools: &dyn ToolExecutor,
    scope: &ToolScope,
    offered: &HashSet<String>,
    concurrent: &HashSet<String>,
    calls: &[ToolCall],
    blocked: &[bool],
    hook: &dyn AgentHook,
) -> Vec<ToolOutcome> {
    let mut out = Vec::with_capacity(calls.len());
    let requested = calls.len();
    let calls = &calls[..requested.min(MAX_CALLS_PER_REPLY)];
    let mut i = 0;
    while i < calls.len() {
        let mut end = i + 1;
        if concurrent.contains(&calls[i].name) {
            while end < calls.len() && concurrent.contains(&calls[end].name) {
                end += 1;
            }
        }
        // Collected first: a lazily mapped iterator inside `buffered` hides the futures'
        // lifetimes from the `Send` check of the spawned turn.
        let calls_run: Vec<_> = (i..end)
            .map(|j| {
                let blocked = blocked.get(j) == Some(&true);
                run_one(tools, scope, offered, hook, &calls[j], blocked)
            })
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
