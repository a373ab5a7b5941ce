//! How the role sees its servers, beside [`crate::metrics`] on `GET /metrics`: whether its
//! NATS connection is up, and how many Redis requests failed on the way (the connection, not
//! the command: a refused or dropped connection, a timeout). The alert rules in
//! `deploy/monitoring/alerts.yml` page on these ("JetStream and Redis trouble").
//!
//! Per process, from 0 at start; lost with the process (Prometheus sees the reset).

use std::sync::OnceLock;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The dependency families.
#[derive(Debug)]
pub struct DependencyMetrics {
    registry: Registry,
    /// `nanobot_bus_connected`: 1 while the NATS connection is up, 0 while it reconnects.
    pub bus_connected: Gauge,
    /// `nanobot_store_requests_total`: Redis commands and pipelines sent.
    pub store_requests: Counter,
    /// `nanobot_store_errors_total`: of those, the ones whose connection failed.
    pub store_errors: Counter,
}

impl DependencyMetrics {
    fn new() -> Self {
        let mut registry = Registry::with_prefix("nanobot");
        let bus_connected = Gauge::default();
        let store_requests = Counter::default();
        let store_errors = Counter::default();
        registry.register(
            "bus_connected",
            "1 while this process's NATS connection is up, 0 while it reconnects",
            bus_connected.clone(),
        );
        registry.register(
            "store_requests",
            "Redis commands and pipelines sent",
            store_requests.clone(),
        );
        registry.register(
            "store_errors",
            "Redis requests that failed on their connection (refused, dropped, timed out)",
            store_errors.clone(),
        );
        Self {
            registry,
            bus_connected,
            store_requests,
            store_errors,
        }
    }

    /// Counts one Redis request and, when it failed on its connection, one error.
    pub fn store_request<T>(&self, result: &redis::RedisResult<T>) {
        self.store_requests.inc();
        if let Err(e) = result
            && is_connection_error(e)
        {
            self.store_errors.inc();
        }
    }

    /// Returns the families as Prometheus text (version 0.0.4), to follow
    /// [`crate::metrics::Metrics::render`]'s.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }

    /// Returns the families as data, for the OTLP metrics export (as
    /// [`crate::metrics::Metrics::snapshot`]).
    pub fn snapshot(&self) -> Vec<crate::metrics::data_model::MetricFamily> {
        prometheus_client::encoding::prometheus_protobuf::encode(&self.registry).unwrap_or_default()
    }
}

/// Whether `e` is the connection's fault rather than the command's (a script missing from the
/// cache, a wrong type, a refused ACL are the command's).
fn is_connection_error(e: &redis::RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_unrecoverable_error()
}

/// Returns the process's dependency metrics.
pub fn get() -> &'static DependencyMetrics {
    static METRICS: OnceLock<DependencyMetrics> = OnceLock::new();
    METRICS.get_or_init(DependencyMetrics::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_errors_count_connection_failures_not_command_errors() {
        let m = DependencyMetrics::new();
        m.store_request::<()>(&Ok(()));
        m.store_request::<()>(&Err(redis::RedisError::from((
            redis::ErrorKind::Server(redis::ServerErrorKind::NoScript),
            "NOSCRIPT",
        ))));
        m.store_request::<()>(&Err(redis::RedisError::from(std::io::Error::from(
            std::io::ErrorKind::ConnectionRefused,
        ))));
        m.bus_connected.set(1);
        let text = m.render();
        for line in [
            "nanobot_store_requests_total 3",
            "nanobot_store_errors_total 1",
            "nanobot_bus_connected 1",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
    }
}
