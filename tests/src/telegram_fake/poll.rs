//! `getUpdates` (long poll, offset confirmation, `allowed_updates`, 409 for a concurrent
//! poller) and webhook delivery of injected updates.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::ApiError;
use super::methods::Params;
use super::state::Shared;

/// Telegram's upper bound on a long poll's `timeout`.
const MAX_POLL_SECS: u64 = 50;

/// Releases a poll's slot however the request ends (answered, terminated, or dropped when the
/// client hung up).
struct PollGuard<'a> {
    shared: &'a Shared,
    token: &'a str,
    id: u64,
}

impl Drop for PollGuard<'_> {
    fn drop(&mut self) {
        if let Some(bot) = self.shared.bots().get_mut(self.token) {
            bot.end_poll(self.id);
        }
        self.shared.bump();
    }
}

pub(super) async fn get_updates(
    shared: &Arc<Shared>,
    token: &str,
    params: &Params,
) -> Result<Value, ApiError> {
    let limit = params.i64("limit").unwrap_or(100).clamp(1, 100) as usize;
    let timeout = params
        .i64("timeout")
        .unwrap_or(0)
        .clamp(0, MAX_POLL_SECS as i64) as u64;
    let (id, mut terminated, notify) = {
        let mut bots = shared.bots();
        let bot = bots.get_mut(token).ok_or_else(ApiError::unauthorized)?;
        if bot.webhook.is_some() {
            return Err(ApiError::new(
                409,
                "Conflict: can't use getUpdates method while webhook is active; use \
                 deleteWebhook to delete the webhook first",
            ));
        }
        if let Some(allowed) = params.strings("allowed_updates") {
            bot.set_allowed_updates(allowed);
        }
        if let Some(offset) = params.i64("offset") {
            bot.confirm(offset);
        }
        let (id, terminated) = bot.start_poll();
        (id, terminated, bot.update_notify.clone())
    };
    let _guard = PollGuard { shared, token, id };
    shared.bump();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let ready = match shared.bots().get_mut(token) {
            Some(bot) => bot.ready_updates(limit),
            None => return Err(ApiError::unauthorized()),
        };
        if !ready.is_empty() {
            return Ok(Value::Array(ready));
        }
        tokio::select! {
            _ = &mut terminated => {
                if let Some(bot) = shared.bots().get_mut(token) {
                    bot.conflicts += 1;
                }
                return Err(ApiError::new(
                    409,
                    "Conflict: terminated by other getUpdates request; make sure that only \
                     one bot instance is running",
                ));
            }
            _ = &mut notified => {}
            _ = tokio::time::sleep_until(deadline) => return Ok(Value::Array(Vec::new())),
        }
    }
}

/// Delivers `update` to the bot's webhook, if one is set, retrying until the receiver answers
/// 2xx (then the update is confirmed) or the webhook is changed or removed (then the update
/// stays queued for `getUpdates`).
pub(super) fn deliver(shared: &Arc<Shared>, token: &str, update_id: i64, update: Value) {
    let Some(webhook) = shared.bots().get(token).and_then(|b| b.webhook.clone()) else {
        return;
    };
    let shared = shared.clone();
    let token = token.to_string();
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(50);
        loop {
            let current = shared.bots().get(&token).and_then(|b| b.webhook.clone());
            if current.as_ref() != Some(&webhook) {
                return;
            }
            let mut request = shared.http.post(&webhook.url).json(&update);
            if let Some(secret) = &webhook.secret_token {
                request = request.header("X-Telegram-Bot-Api-Secret-Token", secret);
            }
            match request.send().await {
                Ok(response) if response.status().is_success() => {
                    if let Some(bot) = shared.bots().get_mut(&token) {
                        bot.confirm_one(update_id);
                        bot.webhook_deliveries += 1;
                    }
                    shared.bump();
                    return;
                }
                Ok(response) => {
                    tracing::debug!(status = %response.status(), update_id, "webhook refused update");
                }
                Err(e) => tracing::debug!(error = %e, update_id, "webhook delivery failed"),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
        }
    });
}
