//! Webhook mode: Telegram POSTs each update to `webhookUrl`; every gateway replica listens
//! (behind whatever balances `webhookUrl` over them), so any replica can receive. One listener
//! per `webhookListenHost:webhookListenPort` serves every bot configured on it: a request is
//! matched to its bot by `webhookPath` and the `X-Telegram-Bot-Api-Secret-Token` header
//! (compared in constant time); anything else is refused. The routes follow the bot registry
//! ([`Webhooks`]): a bot added live is served, on a listener bound then if its address is new. An update is answered 200 only once
//! its inbound message was accepted by JetStream (else 500, and Telegram delivers it again);
//! one that can never be handled (undecodable, or its handler panics) is logged and answered
//! 200, so Telegram does not keep posting it ahead of the next ones;
//! its inbound id is derived from the update, so a repeat is one inbound message. An album's
//! parts are answered once buffered in Redis and published as one turn ([`album`]).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use teloxide::payloads::SetWebhookSetters as _;
use teloxide::requests::Requester as _;
use teloxide::types::{AllowedUpdate, Update};
use tokio_util::sync::CancellationToken;

use super::{TelegramChannel, album, receive};
use crate::channels::Inbound;
use crate::channels::poison::{self, Failure};

/// The header Telegram carries the secret token in.
pub const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";
/// How long a webhook request may take to arrive.
const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The bots one listener serves now.
#[derive(Clone)]
struct Routes {
    bots: Arc<RwLock<Vec<Arc<TelegramChannel>>>>,
    inbound: Inbound,
}

/// The webhook listeners of one replica, by address, each with the bots routed to it now: a
/// bot added or changed live joins its address's listener (bound then when the address is
/// new), a removed one leaves it. A listener stays bound until the gateway stops.
#[derive(Clone, Default)]
pub(crate) struct Webhooks {
    by_addr: Arc<Mutex<BTreeMap<String, Routes>>>,
}

impl Webhooks {
    /// Routes the webhook-mode channels among `channels` (each replacing its bot's earlier
    /// route), binding a listener for each new address; returns the addresses bound now (a
    /// port of 0 binds a free one).
    pub(crate) async fn serve(
        &self,
        channels: &[Arc<TelegramChannel>],
        inbound: &Inbound,
        cancel: &CancellationToken,
        tasks: &mut tokio::task::JoinSet<()>,
    ) -> anyhow::Result<Vec<SocketAddr>> {
        let mut bound = Vec::new();
        for ch in channels.iter().filter(|c| c.cfg.mode == "webhook") {
            self.forget(&ch.bot_id);
            let addr = format!(
                "{}:{}",
                ch.cfg.webhook_listen_host, ch.cfg.webhook_listen_port
            );
            let known = self.lock().get(&addr).cloned();
            let routes = match known {
                Some(routes) => routes,
                None => {
                    let routes = Routes {
                        bots: Arc::default(),
                        inbound: inbound.clone(),
                    };
                    bound.push(bind(&addr, routes.clone(), cancel, tasks).await?);
                    self.lock().insert(addr, routes.clone());
                    routes
                }
            };
            routes
                .bots
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .push(ch.clone());
        }
        Ok(bound)
    }

    /// Takes bot `bot`'s routes out of every listener: its updates are refused from now on.
    pub(crate) fn forget(&self, bot: &str) {
        for routes in self.lock().values() {
            let mut bots = routes.bots.write().unwrap_or_else(|e| e.into_inner());
            bots.retain(|ch| ch.bot_id != bot);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Routes>> {
        self.by_addr.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Binds the listener of `addr` serving `routes`.
async fn bind(
    addr: &str,
    routes: Routes,
    cancel: &CancellationToken,
    tasks: &mut tokio::task::JoinSet<()>,
) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("bind the telegram webhook listener {addr}"))?;
    let local = listener.local_addr()?;
    tracing::info!(addr = %local, "telegram webhook listener ready");
    let router = Router::new().fallback(receive_update).with_state(routes);
    tasks.spawn(crate::api::serve(
        listener,
        router,
        READ_TIMEOUT,
        cancel.clone(),
    ));
    Ok(local)
}

/// Answers one webhook request.
async fn receive_update(
    State(routes): State<Routes>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> StatusCode {
    let secret = headers
        .get(SECRET_HEADER)
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    let found = routes
        .bots
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .find(|ch| {
            ch.cfg.webhook_path == uri.path()
                && constant_time_eq(ch.cfg.webhook_secret_token.as_bytes(), secret)
        })
        .cloned();
    let Some(ch) = found else {
        tracing::warn!(
            path = uri.path(),
            "telegram webhook request refused (unknown path or secret)"
        );
        return StatusCode::UNAUTHORIZED;
    };
    let update: Update = match serde_json::from_slice(&body) {
        Ok(u) => u,
        Err(e) => {
            // Acknowledged: Telegram would post it again and again, ahead of the next ones.
            tracing::warn!(bot = %ch.bot_id, error = %e, "undecodable telegram update acknowledged and skipped");
            return StatusCode::OK;
        }
    };
    let handled = poison::guard(async {
        match album::Album::of(&update) {
            Some(album) => album::buffer(&ch, &routes.inbound, &update, album).await,
            None => receive::handle(&ch, &routes.inbound, std::slice::from_ref(&update)).await,
        }
    });
    match handled.await {
        Ok(()) => StatusCode::OK,
        Err(Failure::Poison(why)) => {
            tracing::error!(bot = %ch.bot_id, update_id = update.id.0, error = %ch.redact(&why), "telegram update cannot be handled; skipped");
            StatusCode::OK
        }
        Err(Failure::Retry(e)) => {
            tracing::warn!(bot = %ch.bot_id, update_id = update.id.0, error = %ch.redact(&format!("{e:#}")), "telegram update not handled; Telegram will deliver it again");
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

/// Compares two byte strings in time that depends only on their lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Points the bot's webhook at `webhookUrl` with its secret token (every replica does it; the
/// call is idempotent), retrying until it succeeds or `cancel`.
pub(super) async fn register(ch: &TelegramChannel, cancel: &CancellationToken) -> bool {
    let Ok(url) = url::Url::parse(&ch.cfg.webhook_url) else {
        tracing::error!(bot = %ch.bot_id, "channels.telegram.webhookUrl is not a URL");
        return false;
    };
    let mut delay = Duration::from_millis(200);
    loop {
        let request = ch
            .api
            .set_webhook(url.clone())
            .secret_token(ch.cfg.webhook_secret_token.clone())
            .allowed_updates(vec![AllowedUpdate::Message]);
        match request.await {
            Ok(_) => {
                tracing::info!(bot = %ch.bot_id, token_id = %ch.token_id, "telegram webhook set");
                return true;
            }
            Err(e) => {
                tracing::warn!(bot = %ch.bot_id, error = %ch.redact(&e.to_string()), retry_in = ?delay, "telegram setWebhook failed")
            }
        }
        tokio::select! {
            _ = cancel.cancelled() => return false,
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_compare_whole() {
        assert!(constant_time_eq(b"s3cret-token", b"s3cret-token"));
        assert!(!constant_time_eq(b"s3cret-token", b"s3cret-tokem"));
        assert!(!constant_time_eq(b"s3cret", b"s3cret-token"));
        assert!(!constant_time_eq(b"s3cret", b""));
    }
}
