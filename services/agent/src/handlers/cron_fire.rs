//! Cron fires → turns in session `cron:<job_id>`, delivered to the job's channel when asked.
//! A fire runs under its session's lease like a chat turn, so it never overlaps another turn
//! of that session on any runner.

use async_nats::jetstream;
use prost::Message as _;
use tracing::Instrument as _;

use nanobot_proto::{CronFire, keys};
use nanobot_runtime::telemetry;

use super::session::{self, Until};
use super::{Deps, keep_alive, terminate};
use crate::outbox::{self, Outbox};
use crate::turn::{TurnCtx, TurnInput};

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
        let marker = keys::inbound_seen(&fire.bot, &session_key, &fire.id);
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
        let alive = keep_alive(&msg, deps.ack_wait());
        let outcome = async {
            while let Some((lease, permit)) =
                session::acquire(deps, &bot, &session_key, Until::Seen(&marker)).await?
            {
                let sessions = bot.sessions.fenced(lease.fence());
                let ran = async {
                    outbox::flush(&deps.js, &sessions, &session_key).await?;
                    let ctx = TurnCtx {
                        sessions: &sessions,
                        seq: None,
                        follow_ups: None,
                    };
                    session::guarded(deps, &bot, ctx, &lease, &input, &outbox).await
                }
                .await;
                lease.release().await;
                drop(permit);
                ran?;
            }
            anyhow::Ok(())
        }
        .await;
        alive.abort();
        session::settle(deps, &msg, outcome).await;
    }
    .instrument(span)
    .await;
}
