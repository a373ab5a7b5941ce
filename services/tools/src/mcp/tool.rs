//! An MCP tool, resource or prompt exposed as a nanobot tool (`mcp_{server}_{name}`), and
//! the rendering of what the server returns into text (and image blocks).

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ContentBlock, GetPromptRequestParams, GetPromptResult,
    ReadResourceRequestParams, ReadResourceResult, ResourceContents,
};
use serde_json::{Map, Value, json};

use super::server::{Failure, Server};
use super::tool_name;
use crate::registry::{Args, Tool, ToolContext, ToolOutput};

/// What the wrapped capability is.
#[derive(Debug, Clone)]
enum Kind {
    /// A tool, called by its server-side name; `read_only` from its `readOnlyHint`.
    Tool { original: String, read_only: bool },
    /// A resource, read by URI (no parameters).
    Resource { uri: String },
    /// A prompt template, filled with string arguments.
    Prompt { original: String },
}

/// One MCP capability served as a tool.
#[derive(Debug)]
pub struct McpTool {
    server: Arc<Server>,
    name: String,
    description: String,
    parameters: Value,
    kind: Kind,
}

impl McpTool {
    /// Wraps a server tool (`name` already sanitised).
    pub(crate) fn tool(server: Arc<Server>, name: String, def: &rmcp::model::Tool) -> Self {
        let description = def
            .description
            .as_deref()
            .filter(|d| !d.is_empty())
            .unwrap_or(&def.name)
            .to_string();
        let schema = Value::Object(def.input_schema.as_ref().clone());
        Self {
            server,
            name,
            description,
            parameters: normalize_schema(schema),
            kind: Kind::Tool {
                original: def.name.to_string(),
                read_only: def
                    .annotations
                    .as_ref()
                    .and_then(|a| a.read_only_hint)
                    .unwrap_or(false),
            },
        }
    }

    /// Wraps a resource as `mcp_{server}_resource_{name}`.
    pub(crate) fn resource(server: Arc<Server>, def: &rmcp::model::Resource) -> Self {
        let name = tool_name(&format!("mcp_{}_resource_{}", server.name(), def.name));
        let summary = def.description.as_deref().unwrap_or(&def.name);
        Self {
            description: format!("[MCP Resource] {summary}\nURI: {}", def.uri),
            name,
            server,
            parameters: json!({"type": "object", "properties": {}, "required": []}),
            kind: Kind::Resource {
                uri: def.uri.clone(),
            },
        }
    }

    /// Wraps a prompt as `mcp_{server}_prompt_{name}` with string parameters.
    pub(crate) fn prompt(server: Arc<Server>, def: &rmcp::model::Prompt) -> Self {
        let name = tool_name(&format!("mcp_{}_prompt_{}", server.name(), def.name));
        let summary = def.description.as_deref().unwrap_or(&def.name);
        let mut properties = Map::new();
        let mut required = Vec::new();
        for arg in def.arguments.iter().flatten() {
            let mut prop = json!({"type": "string"});
            if let Some(description) = &arg.description {
                prop["description"] = json!(description);
            }
            properties.insert(arg.name.clone(), prop);
            if arg.required == Some(true) {
                required.push(arg.name.clone());
            }
        }
        Self {
            description: format!(
                "[MCP Prompt] {summary}\nReturns a filled prompt template that can be used as \
                 a workflow guide."
            ),
            name,
            server,
            parameters: json!({"type": "object", "properties": properties, "required": required}),
            kind: Kind::Prompt {
                original: def.name.clone(),
            },
        }
    }
}

#[async_trait::async_trait]
impl Tool for McpTool {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        &self.description
    }

    fn parameters(&self) -> Value {
        self.parameters.clone()
    }

    /// Resources and prompts only read; a tool only when its server says `readOnlyHint`.
    fn read_only(&self) -> bool {
        match self.kind {
            Kind::Tool { read_only, .. } => read_only,
            Kind::Resource { .. } | Kind::Prompt { .. } => true,
        }
    }

    async fn execute(&self, _ctx: &ToolContext, args: Args) -> ToolOutput {
        match &self.kind {
            Kind::Tool { original, .. } => self.call_tool(original, args).await,
            Kind::Resource { uri } => self.read_resource(uri).await,
            Kind::Prompt { original } => self.get_prompt(original, args).await,
        }
    }
}

impl McpTool {
    async fn call_tool(&self, original: &str, args: Args) -> ToolOutput {
        let result = self
            .server
            .request(|session| {
                let params =
                    CallToolRequestParams::new(original.to_string()).with_arguments(args.clone());
                async move { session.call_tool(params).await }
            })
            .await;
        match result {
            Ok(result) => render_call(&result),
            Err(failure) => {
                tracing::warn!(tool = %self.name, failure = ?failure, "mcp tool call failed");
                ToolOutput::error(failure_text("tool call", &failure))
            }
        }
    }

    async fn read_resource(&self, uri: &str) -> ToolOutput {
        let result = self
            .server
            .request(|session| {
                let params = ReadResourceRequestParams::new(uri.to_string());
                async move { session.read_resource(params).await }
            })
            .await;
        match result {
            Ok(result) => ToolOutput::text(render_resource(&result)),
            Err(failure) => ToolOutput::text(failure_text("resource read", &failure)),
        }
    }

    async fn get_prompt(&self, original: &str, args: Args) -> ToolOutput {
        let result = self
            .server
            .request(|session| {
                let params =
                    GetPromptRequestParams::new(original.to_string()).with_arguments(args.clone());
                async move { session.get_prompt(params).await }
            })
            .await;
        match result {
            Ok(result) => ToolOutput::text(render_prompt(&result)),
            Err(failure) => ToolOutput::text(failure_text("prompt call", &failure)),
        }
    }
}

/// Returns upstream's text for a failed request (`(MCP tool call timed out after 30s)`).
pub fn failure_text(what: &str, failure: &Failure) -> String {
    match failure {
        Failure::Timeout(timeout) => {
            format!("(MCP {what} timed out after {}s)", timeout.as_secs())
        }
        Failure::AfterRetry(kind) => format!("(MCP {what} failed after retry: {kind})"),
        Failure::Failed(kind, _) => format!("(MCP {what} failed: {kind})"),
        Failure::Unreachable { server, retry_in } => format!(
            "(MCP {what} failed: server '{server}' is unreachable, next reconnect attempt in {}s)",
            retry_in.as_secs_f64().ceil().max(1.0) as u64
        ),
    }
}

/// Renders a tool result: text blocks joined by newlines, images as image blocks, other
/// blocks described; `isError` makes it an error result; nothing → `(no output)`.
fn render_call(result: &CallToolResult) -> ToolOutput {
    let mut parts = Vec::new();
    let mut images = Vec::new();
    for block in &result.content {
        match block {
            ContentBlock::Text(text) => parts.push(text.text.clone()),
            ContentBlock::Image(image) => {
                images.push(image_block(&image.mime_type, &image.data));
                parts.push(format!("(MCP tool returned an image: {})", image.mime_type));
            }
            ContentBlock::Resource(embedded) => match &embedded.resource {
                ResourceContents::BlobResourceContents {
                    mime_type: Some(mime),
                    blob,
                    ..
                } if mime.starts_with("image/") => {
                    images.push(image_block(mime, blob));
                    parts.push(format!("(MCP tool returned an image: {mime})"));
                }
                contents => parts.push(resource_text(contents)),
            },
            ContentBlock::ResourceLink(link) => {
                parts.push(format!("[Resource link: {}] {}", link.name, link.uri));
            }
            ContentBlock::Audio(audio) => parts.push(format!("[Audio: {}]", audio.mime_type)),
            other => parts.push(serde_json::to_string(other).unwrap_or_default()),
        }
    }
    let text = parts.join("\n");
    let content = if text.is_empty() {
        "(no output)".to_string()
    } else {
        text
    };
    let blocks_json = if images.is_empty() {
        String::new()
    } else {
        images.push(json!({"type": "text", "text": content}));
        Value::Array(images).to_string()
    };
    ToolOutput {
        content,
        is_error: result.is_error == Some(true),
        blocks_json,
        file_read: None,
    }
}

fn image_block(mime: &str, data: &str) -> Value {
    json!({"type": "image_url", "image_url": {"url": format!("data:{mime};base64,{data}")}})
}

fn resource_text(contents: &ResourceContents) -> String {
    match contents {
        ResourceContents::TextResourceContents { text, .. } => text.clone(),
        ResourceContents::BlobResourceContents { blob, .. } => {
            format!("[Binary resource: {} bytes]", blob.len())
        }
        other => serde_json::to_string(other).unwrap_or_default(),
    }
}

fn render_resource(result: &ReadResourceResult) -> String {
    let parts: Vec<String> = result.contents.iter().map(resource_text).collect();
    non_empty(parts.join("\n"))
}

fn render_prompt(result: &GetPromptResult) -> String {
    let mut parts = Vec::new();
    for message in &result.messages {
        match &message.content {
            ContentBlock::Text(text) => parts.push(text.text.clone()),
            other => parts.push(serde_json::to_string(other).unwrap_or_default()),
        }
    }
    non_empty(parts.join("\n"))
}

fn non_empty(text: String) -> String {
    if text.is_empty() {
        "(no output)".into()
    } else {
        text
    }
}

/// Normalises a server's input schema for tool definitions (upstream's
/// `_normalize_schema_for_openai`): a missing or non-object schema becomes an empty
/// object schema; `["T", "null"]` and a `oneOf`/`anyOf` of one type plus null become `T`
/// with `nullable: true`; objects always carry `properties` and `required`.
pub fn normalize_schema(schema: Value) -> Value {
    let Value::Object(map) = schema else {
        return json!({"type": "object", "properties": {}});
    };
    normalize_node(map)
}

fn normalize_node(mut node: Map<String, Value>) -> Value {
    if let Some(Value::Array(types)) = node.get("type") {
        let non_null: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
        if non_null.len() == 1 && non_null.len() < types.len() {
            let only = non_null[0].clone();
            node.insert("type".into(), only);
            node.insert("nullable".into(), Value::Bool(true));
        }
    }
    for key in ["oneOf", "anyOf"] {
        let Some(Value::Array(options)) = node.get(key) else {
            continue;
        };
        let null_count = options
            .iter()
            .filter(|o| o.get("type") == Some(&json!("null")))
            .count();
        let others: Vec<&Value> = options
            .iter()
            .filter(|o| o.get("type") != Some(&json!("null")))
            .collect();
        if null_count > 0 && others.len() == 1 && others[0].is_object() {
            let branch = others[0].as_object().cloned().unwrap_or_default();
            node.remove(key);
            node.extend(branch);
            node.insert("nullable".into(), Value::Bool(true));
            break;
        }
    }
    for key in ["properties", "$defs"] {
        if let Some(Value::Object(children)) = node.remove(key) {
            let normalized: Map<String, Value> = children
                .into_iter()
                .map(|(name, child)| match child {
                    Value::Object(child) => (name, normalize_node(child)),
                    other => (name, other),
                })
                .collect();
            node.insert(key.into(), Value::Object(normalized));
        }
    }
    if let Some(Value::Object(items)) = node.remove("items") {
        node.insert("items".into(), normalize_node(items));
    }
    if node.get("type") == Some(&json!("object")) {
        node.entry("properties").or_insert_with(|| json!({}));
        node.entry("required").or_insert_with(|| json!([]));
    }
    Value::Object(node)
}
