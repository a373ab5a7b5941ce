//! Events API (`mode: "http"`): Slack POSTs events to `webhookPath` on the gateway's listener
//! (`webhookListenHost:webhookListenPort`, behind whatever public URL the app's Request URL
//! names; every replica listens). Each request is verified before anything else: the
//! `X-Slack-Signature` must be `v0=` + hex HMAC-SHA256 of `v0:{timestamp}:{body}` keyed with the
//! signing secret (compared in constant time) and `X-Slack-Request-Timestamp` within 5 minutes;
//! anything else is refused with 401. `url_verification` gets its challenge back; an
//! `event_callback` is answered 200 once handled (else 500, and Slack retries with
//! `X-Slack-Retry-Num`; a retry of a handled event is answered 200 without a second message).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hmac::{Hmac, Mac as _};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio_util::sync::CancellationToken;

use super::{SlackChannel, receive};
use crate::channels::Inbound;
use crate::channels::poison::{self, Failure};

/// Oldest request timestamp accepted (replay protection), as Slack recommends.
const MAX_SKEW_SECS: i64 = 5 * 60;
/// How long a request may take to arrive.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone)]
struct Route {
    ch: Arc<SlackChannel>,
    inbound: Inbound,
}

/// Listens for the Events API of `ch` until `cancel`.
pub(super) async fn listen(
    ch: Arc<SlackChannel>,
    inbound: Inbound,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let addr = format!(
        "{}:{}",
        ch.cfg.webhook_listen_host, ch.cfg.webhook_listen_port
    );
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("bind the slack events listener {addr}"))?;
    tracing::info!(bot = %ch.bot_id, addr = %listener.local_addr()?, path = %ch.cfg.webhook_path, "slack events listener ready");
    let path = ch.cfg.webhook_path.clone();
    let router = Router::new()
        .route(&path, axum::routing::post(receive_event))
        .with_state(Route { ch, inbound });
    crate::api::serve(listener, router, READ_TIMEOUT, cancel).await;
    Ok(())
}

async fn receive_event(State(route): State<Route>, headers: HeaderMap, body: Bytes) -> Response {
    let ch = &route.ch;
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    if let Err(why) = verify(
        &ch.cfg.signing_secret,
        header("x-slack-request-timestamp"),
        header("x-slack-signature"),
        &body,
        now,
    ) {
        tracing::warn!(bot = %ch.bot_id, reason = why, "slack events request refused");
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let payload: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            tracing::warn!(bot = %ch.bot_id, error = %e, "undecodable slack event dropped");
            return StatusCode::BAD_REQUEST.into_response();
        }
    };
    match payload["type"].as_str().unwrap_or_default() {
        "url_verification" => {
            axum::Json(json!({"challenge": payload["challenge"]})).into_response()
        }
        "event_callback" => {
            let event_id = payload["event_id"].as_str().unwrap_or_default();
            let retry = header("x-slack-retry-num");
            if !retry.is_empty() {
                tracing::info!(bot = %ch.bot_id, event_id, retry, reason = header("x-slack-retry-reason"), "slack event retried");
            }
            let handled = receive::handle(ch, &route.inbound, event_id, &payload["event"]);
            match poison::guard(handled).await {
                Ok(()) => StatusCode::OK.into_response(),
                Err(Failure::Poison(why)) => {
                    tracing::error!(bot = %ch.bot_id, event_id, error = %why, "slack event cannot be handled; acknowledged and skipped");
                    StatusCode::OK.into_response()
                }
                Err(Failure::Retry(e)) => {
                    tracing::warn!(bot = %ch.bot_id, event_id, error = format!("{e:#}"), "slack event not handled; Slack will deliver it again");
                    StatusCode::INTERNAL_SERVER_ERROR.into_response()
                }
            }
        }
        _ => StatusCode::OK.into_response(),
    }
}

/// Checks a request's signature and age; `Err` says why it is refused.
fn verify(
    secret: &str,
    timestamp: &str,
    signature: &str,
    body: &[u8],
    now: i64,
) -> Result<(), &'static str> {
    let ts: i64 = timestamp.parse().map_err(|_| "missing timestamp")?;
    if (now - ts).abs() > MAX_SKEW_SECS {
        return Err("timestamp older than 5 minutes");
    }
    let given = signature
        .strip_prefix("v0=")
        .and_then(|h| hex::decode(h).ok())
        .ok_or("missing signature")?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).map_err(|_| "no secret")?;
    mac.update(format!("v0:{timestamp}:").as_bytes());
    mac.update(body);
    mac.verify_slice(&given).map_err(|_| "bad signature")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sign(secret: &str, ts: &str, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).unwrap();
        mac.update(format!("v0:{ts}:").as_bytes());
        mac.update(body);
        format!("v0={}", hex::encode(mac.finalize().into_bytes()))
    }

    #[test]
    fn only_fresh_requests_signed_with_the_secret_pass() {
        let body = br#"{"type":"event_callback"}"#;
        let now = 1_700_000_000;
        let ts = now.to_string();
        let good = sign("s3cret", &ts, body);
        assert_eq!(verify("s3cret", &ts, &good, body, now), Ok(()));
        assert_eq!(verify("s3cret", &ts, &good, body, now + 299), Ok(()));
        assert!(
            verify("s3cret", &ts, &good, body, now + 301).is_err(),
            "replayed"
        );
        assert!(
            verify("other", &ts, &good, body, now).is_err(),
            "wrong secret"
        );
        assert!(
            verify("s3cret", &ts, &good, b"{}", now).is_err(),
            "body changed"
        );
        assert!(
            verify("s3cret", "", &good, body, now).is_err(),
            "no timestamp"
        );
        assert!(
            verify("s3cret", &ts, "v0=zz", body, now).is_err(),
            "not hex"
        );
        assert!(
            verify("s3cret", &ts, &good[3..], body, now).is_err(),
            "no v0="
        );
    }
}
