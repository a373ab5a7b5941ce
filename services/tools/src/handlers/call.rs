//! `ToolCallRequest`: runs one tool for one bot and answers with a `ToolCallResult`.
//! Tool-level failures are results with `is_error`; only requests the executor cannot serve
//! (undecodable, unknown bot, deadline passed) become NATS error replies.
//!
//! When the caller asks for heartbeats (`heartbeat_ms > 0`), a call still running after half
//! a heartbeat is answered ACCEPTED, then RUNNING every `heartbeat_ms` from a task of its own,
//! then the FINAL result, all on the request's reply inbox: a caller that hears nothing for a
//! few intervals knows this executor died mid-call. A call done sooner (most are) is answered
//! FINAL alone, one message instead of two.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::Message;
use prost::Message as _;
use tracing::instrument;

use nanobot_proto::{CallState, ToolCallRequest, ToolCallResult};
use nanobot_runtime::bus;

use super::{Deps, ServiceError, bot_id, bot_spec};
use crate::registry::{Origin, ToolContext};
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
    let heartbeat = Heartbeat::start(deps, msg.reply.clone(), &request);
    let outcome = call(deps, &subject, request).await;
    drop(heartbeat);
    match outcome {
        Ok(result) => bus::reply(&deps.client, msg.reply, &result).await,
        Err(e) => {
            tracing::warn!(%subject, error = %e, "refused tool call");
            bus::reply_error(&deps.client, msg.reply, e.code(), &e.to_string()).await;
        }
    }
}

/// Shortest and longest heartbeat interval an executor honours.
const HEARTBEAT_RANGE: (Duration, Duration) = (Duration::from_millis(50), Duration::from_secs(60));

/// Sends ACCEPTED once the call has run for half an interval, then RUNNING every interval,
/// until dropped (when the call is done): a call done sooner is answered FINAL alone.
struct Heartbeat(tokio::task::JoinHandle<()>);

impl Heartbeat {
    /// Starts beating when the caller asked for it (`heartbeat_ms > 0` and a reply inbox).
    fn start(
        deps: &Deps,
        reply: Option<async_nats::Subject>,
        request: &ToolCallRequest,
    ) -> Option<Self> {
        let inbox = reply?;
        if request.heartbeat_ms == 0 {
            return None;
        }
        let every = Duration::from_millis(u64::from(request.heartbeat_ms))
            .clamp(HEARTBEAT_RANGE.0, HEARTBEAT_RANGE.1);
        let beat = |state: CallState| ToolCallResult {
            call_id: request.call_id.clone(),
            executor: deps.health.instance.clone(),
            state: state as i32,
            ..Default::default()
        };
        let (accepted, running) = (beat(CallState::Accepted), beat(CallState::Running));
        let client = deps.client.clone();
        // A task of its own, so a tool that hogs its worker thread still lets beats out.
        let task = tokio::spawn(async move {
            tokio::time::sleep(every / 2).await;
            bus::reply(&client, Some(inbox.clone()), &accepted).await;
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                bus::reply(&client, Some(inbox.clone()), &running).await;
            }
        });
        Some(Self(task))
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
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
    fields(
        tool = %request.name,
        session_id = %request.session_key,
        call_id = %request.call_id,
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %request.name,
        gen_ai.tool.call.id = %request.call_id,
    )
)]
async fn call(
    deps: &Deps,
    subject: &str,
    request: ToolCallRequest,
) -> Result<ToolCallResult, ServiceError> {
    let spec = bot_spec(&deps.bots.now(), bot_id(&request.bot, subject))?;
    if request.deadline_ms > 0 {
        let late_ms = now_ms() - request.deadline_ms;
        if late_ms > 0 {
            return Err(ServiceError::DeadlinePassed { late_ms });
        }
    }
    let ctx = ToolContext {
        sandbox: Sandbox::new(&spec.workspace, deps.cfg.tools.restrict_to_workspace),
        session_key: request.session_key.clone(),
        origin: Origin {
            bot: spec.id.clone(),
            channel: request.channel.clone(),
            chat_id: request.chat_id.clone(),
            in_cron: request.in_cron,
        },
        file_reads: request.file_reads,
    };
    tracing::info!("tool call started");
    let started = std::time::Instant::now();
    // The call's metrics (and any it makes) count under its bot.
    let scope = nanobot_runtime::metrics::Scope::new(&spec.id, &request.channel);
    let output = nanobot_runtime::metrics::scoped(
        scope.clone(),
        deps.registry
            .call(&ctx, &request.name, &request.arguments_json),
    )
    .await;
    tracing::info!(
        is_error = output.is_error,
        chars = output.content.len(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "tool call finished"
    );
    let served = deps.registry.serves(&request.name);
    let counted = async {
        nanobot_runtime::metrics::get().tool_call(
            nanobot_runtime::metrics::ToolName::new(&request.name, served),
            "executor",
            started.elapsed(),
            output.is_error,
        );
    };
    nanobot_runtime::metrics::scoped(scope, counted).await;
    let mut result = ToolCallResult {
        call_id: request.call_id,
        content: output.content,
        is_error: output.is_error,
        blocks_json: output.blocks_json,
        executor: deps.health.instance.clone(),
        state: CallState::Final as i32,
        file_read: output.file_read,
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
