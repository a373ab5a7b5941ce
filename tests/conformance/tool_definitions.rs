//! Tool definitions (`nanobot_tools::registry::Registry::specs` with default config) against
//! the definitions 0.3.5's `AgentLoop` offers the model (through
//! `adapters_tool_definitions.py`), in `tool_definitions.json`: each built-in tool's name,
//! description and parameter schema, word for word; `create_goal` and `update_goal` are the
//! runner's (`nanobot_agent::goal_tools::specs`).

use std::sync::{Arc, LazyLock};

use serde_json::{Value, json};

use nanobot_runtime::config::ToolsConfig;
use nanobot_tools::registry::Registry;
use nanobot_tools::tools::exec_session::ExecSessions;

use crate::harness::{self, Case};

const TABLE: &str = include_str!("tool_definitions.json");

static REGISTRY: LazyLock<Registry> = LazyLock::new(|| {
    Registry::builtin(&ToolsConfig::default(), &Arc::new(ExecSessions::default()))
        .expect("the default registry builds")
});

fn call(case: &Case) -> Result<Value, String> {
    let name = case.input_str();
    // The executors' tools, then the ones the runner serves itself.
    let spec = REGISTRY
        .specs()
        .into_iter()
        .chain(nanobot_agent::goal_tools::specs())
        .find(|spec| spec.name == name)
        .ok_or_else(|| format!("no built-in tool {name}"))?;
    let parameters: Value =
        serde_json::from_str(&spec.parameters_json).map_err(|e| e.to_string())?;
    Ok(json!({"name": spec.name, "description": spec.description, "parameters": parameters}))
}

#[test]
fn built_in_tools_are_offered_exactly_as_0_3_5_offers_them() {
    harness::check(TABLE, call);
}
