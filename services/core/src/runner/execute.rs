//! Tool batches (upstream `_partition_tool_batches`): consecutive read-only calls run in
//! parallel, anything else alone; results come back in call order. Argument text is repaired
//! when it is almost JSON; an empty result becomes upstream's "completed with no output".

use std::collections::HashSet;

use futures::future::join_all;
use serde_json::Value;

use crate::args;
use crate::hooks::AgentHook;
use crate::provider::ToolCall;
use crate::tools::{ToolExecutor, ToolOutcome, ToolScope};

/// Runs `calls` in batches and returns one outcome per call, in order.
pub(crate) async fn run_calls(
    tools: &dyn ToolExecutor,
    scope: &ToolScope,
    read_only: &HashSet<String>,
    calls: &[ToolCall],
    hook: &dyn AgentHook,
) -> Vec<ToolOutcome> {
    let mut out = Vec::with_capacity(calls.len());
    let mut i = 0;
    while i < calls.len() {
        let mut end = i + 1;
        if read_only.contains(&calls[i].name) {
            while end < calls.len() && read_only.contains(&calls[end].name) {
                end += 1;
            }
        }
        let batch = &calls[i..end];
        let results = join_all(batch.iter().map(|c| async move {
            let arguments = args::repaired_text(&c.arguments);
            let mut outcome = tools.execute(scope, &c.id, &c.name, &arguments).await;
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
        }))
        .await;
        out.extend(results);
        i = end;
    }
    out
}
