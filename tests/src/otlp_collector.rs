//! A tiny OTLP collector on loopback, owned by the suite: it accepts `POST /v1/traces` and
//! `POST /v1/metrics` (OTLP/HTTP, protobuf) and the gRPC `TraceService/Export` and
//! `MetricsService/Export` on the same port, and records each request's headers (gRPC
//! metadata), resource attributes, span names and metrics. [`OtlpCollector::start_tls`] serves it behind TLS with a server certificate
//! from a CA made in the test ([`TestPki`], rcgen), for `OTEL_EXPORTER_OTLP_CERTIFICATE`;
//! [`OtlpCollector::start_mtls`] also requires a client certificate that CA signed.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use nanobot_tests::otlp_collector::OtlpCollector;
//! let collector = OtlpCollector::start_http().await?;
//! let base = collector.endpoint(); // OTEL_EXPORTER_OTLP_ENDPOINT, protocol http/protobuf
//! let exports = collector.exports();
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::metrics::v1::Metric;
use prost::Message as _;

/// One export request as received.
#[derive(Debug, Clone)]
pub struct Export {
    /// Request headers, names lowercase.
    pub headers: BTreeMap<String, String>,
    /// Resource attributes (string values) of each resource in the request, merged.
    pub resource: BTreeMap<String, String>,
    /// Names of the spans in the request.
    pub span_names: Vec<String>,
    /// The metrics of a metrics export, as sent.
    pub metrics: Vec<Metric>,
}

/// The running collector; stops when dropped.
#[derive(Debug)]
pub struct OtlpCollector {
    port: u16,
    tls: bool,
    exports: Arc<Mutex<Vec<Export>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OtlpCollector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl OtlpCollector {
    /// Starts a plaintext collector on `127.0.0.1` (OTLP/HTTP, and OTLP/gRPC over h2c).
    pub async fn start_http() -> anyhow::Result<Self> {
        Self::start(None).await
    }

    /// Starts the collector behind TLS with `pki`'s server certificate (for `127.0.0.1`),
    /// offering `h2` (gRPC) and `http/1.1` by ALPN.
    pub async fn start_tls(pki: &TestPki) -> anyhow::Result<Self> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![pki.server_cert_der.clone()], pki.server_key_der())?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Self::start(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))).await
    }

    /// Starts the collector behind mutual TLS: as [`Self::start_tls`], and it accepts only
    /// clients presenting a certificate `pki`'s CA signed (a handshake without one, or with
    /// another CA's, fails and nothing is recorded).
    pub async fn start_mtls(pki: &TestPki) -> anyhow::Result<Self> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(pki.ca_cert_der.clone())?;
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()?;
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![pki.server_cert_der.clone()], pki.server_key_der())?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Self::start(Some(tokio_rustls::TlsAcceptor::from(Arc::new(config)))).await
    }

    async fn start(tls: Option<tokio_rustls::TlsAcceptor>) -> anyhow::Result<Self> {
        let (listener, exports, router) = Self::bind().await?;
        let port = listener.local_addr()?.port();
        let secure = tls.is_some();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let tls = tls.clone();
                let service = hyper_util::service::TowerToHyperService::new(router.clone());
                tokio::spawn(async move {
                    let builder = hyper_util::server::conn::auto::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    );
                    let Some(tls) = tls else {
                        let io = hyper_util::rt::TokioIo::new(tcp);
                        let _ = builder.serve_connection(io, service).await;
                        return;
                    };
                    // A client refusing our certificate ends here: nothing is recorded.
                    let Ok(stream) = tls.accept(tcp).await else {
                        return;
                    };
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = builder.serve_connection(io, service).await;
                });
            }
        });
        Ok(Self {
            port,
            tls: secure,
            exports,
            task,
        })
    }

    async fn bind() -> anyhow::Result<(
        tokio::net::TcpListener,
        Arc<Mutex<Vec<Export>>>,
        axum::Router,
    )> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let exports = Arc::new(Mutex::new(Vec::new()));
        let (sink, metrics_sink) = (exports.clone(), exports.clone());
        let grpc = TraceServiceServer::new(GrpcSink(exports.clone()));
        let grpc_metrics = MetricsServiceServer::new(GrpcSink(exports.clone()));
        let router = axum::Router::new()
            .route(
                "/v1/traces",
                post(move |headers: HeaderMap, body: Bytes| {
                    let sink = sink.clone();
                    async move { record(&sink, &headers, &body) }
                }),
            )
            .route(
                "/v1/metrics",
                post(move |headers: HeaderMap, body: Bytes| {
                    let sink = metrics_sink.clone();
                    async move { record_metrics(&sink, &headers, &body) }
                }),
            )
            .route_service(
                "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                grpc,
            )
            .route_service(
                "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
                grpc_metrics,
            );
        Ok((listener, exports, router))
    }

    /// The base endpoint (`OTEL_EXPORTER_OTLP_ENDPOINT`): `http(s)://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// Every export request received so far.
    pub fn exports(&self) -> Vec<Export> {
        self.exports.lock().unwrap().clone()
    }
}

fn record(
    sink: &Mutex<Vec<Export>>,
    headers: &HeaderMap,
    body: &[u8],
) -> (
    axum::http::StatusCode,
    [(&'static str, &'static str); 1],
    Vec<u8>,
) {
    let proto = [("content-type", "application/x-protobuf")];
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (axum::http::StatusCode::BAD_REQUEST, proto, Vec::new());
    };
    push(sink, headers, request);
    let ok = ExportTraceServiceResponse::default().encode_to_vec();
    (axum::http::StatusCode::OK, proto, ok)
}

/// The OTLP/gRPC side: the same record, headers from the request's metadata.
#[derive(Clone)]
struct GrpcSink(Arc<Mutex<Vec<Export>>>);

#[tonic::async_trait]
impl TraceService for GrpcSink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let headers = request.metadata().clone().into_headers();
        push(&self.0, &headers, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

fn record_metrics(
    sink: &Mutex<Vec<Export>>,
    headers: &HeaderMap,
    body: &[u8],
) -> (
    axum::http::StatusCode,
    [(&'static str, &'static str); 1],
    Vec<u8>,
) {
    let proto = [("content-type", "application/x-protobuf")];
    let Ok(request) = ExportMetricsServiceRequest::decode(body) else {
        return (axum::http::StatusCode::BAD_REQUEST, proto, Vec::new());
    };
    push_metrics(sink, headers, request);
    let ok = ExportMetricsServiceResponse::default().encode_to_vec();
    (axum::http::StatusCode::OK, proto, ok)
}

#[tonic::async_trait]
impl MetricsService for GrpcSink {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        let headers = request.metadata().clone().into_headers();
        push_metrics(&self.0, &headers, request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

fn push_metrics(
    sink: &Mutex<Vec<Export>>,
    headers: &HeaderMap,
    request: ExportMetricsServiceRequest,
) {
    let mut export = empty_export(headers);
    for resource_metrics in request.resource_metrics {
        let attributes = resource_metrics.resource.map(|r| r.attributes);
        add_resource(&mut export, attributes.unwrap_or_default());
        for scope in resource_metrics.scope_metrics {
            export.metrics.extend(scope.metrics);
        }
    }
    sink.lock().unwrap().push(export);
}

fn empty_export(headers: &HeaderMap) -> Export {
    Export {
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into(),
                )
            })
            .collect(),
        resource: BTreeMap::new(),
        span_names: Vec::new(),
        metrics: Vec::new(),
    }
}

fn add_resource(
    export: &mut Export,
    attributes: Vec<opentelemetry_proto::tonic::common::v1::KeyValue>,
) {
    for kv in attributes {
        if let Some(Value::StringValue(s)) = kv.value.and_then(|v| v.value) {
            export.resource.insert(kv.key, s);
        }
    }
}

fn push(sink: &Mutex<Vec<Export>>, headers: &HeaderMap, request: ExportTraceServiceRequest) {
    let mut export = empty_export(headers);
    for spans in request.resource_spans {
        add_resource(
            &mut export,
            spans.resource.map(|r| r.attributes).unwrap_or_default(),
        );
        for scope in spans.scope_spans {
            export
                .span_names
                .extend(scope.spans.into_iter().map(|s| s.name));
        }
    }
    sink.lock().unwrap().push(export);
}

/// A CA and a server certificate for `127.0.0.1` it signed, made for one test; the CA's PEM
/// is written to [`TestPki::ca_path`], and a client certificate it signed (for mutual TLS)
/// to [`TestPki::client_cert_path`] and [`TestPki::client_key_path`].
pub struct TestPki {
    /// Directory holding `ca.pem`, `client.pem` and `client-key.pem`.
    pub dir: tempfile::TempDir,
    /// The CA certificate's file.
    pub ca_path: PathBuf,
    /// The client certificate's file (PEM), signed by the CA.
    pub client_cert_path: PathBuf,
    /// The client certificate's private key (PEM, PKCS#8).
    pub client_key_path: PathBuf,
    ca_cert_der: rustls::pki_types::CertificateDer<'static>,
    server_cert_der: rustls::pki_types::CertificateDer<'static>,
    server_key: Vec<u8>,
}

impl TestPki {
    /// Makes a fresh CA and a server certificate for `127.0.0.1` and `localhost`.
    pub fn new() -> anyhow::Result<Self> {
        use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "nanobot test CA");
        let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate()?)?;
        let server_key = KeyPair::generate()?;
        let server = CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])?
            .signed_by(&server_key, &ca)?;
        let client_key = KeyPair::generate()?;
        let mut client_params = CertificateParams::new(Vec::<String>::new())?;
        client_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "nanobot 客户端 🔐");
        client_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let client = client_params.signed_by(&client_key, &ca)?;
        let dir = tempfile::tempdir()?;
        let ca_path = dir.path().join("ca.pem");
        std::fs::write(&ca_path, ca.pem()).context("write ca.pem")?;
        let client_cert_path = dir.path().join("client.pem");
        std::fs::write(&client_cert_path, client.pem()).context("write client.pem")?;
        let client_key_path = dir.path().join("client-key.pem");
        std::fs::write(&client_key_path, client_key.serialize_pem()).context("write the key")?;
        Ok(Self {
            dir,
            ca_path,
            client_cert_path,
            client_key_path,
            ca_cert_der: ca.der().clone(),
            server_cert_der: server.der().clone(),
            server_key: server_key.serialize_der(),
        })
    }

    fn server_key_der(&self) -> rustls::pki_types::PrivateKeyDer<'static> {
        rustls::pki_types::PrivateKeyDer::Pkcs8(self.server_key.clone().into())
    }
}
