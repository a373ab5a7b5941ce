//! Where and how spans and metrics leave the process: the OTLP exporters' settings, from the
//! `telemetry` config keys and the standard `OTEL_EXPORTER_OTLP_*` variables.
//!
//! Each setting is taken from, first to last: the config key (programmatic configuration
//! overrides the environment, as the OpenTelemetry SDKs and `opentelemetry-otlp` do), the
//! signal's variable (`OTEL_EXPORTER_OTLP_TRACES_*`, `OTEL_EXPORTER_OTLP_METRICS_*`), the
//! generic one (`OTEL_EXPORTER_OTLP_*`). Headers merge key by key in the same order. Nothing
//! is exported unless an endpoint is set.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::config::TelemetryConfig;

/// The wire protocol of the OTLP exporter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// OTLP/gRPC (`grpc`), the default here: port 4317.
    Grpc,
    /// OTLP/HTTP with protobuf bodies (`http/protobuf`): port 4318, `POST …/v1/traces`.
    HttpProtobuf,
}

impl Protocol {
    /// Parses an `OTEL_EXPORTER_OTLP_PROTOCOL` value.
    pub fn parse(value: &str) -> anyhow::Result<Self> {
        match value.trim() {
            "grpc" => Ok(Self::Grpc),
            "http/protobuf" => Ok(Self::HttpProtobuf),
            "http/json" => {
                anyhow::bail!("otlp protocol http/json is not supported: use http/protobuf or grpc")
            }
            other => anyhow::bail!("unknown otlp protocol {other:?}: use grpc or http/protobuf"),
        }
    }

    /// The name operators write.
    pub fn name(self) -> &'static str {
        match self {
            Self::Grpc => "grpc",
            Self::HttpProtobuf => "http/protobuf",
        }
    }
}

/// The resolved exporter settings. `Debug` prints header names only: values are API keys.
#[derive(Clone, PartialEq, Eq)]
pub struct OtlpSettings {
    /// Full URL: for HTTP it ends in `/v1/traces` (`/v1/metrics`).
    pub endpoint: String,
    /// gRPC or HTTP/protobuf.
    pub protocol: Protocol,
    /// Request headers (metadata for gRPC); values are secrets.
    pub headers: BTreeMap<String, String>,
    /// PEM CA file that alone verifies the collector; `None`: the system roots.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate and key for mutual TLS.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

impl std::fmt::Debug for OtlpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OtlpSettings")
            .field("endpoint", &self.endpoint)
            .field("protocol", &self.protocol)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("ca_file", &self.ca_file)
            .field("client_cert", &self.client_cert)
            .finish()
    }
}

/// What an exporter sends: it names the signal's variables and its OTLP/HTTP path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Spans: `OTEL_EXPORTER_OTLP_TRACES_*`, `/v1/traces`.
    Traces,
    /// Metrics: `OTEL_EXPORTER_OTLP_METRICS_*`, `/v1/metrics`.
    Metrics,
}

impl Signal {
    /// The signal's word in variable names (`TRACES`).
    fn var(self) -> &'static str {
        match self {
            Self::Traces => "TRACES",
            Self::Metrics => "METRICS",
        }
    }

    /// The path OTLP/HTTP appends to a base endpoint.
    fn path(self) -> &'static str {
        match self {
            Self::Traces => "/v1/traces",
            Self::Metrics => "/v1/metrics",
        }
    }
}

impl OtlpSettings {
    /// Resolves the span exporter's settings from `cfg` and the variables `env` returns
    /// (`std::env::var` in a role; empty values count as unset, as the spec says). `Ok(None)`:
    /// no endpoint, no export.
    pub fn resolve(
        cfg: &TelemetryConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Option<Self>> {
        Self::resolve_signal(Signal::Traces, cfg, env)
    }

    /// As [`Self::resolve`], for `signal`'s exporter.
    pub fn resolve_signal(
        signal: Signal,
        cfg: &TelemetryConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Option<Self>> {
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let own = |suffix: &str| format!("OTEL_EXPORTER_OTLP_{}_{suffix}", signal.var());
        let pick = |key: &Option<String>, suffix: &str| {
            key.clone()
                .filter(|v| !v.trim().is_empty())
                .or_else(|| var(&own(suffix)))
                .or_else(|| var(&format!("OTEL_EXPORTER_OTLP_{suffix}")))
        };
        let protocol = match pick(&cfg.otlp_protocol, "PROTOCOL") {
            Some(p) => Protocol::parse(&p)?,
            None => Protocol::Grpc,
        };
        // A signal's endpoint is the full URL; a base one (config or generic) gets the path.
        let endpoint = match (
            cfg.otlp_endpoint.clone().filter(|e| !e.trim().is_empty()),
            var(&own("ENDPOINT")),
        ) {
            (Some(base), _) => with_path(&base, protocol, signal),
            (None, Some(full)) => full,
            (None, None) => match var("OTEL_EXPORTER_OTLP_ENDPOINT") {
                Some(base) => with_path(&base, protocol, signal),
                None => return Ok(None),
            },
        };
        let mut headers = BTreeMap::new();
        for name in ["OTEL_EXPORTER_OTLP_HEADERS".to_string(), own("HEADERS")] {
            if let Some(list) = var(&name) {
                headers.extend(parse_headers(&list).map_err(|e| anyhow::anyhow!("{name}: {e}"))?);
            }
        }
        headers.extend(
            cfg.otlp_headers
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.clone())),
        );
        let cert = pick(&cfg.otlp_client_certificate, "CLIENT_CERTIFICATE");
        let key = pick(&cfg.otlp_client_key, "CLIENT_KEY");
        let client_cert = match (cert, key) {
            (Some(c), Some(k)) => Some((c.into(), k.into())),
            (None, None) => None,
            _ => anyhow::bail!("an otlp client certificate needs both its certificate and its key"),
        };
        Ok(Some(Self {
            endpoint,
            protocol,
            headers,
            ca_file: pick(&cfg.otlp_certificate, "CERTIFICATE").map(PathBuf::from),
            client_cert,
        }))
    }

    /// Reads the CA and client identity files (PEM).
    pub fn read_tls_files(&self) -> anyhow::Result<TlsFiles> {
        let read = |path: &PathBuf, what: &str| {
            std::fs::read(path)
                .map_err(|e| anyhow::anyhow!("read the otlp {what} {}: {e}", path.display()))
        };
        let ca = self
            .ca_file
            .as_ref()
            .map(|p| read(p, "CA certificate"))
            .transpose()?;
        let identity = match &self.client_cert {
            Some((c, k)) => Some((read(c, "client certificate")?, read(k, "client key")?)),
            None => None,
        };
        Ok(TlsFiles { ca, identity })
    }
}

/// The PEM contents [`OtlpSettings::read_tls_files`] read.
#[derive(Default)]
pub struct TlsFiles {
    /// The CA that alone verifies the collector.
    pub ca: Option<Vec<u8>>,
    /// Client certificate and key.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// `base` with the signal's path (`/v1/traces`) for HTTP (unless it already ends so); gRPC
/// endpoints have no path.
fn with_path(base: &str, protocol: Protocol, signal: Signal) -> String {
    let (base, path) = (base.trim(), signal.path());
    if protocol == Protocol::Grpc || base.ends_with(path) {
        return base.to_string();
    }
    format!("{}{path}", base.trim_end_matches('/'))
}

/// Parses `OTEL_EXPORTER_OTLP_HEADERS`: `key=value` pairs separated by commas, each part
/// percent-decoded (W3C Baggage form), so `api-key=k%C3%A9y` carries `kéy`.
pub fn parse_headers(list: &str) -> Result<BTreeMap<String, String>, String> {
    let decode = |s: &str| {
        percent_encoding::percent_decode_str(s.trim())
            .decode_utf8()
            .map(|c| c.into_owned())
            .map_err(|_| "a header is not UTF-8 once percent-decoded".to_string())
    };
    let mut out = BTreeMap::new();
    for pair in list.split(',').filter(|p| !p.trim().is_empty()) {
        // The value is never echoed: it is usually an API key.
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| "each header must read key=value".to_string())?;
        let key = decode(key)?;
        if key.is_empty() {
            return Err("a header has an empty name".into());
        }
        out.insert(key.to_ascii_lowercase(), decode(value)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
