//! The tools a turn offers the model, with their definitions built once per tool list.

use nanobot_proto::ToolSpec;
use serde_json::Value;

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
}
