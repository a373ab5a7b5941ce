//! Shutdown: a future that completes on SIGINT or SIGTERM; a second signal exits at once.

use std::time::Duration;

/// How long a service may drain after the shutdown signal before it gives up; with the trace
/// flush (`telemetry::FLUSH_LIMIT`) this keeps exit within the 5 s budget.
pub const GRACE: Duration = Duration::from_millis(3500);

/// Completes on the first SIGINT or SIGTERM. A second signal, or SIGQUIT, exits immediately.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut quit)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::quit()),
    ) else {
        // Without signal handlers the process can only be killed; never resolve.
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        _ = quit.recv() => std::process::exit(111),
    }
    tracing::info!("shutdown signal received, draining");
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = quit.recv() => {}
        }
        eprintln!("second signal: exiting now");
        std::process::exit(130);
    });
}

/// Waits for `drain` at most [`GRACE`] and logs whether it finished.
pub async fn drain<F: std::future::Future<Output = ()>>(what: &str, drain: F) {
    match tokio::time::timeout(GRACE, drain).await {
        Ok(()) => tracing::info!(what, "drained"),
        Err(_) => tracing::warn!(what, "drain deadline passed, exiting anyway"),
    }
}
