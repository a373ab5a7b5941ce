//! Inbound chat messages → turns.

use std::time::Duration;

use async_nats::jetstream::{self, AckKind};
use prost::Message as _;
use tracing::Instrument as _;

use nanobot_proto::{InboundMessage, OutboundKind, keys};
use nanobot_runtime::telemetry;

use super::{Deps, keep_alive, terminate};
use crate::outbox::Outbox;
use crate::turn::{self, TurnInput};

/// Handles one inbound message: decode, de-duplicate, run the turn under the session lock,
/// ack. Failures that may pass (Redis down, broker hiccup) are nak'ed for redelivery.
pub async fn handle(deps: &Deps, msg: jetstream::Message) {
    let inbound = match InboundMessage::decode(msg.payload.clone()) {
        Ok(m) => m,
        Err(e) => return terminate(&msg, &format!("undecodable inbound message: {e}")).await,
    };
    let Some(bot) = super::bot(deps, &inbound.bot).cloned() else {
        return terminate(&msg, &format!("unknown bot {:?}", inbound.bot)).await;
    };
    let session_key = if inbound.session_key.is_empty() {
        format!("{}:{}", inbound.channel, inbound.chat_id)
    } else {
        inbound.session_key.clone()
    };
    let span = tracing::info_span!("turn", session_id = %session_key, channel = %inbound.channel, message_id = %inbound.id);
    telemetry::set_parent_from(&span, msg.headers.as_ref());
    async {
        let marker = keys::inbound_seen(&inbound.bot, &inbound.id);
        if deps.seen(&marker).await {
            tracing::info!("duplicate inbound message, already answered");
            let _ = msg.ack().await;
            return;
        }
        let input = TurnInput {
            id: inbound.id.clone(),
            channel: inbound.channel.clone(),
            chat_id: inbound.chat_id.clone(),
            content: inbound.content.clone(),
            media: inbound.media.clone(),
            session_key: session_key.clone(),
            stream: inbound.stream,
        };
        let (channel, chat_id) = if inbound.reply_channel.is_empty() {
            (inbound.channel.clone(), inbound.chat_id.clone())
        } else {
            (inbound.reply_channel.clone(), inbound.reply_chat_id.clone())
        };
        let outbox = Outbox {
            js: deps.js.clone(),
            bot: inbound.bot.clone(),
            channel,
            chat_id,
            reply_to: inbound.id.clone(),
            session_key: session_key.clone(),
        };
        // Priority commands run outside the session lock (upstream's router tier).
        match turn::priority_command(deps, &bot, &input).await {
            Ok(Some(reply)) => {
                if let Err(e) = outbox.send(OutboundKind::Final, &reply, 0).await {
                    tracing::warn!(error = %e, "failed to publish command reply");
                }
                deps.mark_seen(&marker).await;
                let _ = msg.ack().await;
                return;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("failed to run priority command: {e:#}"),
        }
        let lock = deps.locks.get(&session_key);
        let guard = lock.lock().await;
        let alive = keep_alive(&msg);
        let registration = deps.active.register(&inbound.bot, &session_key);
        let outcome = tokio::select! {
            r = turn::run(deps, &bot, &input, &outbox) => Some(r),
            _ = registration.token.cancelled() => None,
        };
        drop(registration);
        alive.abort();
        let outcome = match outcome {
            Some(o) => o,
            None => {
                tracing::info!("turn stopped by /stop");
                if let Err(e) = turn::recover(
                    deps,
                    &bot,
                    &session_key,
                    nanobot_core::checkpoint::Restore::Close,
                )
                .await
                {
                    tracing::warn!("failed to restore stopped turn: {e:#}");
                }
                Ok(())
            }
        };
        drop(guard);
        deps.locks.release(&session_key, lock);
        match outcome {
            Ok(()) => {
                deps.mark_seen(&marker).await;
                if let Err(e) = msg.ack().await {
                    tracing::warn!(error = %e, "failed to ack inbound message");
                }
            }
            Err(e) => {
                tracing::error!("failed to run turn: {e:#}");
                let _ = outbox
                    .send(OutboundKind::Error, "Sorry, I encountered an error.", 0)
                    .await;
                let _ = msg
                    .ack_with(AckKind::Nak(Some(Duration::from_secs(2))))
                    .await;
            }
        }
    }
    .instrument(span)
    .await;
}
