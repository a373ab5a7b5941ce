//! Recovery of an interrupted turn (a runner died, or `/stop`): its saved rows and checkpoint
//! are restored into the session's history (upstream's runtime checkpoint and
//! `pending_user_turn`, see `nanobot_core::checkpoint`), so the next turn sees them. A
//! message redelivered after its own turn was interrupted resumes that turn instead.

use serde_json::Value;

use nanobot_core::checkpoint::{self, Restore};
use nanobot_core::session::{Commit, Session, meta};
use nanobot_proto::keys;

use crate::base::error::Result;
use crate::turn::checkpoints;
use crate::turn::parts::Turn;

impl Turn<'_> {
    /// Restores what an interrupted turn left in `session` before this turn; returns whether
    /// the turn resumes (its message is the interrupted turn's own, redelivered).
    pub async fn recover(&self, session: &mut Session) -> Result<bool> {
        let resume = session
            .metadata
            .get(meta::PENDING_TURN_ID)
            .and_then(Value::as_str)
            == Some(self.input.id.as_str());
        let how = if resume {
            Restore::Resume
        } else {
            Restore::Close
        };
        let taken = checkpoints::taken_from(&session.metadata);
        self.restore(session, how).await?;
        if resume && let (Some(f), Some(taken)) = (self.follow_ups, taken) {
            // Follow-ups a previous attempt injected and saved are in the history already.
            f.resume(taken);
        }
        Ok(resume)
    }

    /// Restores an interrupted turn of `session` into its history (next turn, or `/stop`), in
    /// the store and in `session`. Closing a turn marks its message as answered, so a
    /// redelivery of it is dropped.
    pub async fn restore(&self, session: &mut Session, how: Restore) -> Result<usize> {
        let Self {
            deps,
            bot,
            sessions,
            ..
        } = *self;
        if !session.metadata.contains_key(meta::RUNTIME_CHECKPOINT)
            && !session.metadata.contains_key(meta::PENDING_USER_TURN)
        {
            return Ok(0);
        }
        nanobot_runtime::metrics::get().lease_takeover(&bot.spec.id);
        let interrupted = session
            .metadata
            .get(meta::PENDING_TURN_ID)
            .and_then(Value::as_str)
            .map(str::to_string);
        let rows = checkpoint::restore(&session.messages, &mut session.metadata, how);
        sessions
            .commit(
                &session.key,
                &Commit {
                    rows: rows.clone(),
                    metadata: Some(session.metadata.clone()),
                    ..Default::default()
                },
            )
            .await?;
        let restored = rows.len();
        session.messages.extend(rows);
        if how == Restore::Close
            && let Some(id) = interrupted
        {
            deps.mark_seen(&keys::inbound_seen(&bot.spec.id, &session.key, &id))
                .await;
        }
        tracing::info!(session_id = %session.key, rows = restored, resumed = how == Restore::Resume, "restored interrupted turn");
        Ok(restored)
    }
}
