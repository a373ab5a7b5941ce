//! The tools a turn offers the model, with their definitions built once per tool list.

use serde_json::Value;

use nanobot_proto::{ToolSpec, tool_names};

/// The tools offered to the model: their specs and their OpenAI function definitions, built
/// once per discovered list rather than once per LLM call.
#[derive(Debug, Clone, Default)]
pub struct Offered {
    specs: Vec<ToolSpec>,
    definitions: Vec<Value>,
    definitions_bytes: usize,
    /// How many of `specs` the executors serve (the rest are the runner's own).
    served: usize,
}

impl Offered {
    /// Offers `specs`.
    pub fn new(specs: Vec<ToolSpec>) -> Self {
        Self::with_local(specs, &[])
    }

    /// Offers the executors' `specs` followed by the runner's own `local` ones.
    pub(crate) fn with_local(mut specs: Vec<ToolSpec>, local: &[ToolSpec]) -> Self {
        let served = specs.len();
        specs.extend_from_slice(local);
        let definitions = super::ToolClient::definitions(&specs);
        let definitions_bytes = serde_json::to_string(&definitions).map_or(0, |s| s.len());
        Self {
            specs,
            definitions,
            definitions_bytes,
            served,
        }
    }

    /// The specs, executors' first.
    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// The specs the executors serve.
    pub fn served(&self) -> &[ToolSpec] {
        &self.specs[..self.served]
    }

    /// The OpenAI function definitions, in the order of [`Self::specs`].
    pub fn definitions(&self) -> &[Value] {
        &self.definitions
    }

    /// Returns upstream's error for a call of `name` when no offered tool has that name (the
    /// list in upstream's registration order); `None` when it is offered, or when the
    /// executors offered nothing yet (the call then says that no executor answers).
    pub fn unknown_tool_error(&self, name: &str) -> Option<String> {
        if self.served == 0 || self.specs.iter().any(|s| s.name == name) {
            return None;
        }
        let mut names: Vec<&str> = self.specs.iter().map(|s| s.name.as_str()).collect();
        tool_names::sort(&mut names);
        Some(tool_names::unknown_tool_error(name, &names))
    }

    /// Length of the definitions serialised as a JSON array.
    pub fn definitions_bytes(&self) -> usize {
        self.definitions_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: format!("{name} tool"),
            parameters_json: r#"{"type":"object","properties":{"x":{"type":"string"}}}"#.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_runners_own_tools_follow_the_executors_and_the_definitions_match_the_specs() {
        let offered =
            Offered::with_local(vec![spec("read_file"), spec("exec")], &[spec("message")]);
        let names: Vec<&str> = offered.specs().iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["read_file", "exec", "message"]);
        assert_eq!(offered.served().len(), 2);
        let defined: Vec<&str> = offered
            .definitions()
            .iter()
            .map(|d| d["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(defined, names);
        assert_eq!(
            offered.definitions()[0]["function"]["parameters"]["properties"]["x"]["type"],
            "string"
        );
        assert_eq!(
            offered.definitions_bytes(),
            Value::Array(offered.definitions().to_vec())
                .to_string()
                .len()
        );
        assert_eq!(Offered::default().definitions_bytes(), 0);
        assert_eq!(Offered::new(Vec::new()).definitions_bytes(), 2, "[]");
    }

    #[test]
    fn a_call_of_a_tool_nobody_offers_lists_every_offered_tool_in_upstreams_order() {
        let offered = Offered::with_local(
            vec![
                spec("write_file"),
                spec("exec"),
                spec("list_exec_sessions"),
                spec("cron"),
            ],
            &[spec("message"), spec("spawn")],
        );
        // nanobot 0.3.5's registry text for the same tools.
        assert_eq!(
            offered.unknown_tool_error("笔记 📔").as_deref(),
            Some(
                "Error: Tool '笔记 📔' not found. Available: cron, exec, list_exec_sessions, \
                 message, spawn, write_file"
            )
        );
        assert_eq!(
            offered.unknown_tool_error("Message").as_deref(),
            Some(
                "Error: Tool 'Message' not found. Did you mean 'message'? Tool names must match \
                 exactly. Available: cron, exec, list_exec_sessions, message, spawn, write_file"
            )
        );
        assert_eq!(offered.unknown_tool_error("spawn"), None);
        assert_eq!(offered.unknown_tool_error("exec"), None);
        let nothing_served = Offered::with_local(Vec::new(), &[spec("message")]);
        assert_eq!(nothing_served.unknown_tool_error("exec"), None);
    }
}
