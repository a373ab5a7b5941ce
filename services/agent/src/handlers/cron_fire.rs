//! Cron fires → turns in session `cron:<job_id>`, delivered to the job's channel when asked.

use async_nats::jetstream;
use prost::Message as _;
use tracing::Instrument as _;

use nanobot_proto::{CronFire, keys};
use nanobot_runtime::telemetry;

use super::{Deps, keep_alive, terminate};
use crate::outbox::Outbox;
use crate::turn::{self, TurnInput};

/// Handles one cron fire.
pub async fn handle(deps: &Deps, msg: jetstream::Message) {
    let fire = match CronFire::decode(msg.payload.clone()) {
        Ok(f) => f,
        Err(e) => return terminate(&msg, &format!("undecodable cron fire: {e}")).await,
    };
    let Some(bot) = super::bot(deps, &fire.bot).cloned() else {
        return terminate(&msg, &format!("unknown bot {:?}", fire.bot)).await;
    };
    let session_key = format!("cron:{}", fire.job_id);
    let span = tracing::info_span!("cron_turn", session_id = %session_key, job_id = %fire.job_id);
    telemetry::set_parent_from(&span, msg.headers.as_ref());
    async {
        let marker = keys::inbound_seen(&fire.bot, &fire.id);
        if deps.seen(&marker).await {
            let _ = msg.ack().await;
            return;
        }
        let lock = deps.locks.get(&session_key);
        let guard = lock.lock().await;
        let alive = keep_alive(&msg);
        let (channel, chat_id) = if fire.deliver && !fire.channel.is_empty() {
            (fire.channel.clone(), fire.to.clone())
        } else {
            ("cron".to_string(), fire.job_id.clone())
        };
        let input = TurnInput {
            id: fire.id.clone(),
            channel: "cron".into(),
            chat_id: fire.job_id.clone(),
            content: fire.message.clone(),
            media: Vec::new(),
            session_key: session_key.clone(),
            stream: false,
        };
        let outbox = Outbox {
            js: deps.js.clone(),
            bot: fire.bot.clone(),
            channel,
            chat_id,
            reply_to: fire.id.clone(),
            session_key: session_key.clone(),
        };
        let registration = deps.active.register(&fire.bot, &session_key);
        let outcome = tokio::select! {
            r = turn::run(deps, &bot, &input, &outbox) => r,
            _ = registration.token.cancelled() => turn::recover(deps, &bot, &session_key, nanobot_core::checkpoint::Restore::Close).await.map(|_| ()),
        };
        drop(registration);
        alive.abort();
        drop(guard);
        deps.locks.release(&session_key, lock);
        match outcome {
            Ok(()) => {
                deps.mark_seen(&marker).await;
                let _ = msg.ack().await;
            }
            Err(e) => {
                tracing::error!("failed to run cron turn: {e:#}");
                let _ = msg
                    .ack_with(async_nats::jetstream::AckKind::Nak(Some(
                        std::time::Duration::from_secs(5),
                    )))
                    .await;
            }
        }
    }
    .instrument(span)
    .await;
}
