//! `ToolCallRequest`: runs one tool for one bot and answers with a `ToolCallResult`.
//! Tool-level failures are results with `is_error`; only requests the executor cannot serve
//! (undecodable, unknown bot, deadline passed) become NATS error replies.

use std::time::{SystemTime, UNIX_EPOCH};

use async_nats::Message;
use prost::Message as _;
use tracing::instrument;

use nanobot_proto::{ToolCallRequest, ToolCallResult};
use nanobot_runtime::bus;

use super::{Deps, ServiceError, bot_id, bot_spec};
use crate::registry::ToolContext;
use crate::sandbox::Sandbox;

/// Decodes, runs and answers one tool call.
pub async fn handle(deps: &Deps, msg: Message) {
    let subject = msg.subject.to_string();
    let request = match decode(&subject, &msg.payload) {
        Ok(request) => request,
        Err(e) => {
            tracing::warn!(%subject, error = %e, "undecodable tool call");
            bus::reply_error(&deps.client, msg.reply, e.code(), &e.to_string()).await;
            return;
        }
    };
    match call(deps, &subject, request).await {
        Ok(result) => bus::reply(&deps.client, msg.reply, &result).await,
        Err(e) => {
            tracing::warn!(%subject, error = %e, "refused tool call");
            bus::reply_error(&deps.client, msg.reply, e.code(), &e.to_string()).await;
        }
    }
}

fn decode(subject: &str, payload: &[u8]) -> Result<ToolCallRequest, ServiceError> {
    let bad = |reason: String| ServiceError::BadRequest {
        subject: subject.to_string(),
        reason,
    };
    let request = ToolCallRequest::decode(payload)
        .map_err(|e| bad(format!("cannot decode ToolCallRequest: {e}")))?;
    if request.name.is_empty() {
        return Err(bad("tool call without a tool name".into()));
    }
    Ok(request)
}

/// Runs the call; the span carries the tool, session and call ids.
#[instrument(
    name = "tool_call",
    skip_all,
    fields(tool = %request.name, session_id = %request.session_key, call_id = %request.call_id)
)]
async fn call(
    deps: &Deps,
    subject: &str,
    request: ToolCallRequest,
) -> Result<ToolCallResult, ServiceError> {
    let spec = bot_spec(&deps.cfg, bot_id(&request.bot, subject))?;
    if request.deadline_ms > 0 {
        let late_ms = now_ms() - request.deadline_ms;
        if late_ms > 0 {
            return Err(ServiceError::DeadlinePassed { late_ms });
        }
    }
    if let Err(e) = tokio::fs::create_dir_all(&spec.workspace).await {
        tracing::warn!(workspace = %spec.workspace.display(), error = %e, "cannot create workspace");
    }
    let ctx = ToolContext {
        sandbox: Sandbox::new(&spec.workspace, deps.cfg.tools.restrict_to_workspace),
        session_key: request.session_key.clone(),
    };
    let started = std::time::Instant::now();
    let output = deps
        .registry
        .call(&ctx, &request.name, &request.arguments_json)
        .await;
    tracing::info!(
        is_error = output.is_error,
        chars = output.content.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "tool call finished"
    );
    let mut result = ToolCallResult {
        call_id: request.call_id,
        content: output.content,
        is_error: output.is_error,
        blocks_json: output.blocks_json,
        executor: deps.health.instance.clone(),
    };
    fit_payload(
        &mut result,
        &request.name,
        deps.client.server_info().max_payload,
    );
    Ok(result)
}

/// Replaces a result too large for one NATS message with an error the model can act on.
fn fit_payload(result: &mut ToolCallResult, tool: &str, max_payload: usize) {
    let size = result.encoded_len();
    // Headers (trace context) need room too.
    if max_payload == 0 || size + 4096 <= max_payload {
        return;
    }
    result.content = format!(
        "Error executing {tool}: result of {size} bytes exceeds the bus message limit of \
         {max_payload} bytes"
    );
    result.is_error = true;
    result.blocks_json.clear();
}

fn now_ms() -> i64 {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn garbage_and_nameless_requests_are_bad_requests() {
        let garbage = decode(
            &nanobot_proto::subjects::tool_call("b", "x"),
            b"\xff\xff\xff\xff",
        )
        .unwrap_err();
        assert!(
            matches!(garbage, ServiceError::BadRequest { .. }),
            "{garbage}"
        );
        assert!(
            garbage
                .to_string()
                .contains("cannot decode ToolCallRequest")
        );
        let nameless = decode(&nanobot_proto::subjects::tool_call("b", "x"), &[]).unwrap_err();
        assert!(nameless.to_string().contains("without a tool name"));
    }

    #[test]
    fn oversized_results_become_errors() {
        let mut result = ToolCallResult {
            content: "x".repeat(10_000),
            ..Default::default()
        };
        fit_payload(&mut result, "read_file", 8_000);
        assert!(result.is_error);
        assert!(
            result
                .content
                .starts_with("Error executing read_file: result of 10"),
            "{}",
            result.content
        );
        let mut small = ToolCallResult {
            content: "ok".into(),
            ..Default::default()
        };
        fit_payload(&mut small, "read_file", 1_048_576);
        assert_eq!(small.content, "ok");
    }
}
