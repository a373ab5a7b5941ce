//! Metrics over OTLP, beside `/metrics`: every `OTEL_METRIC_EXPORT_INTERVAL` (60 s) a task
//! reads the registries `/metrics` serves ([`crate::metrics::Metrics::snapshot`],
//! [`crate::dependency_metrics`]) and sends them to the collector ([`convert`]: same names and
//! labels, cumulative temporality), over the transport, TLS and headers of the span exporter
//! ([`super::otlp_export`]).
//!
//! Settings follow the span exporter's ([`OtlpSettings`]) with the metrics variables
//! (`OTEL_EXPORTER_OTLP_METRICS_*`, path `/v1/metrics`); `OTEL_METRICS_EXPORTER=none` turns
//! the export off (`/metrics` always serves). A failed export logs one warning naming the
//! endpoint and the error (never a header) and the role keeps serving; the next export carries
//! the totals again. At shutdown a last export runs; on SIGKILL at most one interval of
//! increments is not sent, and the next process's counters start again from 0 (a reset the
//! backend sees by the new start time).

pub mod convert;

use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use prost::Message as _;
use tonic::transport::{Channel, Endpoint};

use super::otlp::{OtlpSettings, Protocol, Signal};
use super::otlp_export::{EXPORT_TIMEOUT, Metadata, grpc_metadata, grpc_tls, header_map};
use crate::config::TelemetryConfig;

/// The export interval without `OTEL_METRIC_EXPORT_INTERVAL` (the spec's default).
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

/// Where, how and how often metrics leave the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsSettings {
    /// Endpoint (HTTP: ending in `/v1/metrics`), protocol, headers, TLS.
    pub otlp: OtlpSettings,
    /// Time between two exports.
    pub interval: Duration,
}

impl MetricsSettings {
    /// Resolves the settings from `cfg` and the variables `env` returns. `Ok(None)`: no
    /// endpoint, or `OTEL_METRICS_EXPORTER` names no `otlp`.
    pub fn resolve(
        cfg: &TelemetryConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Option<Self>> {
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        if let Some(list) = var("OTEL_METRICS_EXPORTER") {
            let names: Vec<&str> = list.split(',').map(str::trim).collect();
            if let Some(other) = names
                .iter()
                .find(|n| !matches!(**n, "otlp" | "none" | "prometheus" | ""))
            {
                anyhow::bail!(
                    "OTEL_METRICS_EXPORTER {other:?} is not supported: use otlp or none (/metrics always serves Prometheus)"
                );
            }
            if !names.contains(&"otlp") {
                return Ok(None);
            }
        }
        let Some(otlp) = OtlpSettings::resolve_signal(Signal::Metrics, cfg, &env)? else {
            return Ok(None);
        };
        let interval = match var("OTEL_METRIC_EXPORT_INTERVAL") {
            None => DEFAULT_INTERVAL,
            Some(ms) => match ms.trim().parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => anyhow::bail!(
                    "OTEL_METRIC_EXPORT_INTERVAL must be a positive number of milliseconds, not {ms:?}"
                ),
            },
        };
        Ok(Some(Self { otlp, interval }))
    }
}

enum Transport {
    Grpc {
        client: MetricsServiceClient<Channel>,
        metadata: Metadata,
    },
    Http {
        client: reqwest::Client,
        headers: http::HeaderMap,
    },
}

/// Sends the process's metrics to one collector.
pub struct MetricsExporter {
    transport: Transport,
    endpoint: String,
    resource: opentelemetry_sdk::Resource,
    /// When the counters were 0: the start of every cumulative point.
    start: SystemTime,
}

impl MetricsExporter {
    /// Builds the exporter (no connection yet); must run inside the role's tokio runtime.
    pub fn new(
        settings: &OtlpSettings,
        resource: opentelemetry_sdk::Resource,
    ) -> anyhow::Result<Self> {
        let tls = settings.read_tls_files()?;
        let transport = match settings.protocol {
            Protocol::Grpc => {
                let mut endpoint = Endpoint::from_shared(settings.endpoint.clone())
                    .context("the otlp metrics endpoint is not a URL")?
                    .timeout(EXPORT_TIMEOUT)
                    .connect_timeout(EXPORT_TIMEOUT);
                if let Some(tls) = grpc_tls(settings, tls) {
                    endpoint = endpoint
                        .tls_config(tls)
                        .context("otlp metrics TLS settings")?;
                }
                Transport::Grpc {
                    client: MetricsServiceClient::new(endpoint.connect_lazy()),
                    metadata: grpc_metadata(settings)?,
                }
            }
            Protocol::HttpProtobuf => Transport::Http {
                client: super::otlp_export::reqwest_client(tls)?,
                headers: header_map(settings)?,
            },
        };
        Ok(Self {
            transport,
            endpoint: settings.endpoint.clone(),
            resource,
            start: SystemTime::now(),
        })
    }

    /// Sends the process's metrics now; a failure is logged (endpoint and error) and returned.
    pub async fn export(&self) -> anyhow::Result<()> {
        // Everything `/metrics` shows: the fleet's families, then the dependency ones.
        let mut snapshot = crate::metrics::get().snapshot();
        snapshot.extend(crate::dependency_metrics::get().snapshot());
        let request = convert::request(snapshot, &self.resource, self.start, SystemTime::now());
        let result = self.send(request).await;
        if let Err(error) = &result {
            tracing::warn!(endpoint = %self.endpoint, error = %format!("{error:#}"), "otlp metrics export failed; the next export carries the totals");
        }
        result
    }

    async fn send(&self, request: ExportMetricsServiceRequest) -> anyhow::Result<()> {
        let rejected = match &self.transport {
            Transport::Grpc { client, metadata } => {
                let mut request = tonic::Request::new(request);
                for (key, value) in metadata {
                    request.metadata_mut().insert(key.clone(), value.clone());
                }
                let response = client.clone().export(request).await?.into_inner();
                response.partial_success
            }
            Transport::Http { client, headers } => {
                let response = client
                    .post(&self.endpoint)
                    .headers(headers.clone())
                    .header(http::header::CONTENT_TYPE, "application/x-protobuf")
                    .body(request.encode_to_vec())
                    .send()
                    .await?;
                let status = response.status();
                anyhow::ensure!(status.is_success(), "the collector answered {status}");
                let body = response.bytes().await?;
                let decoded = opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse::decode(body);
                decoded.ok().and_then(|r| r.partial_success)
            }
        };
        match rejected {
            Some(p) if p.rejected_data_points > 0 => anyhow::bail!(
                "the collector rejected {} data points: {}",
                p.rejected_data_points,
                p.error_message
            ),
            _ => Ok(()),
        }
    }
}

/// The periodic export; [`MetricsTask::shutdown`] sends a last one.
pub struct MetricsTask {
    exporter: std::sync::Arc<MetricsExporter>,
    task: tokio::task::JoinHandle<()>,
}

/// Starts exporting every `settings.interval` (the first export one interval after start).
pub fn start(
    settings: &MetricsSettings,
    resource: opentelemetry_sdk::Resource,
) -> anyhow::Result<MetricsTask> {
    let exporter = std::sync::Arc::new(MetricsExporter::new(&settings.otlp, resource)?);
    let (every, sender) = (settings.interval, exporter.clone());
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // Logged inside; the next tick tries again with the totals.
            let _ = sender.export().await;
        }
    });
    Ok(MetricsTask { exporter, task })
}

impl MetricsTask {
    /// Stops the periodic export and sends a last one, waiting at most `limit`.
    pub async fn shutdown(self, limit: Duration) {
        // An export under way is dropped: the last one carries the same totals and more.
        self.task.abort();
        if tokio::time::timeout(limit, self.exporter.export())
            .await
            .is_err()
        {
            tracing::warn!(endpoint = %self.exporter.endpoint, "gave up the last otlp metrics export after {limit:?}");
        }
    }
}

#[cfg(test)]
mod tests;
