//! Inbound chat messages → the session's turns. The receiver of a message answers priority
//! commands at once; otherwise it waits until its session's cursor passes the message, taking
//! the session's lease and draining its mailbox whenever the lease is free. The message is
//! acknowledged only then, so a runner dying at any point loses nothing.

use async_nats::jetstream;
use tracing::Instrument as _;

use nanobot_proto::{OutboundKind, keys};
use nanobot_runtime::telemetry;

use super::{keep_alive, terminate};
use crate::base::command::Kind;
use crate::base::deps::Deps;
use crate::base::input::Incoming;
use crate::base::outbox::Outbox;
use crate::session::acquire::{self, Until};
use crate::session::drain;
use crate::turn::commands;

/// Handles one inbound message.
pub async fn handle(deps: &Deps, msg: jetstream::Message) {
    let incoming = match Incoming::decode(msg.payload.clone()) {
        Ok(m) => m,
        Err(e) => return terminate(&msg, &format!("undecodable inbound message: {e}")).await,
    };
    let inbound = &incoming.message;
    let Some(bot) = deps.bot(&inbound.bot) else {
        if crate::handlers::registry::is_removed(deps, &inbound.bot) {
            crate::handlers::registry::refuse(deps, inbound).await;
        }
        return terminate(&msg, &format!("unknown bot {:?}", inbound.bot)).await;
    };
    let subject = inbound.subject();
    if msg.subject.as_str() != subject {
        let why = format!(
            "published on {} instead of its session's subject {subject}",
            msg.subject
        );
        return terminate(&msg, &why).await;
    }
    let seq = match msg.info() {
        Ok(info) => info.stream_sequence,
        Err(e) => return terminate(&msg, &format!("no stream sequence: {e}")).await,
    };
    let session_key = inbound.effective_session_key();
    // The receipt: priority commands, waiting for the session and draining it. Each drained
    // message's turn is a `turn` span of that message's own trace (`session::drain`).
    let span = tracing::info_span!("inbound", session_id = %session_key, channel = %inbound.origin().0, message_id = %inbound.id);
    telemetry::set_parent_from(&span, msg.headers.as_ref());
    async {
        // Priority commands bypass the session (upstream's router tier); drainers skip them.
        if let Kind::Priority(cmd) = &incoming.kind {
            match commands::priority_command(deps, &bot, cmd, &session_key).await {
                Ok(reply) => {
                    let outbox = Outbox::for_message(&deps.js, inbound);
                    if let Err(e) = outbox.send(OutboundKind::Final, &reply, 0).await {
                        tracing::warn!(error = %e, "failed to publish command reply");
                    }
                    deps.mark_seen(&keys::inbound_seen(&inbound.bot, &session_key, &inbound.id))
                        .await;
                    let _ = msg.ack().await;
                    return;
                }
                Err(e) => tracing::warn!("failed to run priority command: {e:#}"),
            }
        }
        let outcome = keep_alive(
            &msg,
            deps.ack_wait(),
            answer(deps, &bot, &session_key, &subject, seq),
        )
        .await;
        super::settle(deps, &msg, outcome).await;
    }
    .instrument(span)
    .await;
}

/// Returns once the session answered the message at `seq`, draining it meanwhile whenever
/// its lease is free.
async fn answer(
    deps: &Deps,
    bot: &crate::base::bots::Bot,
    session_key: &str,
    subject: &str,
    seq: u64,
) -> anyhow::Result<()> {
    while let Some(held) = acquire::acquire(deps, bot, session_key, Until::Cursor(seq)).await? {
        let drained =
            drain::drain(deps, bot, session_key, subject, &held.lease, held.progress).await;
        held.lease.release().await;
        drop(held.permit);
        let (entries, cursor) = drained?;
        if cursor >= seq {
            // Answered by this drain, its reply published.
            return Ok(());
        }
        if entries == 0
            && !deps.cancel.is_cancelled()
            && bot.sessions.cursor(session_key).await? < seq
        {
            anyhow::bail!("message {seq} is missing from its session's mailbox");
        }
    }
    Ok(())
}
