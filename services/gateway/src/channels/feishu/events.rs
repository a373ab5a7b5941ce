//! The HTTP event callback (`mode: "webhook"`): Feishu POSTs events to `webhookPath` on the
//! gateway's listener (`webhookListenHost:webhookListenPort`, behind the app's Request URL;
//! every replica listens). Checked before anything else:
//!
//! - with `encryptKey`, the body must be `{"encrypt": …}` and decrypt with it ([`crypto`]);
//!   a request carrying `X-Lark-Signature` must be signed with it;
//! - with `verificationToken`, the token inside the event (`header.token`, or `token` of a
//!   `url_verification`) must be it.
//!
//! Anything else is refused with 401 and runs nothing. A `url_verification` gets its
//! `challenge` back; an event is answered 200 once handled (else 500, and Feishu retries; a
//! retry of a handled event is answered 200 without a second message).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::{FeishuChannel, crypto, receive};
use crate::channels::Inbound;
use crate::channels::poison::{self, Failure};

/// How long a request may take to arrive.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone)]
struct Route {
    ch: Arc<FeishuChannel>,
    inbound: Inbound,
}

/// Listens for the event callback of `ch` until `cancel`.
pub(super) async fn listen(
    ch: Arc<FeishuChannel>,
    inbound: Inbound,
    cancel: CancellationToken,
) -> anyhow::Result<()> {
    let addr = format!(
        "{}:{}",
        ch.cfg.webhook_listen_host, ch.cfg.webhook_listen_port
    );
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("bind the feishu event listener {addr}"))?;
    tracing::info!(bot = %ch.bot_id, addr = %listener.local_addr()?, path = %ch.cfg.webhook_path, "feishu event listener ready");
    let path = ch.cfg.webhook_path.clone();
    let router = Router::new()
        .route(&path, axum::routing::post(receive_event))
        .with_state(Route { ch, inbound });
    crate::api::serve(listener, router, READ_TIMEOUT, cancel).await;
    Ok(())
}

async fn receive_event(State(route): State<Route>, headers: HeaderMap, body: Bytes) -> Response {
    let ch = &route.ch;
    let doc = match open(
        &ch.cfg.encrypt_key,
        &ch.cfg.verification_token,
        &headers,
        &body,
    ) {
        Ok(doc) => doc,
        Err(why) => {
            tracing::warn!(bot = %ch.bot_id, reason = why, "feishu event request refused");
            return StatusCode::UNAUTHORIZED.into_response();
        }
    };
    if doc["type"] == "url_verification" {
        return axum::Json(json!({"challenge": doc["challenge"]})).into_response();
    }
    let event_id = doc["header"]["event_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    match poison::guard(receive::handle(ch, &route.inbound, &doc)).await {
        Ok(()) => StatusCode::OK.into_response(),
        Err(Failure::Poison(why)) => {
            tracing::error!(bot = %ch.bot_id, event_id, error = %why, "feishu event cannot be handled; acknowledged and skipped");
            StatusCode::OK.into_response()
        }
        Err(Failure::Retry(e)) => {
            tracing::warn!(bot = %ch.bot_id, event_id, error = format!("{e:#}"), "feishu event not handled; Feishu will deliver it again");
            StatusCode::INTERNAL_SERVER_ERROR.into_response()
        }
    }
}

/// Checks, decrypts and parses one callback; `Err` says why it is refused.
fn open(
    encrypt_key: &str,
    verification_token: &str,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Value, &'static str> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    };
    let outer: Value = serde_json::from_slice(body).map_err(|_| "body is not JSON")?;
    let doc = if encrypt_key.is_empty() {
        outer
    } else {
        let sealed = outer["encrypt"]
            .as_str()
            .ok_or("not encrypted though encryptKey is set")?;
        let signature = header("x-lark-signature");
        if !signature.is_empty()
            && !crypto::signed(
                encrypt_key,
                header("x-lark-request-timestamp"),
                header("x-lark-request-nonce"),
                body,
                signature,
            )
        {
            return Err("bad signature");
        }
        let plain =
            crypto::decrypt(encrypt_key, sealed).map_err(|_| "does not decrypt with encryptKey")?;
        serde_json::from_str(&plain).map_err(|_| "decrypted body is not JSON")?
    };
    if !verification_token.is_empty() {
        let token = doc["header"]["token"]
            .as_str()
            .or_else(|| doc["token"].as_str())
            .unwrap_or_default();
        if !same(token, verification_token) {
            return Err("wrong verification token");
        }
    }
    Ok(doc)
}

/// Compares two secrets without stopping at the first difference.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |acc, (x, y)| acc | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_callback_needs_the_verification_token() {
        let h = HeaderMap::new();
        let good = r#"{"schema":"2.0","header":{"token":"vt-令牌","event_id":"e1"}}"#.as_bytes();
        assert!(open("", "vt-令牌", &h, good).is_ok());
        assert_eq!(open("", "other", &h, good), Err("wrong verification token"));
        let challenge =
            r#"{"type":"url_verification","token":"vt-令牌","challenge":"c1"}"#.as_bytes();
        assert_eq!(
            open("", "vt-令牌", &h, challenge).unwrap()["challenge"],
            "c1"
        );
        assert_eq!(open("", "vt", &h, b"not json"), Err("body is not JSON"));
        assert_eq!(
            open("key", "", &h, good),
            Err("not encrypted though encryptKey is set")
        );
    }
}
