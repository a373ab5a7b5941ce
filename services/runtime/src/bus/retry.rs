//! Publishing (and reading) through a NATS node loss. While a cluster elects a new leader for a
//! stream (its leader's node died) or the client reconnects to another node, a publish fails
//! with "no stream found" (no responders), times out, or loses its connection, for a few
//! seconds (about 5–8 s for a stream leader's election in the chaos tests).
//! [`publish_acked`] retries those errors with jittered exponential backoff (100 ms, doubling
//! to 1 s) for at most [`RETRY_FOR`]; each attempt carries the same `Nats-Msg-Id`, so the
//! stream stores the message once however many attempts reached it (within its duplicate
//! window, two minutes for the fleet's streams). Other errors (a message over the size limit,
//! a stream refusing it) are answered at once.
//!
//! [`retry_transient`] is the same loop for other requests that are safe to repeat (a runner's
//! direct get of its session's mailbox).
//!
//! Killed mid-way (SIGKILL), nothing is half done: the message is stored once or not at all,
//! and the caller, which had no ack, did not answer its client as done.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream::{self, context::PublishErrorKind};
use backon::{ExponentialBuilder, Retryable as _};
use bytes::Bytes;

/// Longest pull of the gateway's ordered consumers (`max_expires`): their idle heartbeat is
/// half of it, and after two missed heartbeats the client re-creates the consumer, so one lost
/// with its node is replaced within about 4 s (with the defaults, a 30 s pull and a 15 s
/// heartbeat, replies stalled for 40–85 s in the chaos tests).
pub const ORDERED_MAX_EXPIRES: Duration = Duration::from_secs(4);

/// How long a publish is retried through transient errors before its error is answered.
pub const RETRY_FOR: Duration = Duration::from_secs(20);
/// How long one attempt waits for the stream's ack (a message sent to a node that died is
/// never acknowledged; the retry goes to the new leader).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);

/// Whether a failed publish may succeed when repeated: no stream answered (a leader is being
/// elected), no ack in time, the connection broke, too many acks outstanding, or JetStream
/// said it is temporarily unavailable (503).
pub fn is_transient(e: &jetstream::context::PublishError) -> bool {
    match e.kind() {
        PublishErrorKind::StreamNotFound
        | PublishErrorKind::TimedOut
        | PublishErrorKind::BrokenPipe
        | PublishErrorKind::MaxAckPending => true,
        PublishErrorKind::Other => std::error::Error::source(e)
            .and_then(|s| s.downcast_ref::<jetstream::Error>())
            .is_some_and(|api| api.code() == 503),
        _ => false,
    }
}

/// One publish and its ack, bounded by [`ATTEMPT_TIMEOUT`].
async fn attempt(
    js: &jetstream::Context,
    subject: &str,
    headers: &HeaderMap,
    payload: &Bytes,
) -> Result<(), jetstream::context::PublishError> {
    let send = async {
        js.publish_with_headers(subject.to_string(), headers.clone(), payload.clone())
            .await?
            .await
    };
    match tokio::time::timeout(ATTEMPT_TIMEOUT, send).await {
        Ok(acked) => acked.map(drop),
        Err(_) => Err(PublishErrorKind::TimedOut.into()),
    }
}

/// Publishes `payload` with `headers` (which hold the `Nats-Msg-Id`) to JetStream and waits for
/// the ack, retrying transient errors for at most `retry_for`. Returns the last error.
pub async fn publish_acked(
    js: &jetstream::Context,
    subject: &str,
    headers: HeaderMap,
    payload: Bytes,
    retry_for: Duration,
) -> Result<(), jetstream::context::PublishError> {
    let op = || attempt(js, subject, &headers, &payload);
    retry_transient(subject, retry_for, op, is_transient).await
}

/// Runs `op` until it succeeds, fails with an error `transient` refuses, or `retry_for` has
/// passed (then its last error), with jittered exponential backoff (100 ms doubling to 1 s)
/// between attempts. Bound each attempt in `op`: the total is `retry_for` plus one attempt.
/// `what` names the operation in the log (a retry is logged once, and how it ended).
pub async fn retry_transient<T, E, F, Fut>(
    what: &str,
    retry_for: Duration,
    op: F,
    transient: impl Fn(&E) -> bool,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let deadline = tokio::time::Instant::now() + retry_for;
    let backoff = ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(100))
        .with_max_delay(Duration::from_secs(1))
        .with_jitter()
        .without_max_times();
    let mut retries = 0u32;
    let result = op
        .retry(backoff)
        .sleep(tokio::time::sleep)
        .when(|e| transient(e) && tokio::time::Instant::now() < deadline)
        .notify(|e, after| {
            retries += 1;
            if retries == 1 {
                tracing::warn!(error = %e, what, retry_in = ?after, "jetstream operation failed; retrying");
            }
        })
        .await;
    if retries > 0 {
        match &result {
            Ok(_) => tracing::info!(what, retries, "jetstream operation succeeded after retries"),
            Err(e) => tracing::warn!(error = %e, what, retries, "jetstream operation gave up"),
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_elections_and_lost_connections_are_retried_but_refusals_are_not() {
        let e = |k| jetstream::context::PublishError::new(k);
        assert!(is_transient(&e(PublishErrorKind::StreamNotFound)));
        assert!(is_transient(&e(PublishErrorKind::TimedOut)));
        assert!(is_transient(&e(PublishErrorKind::BrokenPipe)));
        assert!(!is_transient(&e(PublishErrorKind::MaxPayloadExceeded)));
        assert!(!is_transient(&e(PublishErrorKind::WrongLastMessageId)));
        assert!(!is_transient(&e(PublishErrorKind::Other)));
    }
}
