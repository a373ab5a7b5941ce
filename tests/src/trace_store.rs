//! A real, queryable trace store on loopback for the tracing tests: Arize Phoenix (PyPI
//! `arize-phoenix`, installed by `scripts/deps.sh traces`, part of `make deps-test`), started
//! once per test binary ([`TraceStore::shared`]) with its SQLite database in a temporary
//! directory. The fleet exports to its OTLP/gRPC port; tests read the stored spans back
//! through its REST API (`GET /v1/projects/default/spans`). A missing Phoenix fails the test
//! with the install hint.
//!
//! Phoenix runs under a `sh` that kills it when its standard input closes, which happens when
//! the test process exits (a static is never dropped).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use nanobot_tests::trace_store::TraceStore;
//! let store = TraceStore::shared().await?;
//! let endpoint = store.otlp_endpoint(); // telemetry.otlpEndpoint
//! let spans = store.spans_of_trace("0af7651916cd43dd8448eb211c80319c").await?;
//! # Ok(()) }
//! ```

use std::process::{Child, ChildStdin};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context as _;
use serde_json::Value;
use tokio::sync::OnceCell;

use nanobot_runtime::testsuite::{find_server_binary, free_port, wait_until};

/// How long Phoenix gets to answer `/healthz` (about 15 s warm, more on a first start).
const START: Duration = Duration::from_secs(120);

/// The project spans land in when their resource names none.
const PROJECT: &str = "default";

/// The running trace store.
#[derive(Debug)]
pub struct TraceStore {
    dir: tempfile::TempDir,
    http_port: u16,
    grpc_port: u16,
    http: reqwest::Client,
    /// Phoenix's wrapper; its stdin closes when the process exits.
    _proc: Mutex<(Child, ChildStdin)>,
}

/// One span as the store returns it.
#[derive(Debug, Clone)]
pub struct StoredSpan {
    /// Span name (`chat test-model`, `turn`, …).
    pub name: String,
    /// Trace id, 32 hex digits.
    pub trace_id: String,
    /// Span id, 16 hex digits.
    pub span_id: String,
    /// The parent's span id; `None` for a root.
    pub parent_id: Option<String>,
    /// The attributes as stored (Phoenix nests dotted keys: `{"gen_ai": {"usage": …}}`).
    pub attributes: Value,
}

impl StoredSpan {
    /// Returns attribute `key` (dotted, as exported), if stored.
    pub fn attr(&self, key: &str) -> Option<&Value> {
        if let Some(flat) = self.attributes.get(key) {
            return Some(flat);
        }
        key.split('.')
            .try_fold(&self.attributes, |node, part| node.get(part))
    }
}

static SHARED: OnceCell<TraceStore> = OnceCell::const_new();

impl TraceStore {
    /// Returns the store of this test binary, starting it on first use.
    pub async fn shared() -> anyhow::Result<&'static TraceStore> {
        SHARED.get_or_try_init(Self::start).await
    }

    async fn start() -> anyhow::Result<Self> {
        let phoenix = find_server_binary("phoenix", "PHOENIX")
            .context("Phoenix is the trace store of the tracing tests: run scripts/deps.sh traces (make deps-test)")?;
        let dir = tempfile::Builder::new().prefix("trace-store-").tempdir()?;
        let (http_port, grpc_port) = (free_port()?, free_port()?);
        let env = [
            format!("PHOENIX_WORKING_DIR={}", dir.path().display()),
            "PHOENIX_HOST=127.0.0.1".into(),
            format!("PHOENIX_PORT={http_port}"),
            format!("PHOENIX_GRPC_PORT={grpc_port}"),
            "PHOENIX_TELEMETRY_ENABLED=false".into(),
        ];
        let mut args: Vec<String> = env.into();
        args.extend([phoenix.display().to_string(), "serve".into()]);
        let proc = crate::mail_servers::supervised(
            std::path::Path::new("env"),
            &args,
            &dir.path().join("phoenix.out"),
            // The directory outlives the static (never dropped): the wrapper removes it.
            Some(dir.path()),
        )?;
        let store = Self {
            dir,
            http_port,
            grpc_port,
            http: reqwest::Client::new(),
            _proc: Mutex::new(proc),
        };
        let health = format!("{}/healthz", store.base());
        let ready = wait_until(
            || {
                let (http, url) = (store.http.clone(), health.clone());
                async move {
                    http.get(&url)
                        .send()
                        .await
                        .is_ok_and(|r| r.status().is_success())
                }
            },
            START,
        )
        .await;
        if ready.is_err() {
            anyhow::bail!(
                "Phoenix not ready on port {http_port} within {START:?}: {}",
                store.log()
            );
        }
        Ok(store)
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    /// Returns Phoenix's output so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("phoenix.out")).unwrap_or_default()
    }

    /// Returns the OTLP/gRPC endpoint (`telemetry.otlpEndpoint`).
    pub fn otlp_endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }

    /// Returns the stored spans matching `query` (`name=turn`, `trace_id=…`), every page.
    pub async fn spans(&self, query: &[(&str, &str)]) -> anyhow::Result<Vec<StoredSpan>> {
        let base = format!("{}/v1/projects/{PROJECT}/spans", self.base());
        let mut out = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut url = url::Url::parse(&base)?;
            url.query_pairs_mut()
                .extend_pairs(query)
                .append_pair("limit", "1000")
                .extend_pairs(cursor.as_deref().map(|c| ("cursor", c)));
            let reply = self.http.get(url).send().await?;
            if reply.status() == reqwest::StatusCode::NOT_FOUND {
                // No span has arrived yet, so the project does not exist yet.
                return Ok(out);
            }
            let body: Value = reply.error_for_status()?.json().await?;
            for span in body["data"].as_array().context("no data in the answer")? {
                out.push(stored(span).with_context(|| format!("unexpected span {span}"))?);
            }
            match body["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_string()),
                None => return Ok(out),
            }
        }
    }

    /// Returns every stored span of `trace_id`.
    pub async fn spans_of_trace(&self, trace_id: &str) -> anyhow::Result<Vec<StoredSpan>> {
        self.spans(&[("trace_id", trace_id)]).await
    }
}

fn stored(span: &Value) -> Option<StoredSpan> {
    let text = |v: &Value| v.as_str().map(str::to_string);
    Some(StoredSpan {
        name: text(&span["name"])?,
        trace_id: text(&span["context"]["trace_id"])?,
        span_id: text(&span["context"]["span_id"])?,
        parent_id: text(&span["parent_id"]).filter(|p| !p.is_empty()),
        attributes: span["attributes"].clone(),
    })
}
