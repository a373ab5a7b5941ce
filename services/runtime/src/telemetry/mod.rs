//! Logs and traces. A tracing subscriber (text or JSON lines) always; an OpenTelemetry tracer
//! always (so every NATS message carries a W3C `traceparent`), exporting over OTLP (gRPC or
//! HTTP/protobuf, TLS, headers: [`otlp`]) only when `telemetry.otlpEndpoint` or
//! `OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT` is set. The resource and sampler follow
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_TRACES_SAMPLER[_ARG]`. Metrics
//! go the same way, beside `/metrics`, with an endpoint set ([`otlp_metrics`]).

pub mod otlp;
pub mod otlp_export;
pub mod otlp_metrics;
pub mod tags;

pub use self::tags::root;

use anyhow::Context as _;
use async_nats::HeaderMap;
use opentelemetry::propagation::TextMapCompositePropagator;
use opentelemetry::propagation::{Extractor, Injector};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::propagation::{BaggagePropagator, TraceContextPropagator};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

use crate::config::TelemetryConfig;

/// Flushes exported spans, and sends the last metrics, on shutdown.
#[must_use = "call shutdown() before exiting to flush spans"]
pub struct TelemetryGuard {
    provider: SdkTracerProvider,
    metrics: Option<otlp_metrics::MetricsTask>,
}

impl TelemetryGuard {
    /// Flushes and stops the exporters, waiting at most [`FLUSH_LIMIT`] so a dead collector
    /// never delays exit past the shutdown budget.
    pub async fn shutdown(self) {
        let provider = self.provider;
        let spans = async {
            let flush = tokio::task::spawn_blocking(move || provider.shutdown());
            match tokio::time::timeout(FLUSH_LIMIT, flush).await {
                Ok(Ok(Err(e))) => eprintln!("failed to flush traces: {e}"),
                Err(_) => eprintln!("gave up flushing traces after {FLUSH_LIMIT:?}"),
                _ => {}
            }
        };
        let metrics = async {
            if let Some(task) = self.metrics {
                task.shutdown(FLUSH_LIMIT).await;
            }
        };
        tokio::join!(spans, metrics);
    }
}

/// Longest time spent flushing spans at exit.
pub const FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_millis(800);

/// Returns the OTLP exporter settings from config and the `OTEL_EXPORTER_OTLP_*` variables.
pub fn otlp_settings(cfg: &TelemetryConfig) -> anyhow::Result<Option<otlp::OtlpSettings>> {
    otlp::OtlpSettings::resolve(cfg, |name| std::env::var(name).ok())
}

/// The resource of `role`'s spans: `OTEL_RESOURCE_ATTRIBUTES`, `service.name` from
/// `OTEL_SERVICE_NAME` (else that list, else the role's name), and `nanobot.role` always.
pub fn resource(
    role: &'static str,
    env: impl Fn(&str) -> Option<String>,
) -> opentelemetry_sdk::Resource {
    let named = env("OTEL_SERVICE_NAME").is_some_and(|v| !v.trim().is_empty())
        || env("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|v| {
            v.split(',')
                .any(|kv| kv.trim_start().starts_with("service.name="))
        });
    let builder = opentelemetry_sdk::Resource::builder()
        .with_attribute(opentelemetry::KeyValue::new("nanobot.role", role));
    if named {
        builder.build()
    } else {
        builder.with_service_name(role).build()
    }
}

/// Installs the global subscriber, propagator and tracer for `service`.
pub fn init(service: &'static str, cfg: &TelemetryConfig) -> anyhow::Result<TelemetryGuard> {
    install_propagator();
    let resource = resource(service, |name| std::env::var(name).ok());
    let metrics = otlp_metrics::MetricsSettings::resolve(cfg, |name| std::env::var(name).ok())
        .context("telemetry: otlp metrics settings")?;
    let metrics_resource = resource.clone();
    // The default config reads OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG. The tags go on
    // a span before any exporter sees it.
    let mut builder = SdkTracerProvider::builder()
        .with_resource(resource)
        .with_span_processor(tags::TagProcessor);
    let settings = otlp_settings(cfg).context("telemetry: otlp settings")?;
    if let Some(settings) = &settings {
        builder = builder.with_batch_exporter(otlp_export::build(settings)?);
    }
    let provider = builder.build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    // A span's parent is the tracing span it was created in, not the thread's current
    // OpenTelemetry context: with context activation (the layer's default) that thread-local
    // context follows threads, and async tasks move between them.
    let otel = tracing_opentelemetry::layer()
        .with_context_activation(false)
        .with_tracer(provider.tracer(service));

    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new(format!("{},h2=warn,hyper=warn,tower=warn", cfg.log_level))
    });
    use std::io::IsTerminal as _;
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false);
    let fmt = if cfg.log_format == "json" {
        fmt.json().boxed()
    } else {
        fmt.boxed()
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .try_init()
        .context("install the tracing subscriber")?;
    install_panic_hook();
    if let Some(s) = settings {
        let headers: Vec<&String> = s.headers.keys().collect();
        let protocol = s.protocol.name();
        // Header names only: their values are API keys.
        tracing::info!(endpoint = %s.endpoint, protocol, ?headers, ca = ?s.ca_file, "exporting traces over otlp");
    }
    let metrics = match metrics {
        Some(m) => {
            let task = otlp_metrics::start(&m, metrics_resource)?;
            let (s, headers) = (&m.otlp, m.otlp.headers.keys().collect::<Vec<_>>());
            let protocol = s.protocol.name();
            tracing::info!(endpoint = %s.endpoint, protocol, ?headers, ca = ?s.ca_file, interval = ?m.interval, "exporting metrics over otlp");
            Some(task)
        }
        None => None,
    };
    Ok(TelemetryGuard { provider, metrics })
}

/// Sends and reads `traceparent`, and `baggage` for the bot and channel tags ([`tags`]).
fn install_propagator() {
    opentelemetry::global::set_text_map_propagator(TextMapCompositePropagator::new(vec![
        Box::new(TraceContextPropagator::new()),
        Box::new(BaggagePropagator::new()),
    ]));
}

fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        tracing::error!(panic = %info, "panic");
        default(info);
    }));
}

struct HeaderInjector<'a>(&'a mut HeaderMap);

impl Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        self.0.insert(key, value.as_str());
    }
}

struct HeaderExtractor<'a>(&'a HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(|v| v.as_str())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.iter().map(|(k, _)| k.as_ref()).collect()
    }
}

/// Writes the current span's W3C trace context into `headers`. Outside any traced span (a
/// CLI, a test client) it starts a new trace, so every message carries a `traceparent`.
pub fn inject_current(headers: &mut HeaderMap) {
    let cx = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&cx, &mut HeaderInjector(headers))
    });
    if headers.get("traceparent").is_none() {
        let trace = uuid::Uuid::new_v4().simple().to_string();
        let span = &uuid::Uuid::new_v4().simple().to_string()[..16];
        headers.insert("traceparent", format!("00-{trace}-{span}-01").as_str());
    }
}

/// Makes `span` a child of the trace context carried in `headers` (if any); it and its
/// children carry the bot and channel tags the context carries ([`tags`]).
pub fn set_parent_from(span: &tracing::Span, headers: Option<&HeaderMap>) {
    let Some(headers) = headers else { return };
    let _ = span.set_parent(extract(headers));
}

/// As [`set_parent_from`], and names the turn's conversation (`gen_ai.conversation.id`, the
/// session key) on `span` and every span under it.
pub fn set_parent_in_conversation(
    span: &tracing::Span,
    headers: Option<&HeaderMap>,
    conversation: &str,
) {
    let parent = headers.map(extract).unwrap_or_default();
    tags::in_conversation(span, parent, conversation);
}

fn extract(headers: &HeaderMap) -> opentelemetry::Context {
    opentelemetry::global::get_text_map_propagator(|p| p.extract(&HeaderExtractor(headers)))
}

/// Sets `key` on `span`'s exported OpenTelemetry span as a list of strings (as GenAI's
/// `gen_ai.response.finish_reasons`); tracing fields cannot hold lists.
pub fn set_string_list(span: &tracing::Span, key: &'static str, values: &[&str]) {
    let values = values
        .iter()
        .map(|v| opentelemetry::StringValue::from(v.to_string()))
        .collect();
    span.set_attribute(
        key,
        opentelemetry::Value::Array(opentelemetry::Array::String(values)),
    );
}

/// Returns the trace id carried in `headers`' `traceparent`, if any.
pub fn trace_id_of(headers: Option<&HeaderMap>) -> Option<String> {
    let value = headers?.get("traceparent")?.as_str().to_string();
    value.split('-').nth(1).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_outside_a_trace_start_one() {
        let mut headers = HeaderMap::new();
        inject_current(&mut headers);
        let id = trace_id_of(Some(&headers)).expect("traceparent");
        assert_eq!(id.len(), 32);
        assert!(id.chars().all(|c| c.is_ascii_hexdigit()));
        let mut other = HeaderMap::new();
        inject_current(&mut other);
        assert_ne!(
            trace_id_of(Some(&other)).unwrap(),
            id,
            "each message outside a span is its own trace"
        );
    }
}
