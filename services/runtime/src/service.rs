//! The start-up sequence every service shares: shutdown wiring, health probe, NATS connect,
//! status responder.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;

use crate::bus::{self, Bus};
use crate::config::Config;
use crate::health::{self, Health};

/// What a started service holds.
#[derive(Debug)]
pub struct Started {
    /// NATS client and JetStream context.
    pub bus: Bus,
    /// This instance's health state (call `set_ready(true)` once subscriptions are up).
    pub health: Arc<Health>,
    /// Cancelled when the shutdown future completes.
    pub cancel: CancellationToken,
    /// Bound address of the HTTP probe, when one was asked for.
    pub health_addr: Option<SocketAddr>,
}

/// Wires `shutdown` to a cancellation token, serves the HTTP probe on `health_addr` (if any),
/// connects to NATS (ensuring the streams) and answers fleet status probes.
pub async fn start(
    role: &'static str,
    cfg: &Config,
    health_addr: Option<SocketAddr>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<Started> {
    let cancel = CancellationToken::new();
    let on_shutdown = cancel.clone();
    tokio::spawn(async move {
        shutdown.await;
        on_shutdown.cancel();
    });
    let health = Health::new(role);
    let bound = match health_addr {
        Some(addr) => Some(
            health::serve_http(addr, health.clone(), cancel.clone())
                .await
                .with_context(|| format!("bind health probe {addr}"))?,
        ),
        None => None,
    };
    let as_role = crate::config::scope::role_named(role).map_err(anyhow::Error::msg)?;
    let bus = bus::connect(&cfg.bus, as_role, &health.instance, &cancel)
        .await
        .context("connect to nats")?;
    bus::verify_streams(&bus.js)
        .await
        .context("check the jetstream streams")?;
    health::serve_status(bus.client.clone(), health.clone(), cancel.clone())
        .await
        .context("subscribe to status probes")?;
    tracing::info!(role, instance = %health.instance, "connected to nats");
    Ok(Started {
        bus,
        health,
        cancel,
        health_addr: bound,
    })
}
