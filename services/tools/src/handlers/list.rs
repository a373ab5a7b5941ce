//! `ToolListRequest`: answers with the tools this executor serves.

use async_nats::Message;
use prost::Message as _;

use nanobot_proto::{ToolListRequest, ToolListResponse};
use nanobot_runtime::bus;

use super::{Deps, ServiceError, bot_id, bot_spec};

/// Decodes, answers and logs one tool-list request.
pub async fn handle(deps: &Deps, msg: Message) {
    let subject = msg.subject.to_string();
    match list(deps, &subject, &msg.payload) {
        Ok(response) => bus::reply(&deps.client, msg.reply, &response).await,
        Err(e) => {
            tracing::warn!(%subject, error = %e, "refused tool list request");
            bus::reply_error(&deps.client, msg.reply, e.code(), &e.to_string()).await;
        }
    }
}

fn list(deps: &Deps, subject: &str, payload: &[u8]) -> Result<ToolListResponse, ServiceError> {
    let request = ToolListRequest::decode(payload).map_err(|e| ServiceError::BadRequest {
        subject: subject.to_string(),
        reason: format!("cannot decode ToolListRequest: {e}"),
    })?;
    bot_spec(&deps.bots.now(), bot_id(&request.bot, subject))?;
    // MCP servers down so far are retried now; their tools are listed once they answer.
    deps.registry.pending_mcp().reach_in_background();
    Ok(ToolListResponse {
        tools: deps.registry.specs(),
        executor: deps.health.instance.clone(),
    })
}
