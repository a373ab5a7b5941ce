//! The end of a turn: commit, then publish. One fenced write saves the turn (rows, metadata,
//! the mailbox cursor, "seen" markers, the reply kept in the session's outbox); only then is
//! the reply published and the outbox cleared, so a runner dying in between leaves the reply
//! for the next lease holder ([`crate::base::outbox::flush`]).

use nanobot_core::session::Commit;
use nanobot_proto::OutboundKind;

use crate::base::error::Result;
use crate::base::outbox;
use crate::turn::follow_ups::FollowUps;
use crate::turn::parts::{Reply, Turn};

impl Turn<'_> {
    /// Ends a turn: one fenced commit of its rows, metadata, the mailbox cursor past the message
    /// and the follow-ups it took, their "seen" markers and the reply (kept in the session's
    /// outbox); then the reply is published and the outbox cleared.
    pub async fn commit(&self, reply: Reply) -> Result<()> {
        let Self {
            deps,
            input,
            outbox,
            ..
        } = *self;
        let taken = self.follow_ups.map(FollowUps::taken).unwrap_or_default();
        let mut answers = vec![input.id.clone()];
        if input.continuation {
            // A goal continuation's reply is the reply its user's message waits for.
            answers.push(crate::turn::goal::root_id(&input.id).to_string());
        }
        answers.extend(taken.ids.iter().cloned());
        let message = reply.text.as_ref().map(|(kind, text)| {
            let mut m = outbox.message(*kind, text, 0);
            m.answers = answers.clone();
            m.usage = reply.usage;
            m.model = reply.model.clone();
            m
        });
        let encoded = message.as_ref().map(outbox::encode);
        let commit = Commit {
            rows: reply.rows,
            metadata: reply.metadata,
            cursor: self.seq.map(|s| s.max(taken.last_seq)),
            outbox: encoded.clone(),
            seen: answers,
        };
        self.sessions.commit(&input.session_key, &commit).await?;
        if reply.streamed > 0 {
            outbox
                .send(OutboundKind::StreamEnd, "", reply.streamed + 1)
                .await?;
        }
        if let (Some(message), Some(encoded)) = (message, encoded) {
            outbox::publish(&deps.js, &message).await?;
            self.sessions
                .clear_outbox(&input.session_key, &encoded)
                .await?;
        }
        Ok(())
    }
}
