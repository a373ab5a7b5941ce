//! The middle layer: who runs a message, when, and how often. Every runner holding an
//! unanswered message of a session waits for the session's lease ([`acquire`]); whoever takes it
//! drains the session's mailbox in stream order ([`drain`]), running each message's turn as a
//! counted attempt ([`attempts`]); an automation turn (cron fire, heartbeat) runs the same way,
//! keyed by its id ([`once`]).
//!
//! May import: `crate::turn` (what one attempt does) and `crate::base`. Imported by
//! `crate::handlers` only.
//!
//! # Exactly once
//! A message's turn is committed once, and its reply published until it is out (same delivery
//! id each time, so JetStream drops copies). One runner at a time holds a session's lease, and
//! every session write carries its fencing token. A turn ends with one fenced commit (rows,
//! cursor past the message or its "seen" marker, the reply kept in the session's outbox); only
//! then is the reply published and the outbox cleared; only then is the message acknowledged.
//! - A runner dies mid-turn: nothing is acked; once its lease expires a waiter (or JetStream's
//!   redelivery) takes the session and the turn resumes from its checkpoint.
//! - It dies between commit and publish: the next holder publishes the outbox first.
//! - It dies after publishing, before the ack: the redelivered message finds the cursor (or
//!   marker) past it and is acked without a turn; a re-published reply is a duplicate.
//! - Its lease is lost mid-turn (pause, partition): its writes are refused ([`Fenced`]) and the
//!   attempt is taken back, not counted against the message.
//! - A message that fails, or kills its runner, every time: after `MAX_ATTEMPTS` starts it is
//!   answered with upstream's error reply, so it cannot block its session.
//!
//! [`Fenced`]: crate::base::error::Error::Fenced

pub mod acquire;
pub mod attempts;
pub mod drain;
pub mod once;
