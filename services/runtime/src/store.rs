//! Redis connection: a multiplexed, auto-reconnecting connection manager.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio_util::sync::CancellationToken;

use crate::config::StoreConfig;

/// Redis errors.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The URL is invalid.
    #[error("invalid redis url: {0}")]
    Url(#[source] redis::RedisError),
    /// Shut down before Redis became reachable.
    #[error("cancelled while waiting for redis")]
    Cancelled,
}

/// Connects to Redis, retrying with backoff (max 5 s) until it answers or `cancel` fires.
pub async fn connect(
    cfg: &StoreConfig,
    cancel: &CancellationToken,
) -> Result<ConnectionManager, StoreError> {
    let client = redis::Client::open(cfg.url.as_str()).map_err(StoreError::Url)?;
    let manager_cfg = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(Duration::from_secs(10)))
        .set_number_of_retries(6)
        .set_max_delay(Duration::from_secs(2));
    let mut delay = Duration::from_millis(100);
    loop {
        match ConnectionManager::new_with_config(client.clone(), manager_cfg.clone()).await {
            Ok(conn) => return Ok(conn),
            Err(e) => tracing::warn!(error = %e, retry_in = ?delay, "redis not reachable"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return Err(StoreError::Cancelled),
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}
