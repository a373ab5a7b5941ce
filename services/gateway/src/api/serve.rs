//! Serving the API router with hyper directly, for what `axum::serve` does not offer: a
//! deadline on request headers, so a client that opens connections and trickles headers
//! (slowloris) cannot hold tasks and file descriptors forever. Open connections finish their
//! request on shutdown.

use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// Pause after a failed `accept` (e.g. out of file descriptors) before trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Serves `router` on `listener` until `cancel`, then waits for open connections to finish.
/// Request headers must arrive within `header_timeout`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    header_timeout: Duration,
    cancel: CancellationToken,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout);
    let graceful = GracefulShutdown::new();
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "api accept failed");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                    continue;
                }
            },
            () = cancel.cancelled() => break,
        };
        let service = TowerToHyperService::new(router.clone());
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "api connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
