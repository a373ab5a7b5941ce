//! Builds the OTLP span exporter from [`OtlpSettings`] with `opentelemetry-otlp`'s own
//! builders: tonic for gRPC, and for HTTP/protobuf a reqwest client of ours (TLS roots and
//! client identity set here) whose requests run on the role's tokio runtime.
//!
//! A failed export (collector down, TLS refused) logs one warning per failure naming the
//! endpoint and the error (never a header) and drops that batch; the role keeps serving.

use std::time::Duration;

use anyhow::Context as _;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig as _, WithHttpConfig as _, WithTonicConfig as _};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};

use super::otlp::{OtlpSettings, Protocol, TlsFiles};

/// How long one export request may take (the OTLP default is 10 s).
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Builds the exporter for `settings`; must run inside the role's tokio runtime.
///
/// The headers are set on each request by us, not by the crate: it lets
/// `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS` override code, and the config keys win here.
pub fn build(settings: &OtlpSettings) -> anyhow::Result<LoggedExporter> {
    let tls = settings.read_tls_files()?;
    let inner = match settings.protocol {
        Protocol::Grpc => grpc(settings, tls)?,
        Protocol::HttpProtobuf => {
            let client = http_client(tls, header_map(settings)?)?;
            opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_endpoint(settings.endpoint.clone())
                .with_timeout(EXPORT_TIMEOUT)
                .with_http_client(client)
                .build()
                .context("build the otlp/http exporter")?
        }
    };
    Ok(LoggedExporter {
        inner,
        endpoint: settings.endpoint.clone(),
    })
}

/// The settings' headers, checked; errors name the header, never its value (an API key).
pub(super) fn header_map(settings: &OtlpSettings) -> anyhow::Result<http::HeaderMap> {
    let mut headers = http::HeaderMap::new();
    for (name, value) in &settings.headers {
        let name = http::HeaderName::try_from(name.as_str())
            .with_context(|| format!("otlp header {name:?} is not a valid header name"))?;
        let value = http::HeaderValue::try_from(value.as_str())
            .map_err(|_| anyhow::anyhow!("otlp header {name} has a value a header cannot carry"))?;
        headers.insert(name, value);
    }
    Ok(headers)
}

/// gRPC metadata pairs.
pub(super) type Metadata = Vec<(
    tonic::metadata::AsciiMetadataKey,
    tonic::metadata::AsciiMetadataValue,
)>;

/// The settings' headers as gRPC metadata; errors name the header, never its value.
pub(super) fn grpc_metadata(settings: &OtlpSettings) -> anyhow::Result<Metadata> {
    use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue};
    let mut metadata = Vec::new();
    for (name, value) in &settings.headers {
        let key = AsciiMetadataKey::from_bytes(name.as_bytes())
            .with_context(|| format!("otlp header {name:?} is not a valid gRPC metadata name"))?;
        let value = AsciiMetadataValue::try_from(value.as_str()).map_err(|_| {
            anyhow::anyhow!("otlp header {name} has a value gRPC cannot carry (ASCII only)")
        })?;
        metadata.push((key, value));
    }
    Ok(metadata)
}

/// The gRPC channel's TLS: for an `https://` endpoint, a CA file or a client identity; only
/// `ca` as the trust anchor when given, else the system roots.
pub(super) fn grpc_tls(
    settings: &OtlpSettings,
    TlsFiles { ca, identity }: TlsFiles,
) -> Option<opentelemetry_otlp::tonic_types::transport::ClientTlsConfig> {
    use opentelemetry_otlp::tonic_types::transport::{Certificate, ClientTlsConfig, Identity};
    if !settings.endpoint.starts_with("https://") && ca.is_none() && identity.is_none() {
        return None;
    }
    let mut tls = match ca {
        Some(pem) => ClientTlsConfig::new().ca_certificate(Certificate::from_pem(pem)),
        None => ClientTlsConfig::new().with_native_roots(),
    };
    if let Some((cert, key)) = identity {
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    Some(tls)
}

fn grpc(
    settings: &OtlpSettings,
    tls: TlsFiles,
) -> anyhow::Result<opentelemetry_otlp::SpanExporter> {
    let metadata = grpc_metadata(settings)?;
    let set_metadata = move |mut request: tonic::Request<()>| {
        for (key, value) in &metadata {
            request.metadata_mut().insert(key.clone(), value.clone());
        }
        Ok(request)
    };
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(settings.endpoint.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .with_interceptor(set_metadata);
    if let Some(tls) = grpc_tls(settings, tls) {
        builder = builder.with_tls_config(tls);
    }
    builder.build().context("build the otlp/grpc exporter")
}

/// A reqwest client for OTLP/HTTP sending `headers` on every request, on the role's runtime.
fn http_client(tls: TlsFiles, headers: http::HeaderMap) -> anyhow::Result<TokioHttpClient> {
    Ok(TokioHttpClient {
        client: reqwest_client(tls)?,
        headers,
        runtime: tokio::runtime::Handle::current(),
    })
}

/// A reqwest client for OTLP/HTTP: only `ca` as the trust anchor when given, else the system
/// roots; `identity` (cert, key PEM) for mutual TLS.
pub(super) fn reqwest_client(
    TlsFiles { ca, identity }: TlsFiles,
) -> anyhow::Result<reqwest::Client> {
    let mut builder = reqwest::Client::builder().timeout(EXPORT_TIMEOUT);
    if let Some(pem) = ca {
        let certs =
            reqwest::Certificate::from_pem_bundle(&pem).context("parse the otlp CA certificate")?;
        builder = builder.tls_certs_only(certs);
    }
    if let Some((mut cert, key)) = identity {
        cert.push(b'\n');
        cert.extend_from_slice(&key);
        let identity = reqwest::Identity::from_pem(&cert)
            .context("parse the otlp client certificate and key")?;
        builder = builder.identity(identity);
    }
    builder.build().context("build the otlp http client")
}

/// Sends each request on the role's tokio runtime: the SDK's batch processor exports from a
/// thread of its own, where reqwest's async client would find no reactor.
#[derive(Debug)]
struct TokioHttpClient {
    client: reqwest::Client,
    /// Set on every request, replacing any the exporter put there.
    headers: http::HeaderMap,
    runtime: tokio::runtime::Handle,
}

#[async_trait::async_trait]
impl HttpClient for TokioHttpClient {
    async fn send_bytes(&self, mut request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        for (name, value) in &self.headers {
            request.headers_mut().insert(name, value.clone());
        }
        let request = reqwest::Request::try_from(request)?;
        let client = self.client.clone();
        let sent = self.runtime.spawn(async move {
            let response = client.execute(request).await?;
            let mut out = Response::builder().status(response.status());
            for (name, value) in response.headers() {
                out = out.header(name, value);
            }
            let body = response.bytes().await?;
            Ok::<_, HttpError>(out.body(body)?)
        });
        sent.await?
    }
}

/// The exporter, logging each failed export.
#[derive(Debug)]
pub struct LoggedExporter {
    inner: opentelemetry_otlp::SpanExporter,
    endpoint: String,
}

impl SpanExporter for LoggedExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        if let Err(error) = &result {
            tracing::warn!(endpoint = %self.endpoint, spans, %error, "otlp export failed; spans dropped");
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}
