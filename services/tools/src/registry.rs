//! The tool contract (`Tool`), what a call sees (`ToolContext`) and returns (`ToolOutput`),
//! and the `Registry` that prepares a call (coercion, cast, validation) and runs it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Map, Value};

use nanobot_proto::{FileRead, ToolSpec};
use nanobot_runtime::config::ToolsConfig;

use crate::params;
use crate::sandbox::Sandbox;
use crate::tools;

/// Validated parameters of one call.
pub type Args = Map<String, Value>;

/// What one tool call runs against.
#[derive(Debug, Clone)]
pub struct ToolContext {
    /// The bot's workspace and whether tools are confined to it.
    pub sandbox: Sandbox,
    /// The calling session (`channel:chat`).
    pub session_key: String,
    /// The chat the turn came from.
    pub origin: Origin,
    /// The session's earlier `read_file` results (upstream's read deduplication).
    pub file_reads: Vec<FileRead>,
}

/// The chat a call's turn came from, for tools that act on it later (`cron`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// The bot the call is for.
    pub bot: String,
    /// Channel of the turn.
    pub channel: String,
    /// Chat of the turn.
    pub chat_id: String,
    /// The turn runs a cron job.
    pub in_cron: bool,
}

/// The result of one tool call, as the model will see it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ToolOutput {
    /// Text result, or the `Error: …` text.
    pub content: String,
    /// Whether the call failed (upstream: the text starts with `Error`).
    pub is_error: bool,
    /// Content blocks as a JSON array when the result is not plain text (images).
    pub blocks_json: String,
    /// What a `read_file` call read, for the session's next calls.
    pub file_read: Option<FileRead>,
}

impl ToolOutput {
    /// Returns a successful text result.
    pub fn text(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
            blocks_json: String::new(),
            file_read: None,
        }
    }

    /// Returns a failed result (the text should start with `Error`).
    pub fn error(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: true,
            blocks_json: String::new(),
            file_read: None,
        }
    }
}

/// One tool served by the executors.
#[async_trait::async_trait]
pub trait Tool: Send + Sync + std::fmt::Debug {
    /// Returns the name the model calls the tool by.
    fn name(&self) -> &str;
    /// Returns the description shown to the model.
    fn description(&self) -> &str;
    /// Returns the JSON Schema of the parameters (an object schema).
    fn parameters(&self) -> Value;
    /// Returns whether the tool has no side effects (safe to run concurrently and to retry).
    fn read_only(&self) -> bool {
        false
    }
    /// Returns whether the tool must run alone, never batched with other calls (upstream
    /// `exclusive`: `exec`, `web_search`).
    fn exclusive(&self) -> bool {
        false
    }
    /// Returns the tool's own checks beyond its schema (upstream's `validate_params`
    /// overrides), each joining the `Invalid parameters` list; none by default.
    fn validate(&self, _args: &Args) -> Vec<String> {
        Vec::new()
    }
    /// Runs the tool with validated parameters.
    async fn execute(&self, ctx: &ToolContext, args: Args) -> ToolOutput;
}

/// Failure to build the registry from config.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A configured `denyPatterns`/`allowPatterns` entry is not a valid regex.
    #[error("invalid tools.exec.{field} pattern {pattern:?}: {cause}")]
    Pattern {
        field: &'static str,
        pattern: String,
        cause: String,
    },
    /// A `tools` section does not have the expected shape.
    #[error("invalid {section}: {cause}")]
    Section {
        section: &'static str,
        cause: String,
    },
}

/// The tools one executor serves, by name, and the MCP servers still to reach (whose tools
/// join once they answer).
#[derive(Debug, Clone, Default)]
pub struct Registry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
    mcp: Arc<crate::mcp::Pending>,
}

impl Registry {
    /// Returns the builtin tools enabled by `cfg`, the exec tools keeping their sessions in
    /// `sessions`.
    pub fn builtin(
        cfg: &ToolsConfig,
        sessions: &Arc<tools::exec_session::ExecSessions>,
    ) -> Result<Self, RegistryError> {
        let mut registry = Self::default();
        for tool in tools::builtin(cfg, sessions)? {
            registry.register(tool);
        }
        Ok(registry)
    }

    /// Adds (or replaces) a tool.
    pub fn register(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.name().to_string(), tool);
    }

    /// Serves the tools of `pending` MCP servers once they are reached.
    pub fn set_pending_mcp(&mut self, pending: crate::mcp::Pending) {
        self.mcp = Arc::new(pending);
    }

    /// Returns the MCP servers not reached at start.
    pub fn pending_mcp(&self) -> &crate::mcp::Pending {
        &self.mcp
    }

    fn all(&self) -> Vec<Arc<dyn Tool>> {
        let mut all: Vec<Arc<dyn Tool>> = self.tools.values().cloned().collect();
        all.extend(self.mcp.tools());
        all
    }

    /// Returns whether `name` is a registered tool (built-in or MCP).
    pub fn serves(&self, name: &str) -> bool {
        self.tools.contains_key(name) || self.mcp.tool(name).is_some()
    }

    /// Returns the registered names in upstream's registration order: builtins by tool
    /// class name, then MCP tools ([`nanobot_proto::tool_names::sort`]).
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.all().iter().map(|t| t.name().to_string()).collect();
        nanobot_proto::tool_names::sort(&mut names);
        names
    }

    /// Returns the tool specs: builtins sorted by name, then `mcp_*` sorted (a stable prompt
    /// prefix, as upstream).
    pub fn specs(&self) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self
            .all()
            .iter()
            .map(|t| ToolSpec {
                name: t.name().into(),
                description: t.description().into(),
                parameters_json: t.parameters().to_string(),
                read_only: t.read_only(),
                exclusive: t.exclusive(),
            })
            .collect();
        specs.sort_by(|a, b| {
            (a.name.starts_with("mcp_"), &a.name).cmp(&(b.name.starts_with("mcp_"), &b.name))
        });
        specs
    }

    /// Prepares a call as upstream's `prepare_call`: unknown tool, argument coercion,
    /// non-object parameters, cast and validation. `Err` holds the error text for the model.
    pub fn prepare(
        &self,
        name: &str,
        arguments_json: &str,
    ) -> Result<(Arc<dyn Tool>, Args), String> {
        let Some(tool) = self
            .tools
            .get(name)
            .cloned()
            .or_else(|| self.mcp.tool(name))
        else {
            let names = self.names();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            return Err(params::unknown_tool_error(name, &names));
        };
        let args = params::prepare_params(name, arguments_json, &tool.parameters(), |args| {
            tool.validate(args)
        })?;
        Ok((tool, args))
    }

    /// Prepares and runs one call; every failure is a tool-level error result. A call to a
    /// tool of an MCP server not reached yet tries to reach it first.
    pub async fn call(&self, ctx: &ToolContext, name: &str, arguments_json: &str) -> ToolOutput {
        use crate::tools::exec_session_tool::{LEGACY_NAME, legacy_write_stdin};
        // A runner of the last release may still send `write_stdin` (one release).
        if name == LEGACY_NAME
            && !self.tools.contains_key(name)
            && self.tools.contains_key(nanobot_proto::exec::EXEC_SESSION)
        {
            let translated = legacy_write_stdin(arguments_json);
            return Box::pin(self.call(ctx, nanobot_proto::exec::EXEC_SESSION, &translated)).await;
        }
        if !self.tools.contains_key(name)
            && let Some(Err(failure)) = self.mcp.reach_for(name).await
        {
            return ToolOutput::error(crate::mcp::failure_text("tool call", &failure));
        }
        match self.prepare(name, arguments_json) {
            Ok((tool, args)) => tool.execute(ctx, args).await,
            Err(message) => ToolOutput::error(message),
        }
    }
}

/// Returns an object schema for builtin tools (unknown parameters refused, as upstream's
/// `tool_parameters_schema`).
pub fn object_schema(properties: Value, required: &[&str]) -> Value {
    serde_json::json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// Reads a string parameter.
pub fn arg_str<'a>(args: &'a Args, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

/// Reads an integer parameter.
pub fn arg_i64(args: &Args, key: &str) -> Option<i64> {
    args.get(key).and_then(Value::as_i64)
}

/// Reads a boolean parameter (`false` when absent).
pub fn arg_bool(args: &Args, key: &str) -> bool {
    args.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// Runs blocking filesystem work off the async runtime; a panic becomes upstream's
/// `Error executing {name}: …` result.
pub async fn blocking<F>(name: &str, work: F) -> ToolOutput
where
    F: FnOnce() -> ToolOutput + Send + 'static,
{
    match tokio::task::spawn_blocking(work).await {
        Ok(output) => output,
        Err(e) => ToolOutput::error(format!("Error executing {name}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(Debug)]
    struct Named(&'static str);

    #[async_trait::async_trait]
    impl Tool for Named {
        fn name(&self) -> &str {
            self.0
        }
        fn description(&self) -> &str {
            ""
        }
        fn parameters(&self) -> Value {
            object_schema(json!({}), &[])
        }
        async fn execute(&self, _: &ToolContext, _: Args) -> ToolOutput {
            ToolOutput::text("")
        }
    }

    #[test]
    fn an_unknown_tool_lists_the_builtins_then_the_mcp_tools() {
        let mut registry = Registry::default();
        for name in [
            "read_file",
            "mcp_git_log",
            "exec",
            "web_search",
            "list_exec_sessions",
            "list_dir",
        ] {
            registry.register(Arc::new(Named(name)));
        }
        let Err(message) = registry.prepare("nope", "{}") else {
            panic!("an unknown tool is refused");
        };
        assert_eq!(
            message,
            "Error: Tool 'nope' not found. Available: exec, list_dir, list_exec_sessions, \
             read_file, web_search, mcp_git_log"
        );
    }

    /// nanobot 0.3.5's registry texts for the same calls of its `cron` tool.
    #[test]
    fn cron_calls_are_refused_with_upstreams_validation_texts() {
        let mut registry = Registry::default();
        let cfg = nanobot_runtime::config::Config::default();
        registry.register(Arc::new(crate::tools::cron::Cron::new(&cfg)));
        let refused = |args: &str| match registry.prepare("cron", args) {
            Ok(_) => panic!("{args} is refused"),
            Err(message) => message,
        };
        assert_eq!(
            refused(r#"{"action": "add"}"#),
            "Error: Invalid parameters for tool 'cron': message is required when action='add'"
        );
        assert_eq!(
            refused(r#"{"action": "remove"}"#),
            "Error: Invalid parameters for tool 'cron': job_id is required when action='remove'"
        );
        assert_eq!(
            refused(r#"{"action": "frob"}"#),
            "Error: Invalid parameters for tool 'cron': action must be one of ['add', 'list', 'remove']"
        );
        assert_eq!(
            refused("{}"),
            "Error: Invalid parameters for tool 'cron': missing required action"
        );
        assert!(
            registry
                .prepare(
                    "cron",
                    r#"{"action": "add", "message": "喝水 💧", "every_seconds": 60}"#
                )
                .is_ok()
        );
    }
}
