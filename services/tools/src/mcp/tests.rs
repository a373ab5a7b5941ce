//! MCP against the real npm servers (`@modelcontextprotocol/server-everything` over stdio,
//! streamable HTTP and SSE, `@modelcontextprotocol/server-filesystem`), installed by
//! `scripts/deps.sh mcp` (part of `make test`). A missing server fails the test with the
//! install hint.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Server, ServerConfig, Transport, tool_name};
use crate::net::Cidr;
use crate::registry::{Registry, ToolContext, ToolOutput};
use crate::sandbox::Sandbox;
use crate::web::guard::Guard;

/// Returns an installed npm server binary; panics with the install hint when it is missing
/// (`make test` installs it, so a missing server is a failure, not a skip).
fn npm_bin(name: &str) -> PathBuf {
    let cache = std::env::var("NANOBOT_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
            Path::new(&home).join(".cache/nanobot")
        });
    let bin = cache.join("npm/node_modules/.bin").join(name);
    let node = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        node && bin.exists(),
        "{} or node missing; run `scripts/deps.sh mcp` (needs node and npm)",
        bin.display()
    );
    bin
}

fn stdio(bin: &Path, args: &[&str]) -> ServerConfig {
    ServerConfig {
        command: bin.display().to_string(),
        args: args.iter().map(|a| a.to_string()).collect(),
        ..ServerConfig::default()
    }
}

async fn connect(name: &str, cfg: ServerConfig, guard: Guard) -> (Arc<Server>, Registry) {
    let server = Arc::new(Server::new(name.into(), cfg, guard));
    let tools = server.discover().await.expect("the server connects");
    let mut registry = Registry::default();
    for tool in tools {
        registry.register(tool);
    }
    (server, registry)
}

fn ctx() -> ToolContext {
    ToolContext {
        sandbox: Sandbox::new(Path::new("/tmp"), false),
        session_key: "cli:test".into(),
        origin: Default::default(),
        file_reads: Vec::new(),
    }
}

async fn call(registry: &Registry, name: &str, args: Value) -> ToolOutput {
    registry.call(&ctx(), name, &args.to_string()).await
}

#[test]
fn names_are_sanitised_and_limited_as_upstream() {
    assert_eq!(
        tool_name("mcp_my server_get.weather"),
        "mcp_my_server_get_weather"
    );
    assert_eq!(tool_name("mcp_a__b___c-d"), "mcp_a_b_c-d");
    let long = tool_name(&format!("mcp_srv_{}", "x".repeat(80)));
    assert_eq!(long.len(), 64);
    assert!(
        long.starts_with("mcp_srv_xxx") && long.as_bytes()[55] == b'_',
        "{long}"
    );
    assert_ne!(long, tool_name(&format!("mcp_srv_{}", "x".repeat(81))));

    let cfg = |v: Value| serde_json::from_value::<ServerConfig>(v).unwrap();
    assert_eq!(
        cfg(json!({"command": "npx"})).transport(),
        Some(Transport::Stdio)
    );
    assert_eq!(
        cfg(json!({"url": "http://h/sse/"})).transport(),
        Some(Transport::Sse)
    );
    assert_eq!(
        cfg(json!({"url": "http://h/mcp"})).transport(),
        Some(Transport::StreamableHttp)
    );
    assert_eq!(
        cfg(json!({"type": "stdio", "url": "http://h/sse"})).transport(),
        Some(Transport::Stdio)
    );
    assert_eq!(cfg(json!({})).transport(), None);
    let parsed = cfg(json!({"url": "u", "toolTimeout": 5, "enabled_tools": ["echo"]}));
    assert_eq!(parsed.timeout(), Duration::from_secs(5));
    assert!(!parsed.allows_all());
    assert!(ServerConfig::default().allows_all());
}

#[test]
fn schemas_are_normalised_for_providers() {
    let schema = super::tool::normalize_schema(json!({
        "type": "object",
        "properties": {
            "a": {"type": ["string", "null"]},
            "b": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]},
            "c": {"type": "object"},
        }
    }));
    assert_eq!(
        schema["properties"]["a"],
        json!({"type": "string", "nullable": true})
    );
    assert_eq!(
        schema["properties"]["b"],
        json!({"type": "integer", "minimum": 1, "nullable": true})
    );
    assert_eq!(
        schema["properties"]["c"],
        json!({"type": "object", "properties": {}, "required": []})
    );
    assert_eq!(schema["required"], json!([]));
    assert_eq!(
        super::tool::normalize_schema(Value::Null),
        json!({"type": "object", "properties": {}})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_server_tools_resources_and_prompts_are_served() {
    let bin = npm_bin("mcp-server-everything");
    let mut cfg = stdio(&bin, &[]);
    cfg.env = BTreeMap::from([("NANOBOT_MCP_TEST".into(), "visible".into())]);
    let (_server, registry) = connect("everything", cfg, Guard::default()).await;
    let names = registry.names();
    for expected in [
        "mcp_everything_echo",
        "mcp_everything_get-sum",
        "mcp_everything_get-env",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing from {names:?}"
        );
    }
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("mcp_everything_resource_")),
        "{names:?}"
    );
    assert!(
        names
            .iter()
            .any(|n| n.starts_with("mcp_everything_prompt_")),
        "{names:?}"
    );

    let echo = call(
        &registry,
        "mcp_everything_echo",
        json!({"message": "hello"}),
    )
    .await;
    assert_eq!(echo, ToolOutput::text("Echo: hello"));
    let sum = call(
        &registry,
        "mcp_everything_get-sum",
        json!({"a": 2, "b": "3"}),
    )
    .await;
    assert!(sum.content.contains('5') && !sum.is_error, "{sum:?}");
    let invalid = call(&registry, "mcp_everything_echo", json!({})).await;
    assert_eq!(
        invalid.content,
        "Error: Invalid parameters for tool 'mcp_everything_echo': missing required message"
    );

    // The child gets a minimal environment plus `env`, never the executor's own.
    let env = call(&registry, "mcp_everything_get-env", json!({})).await;
    let vars: Value = serde_json::from_str(&env.content).unwrap();
    assert_eq!(vars["NANOBOT_MCP_TEST"], "visible");
    assert!(vars.get("PATH").is_some());
    assert!(
        vars.get("CARGO_PKG_NAME").is_none(),
        "executor env leaked: {vars}"
    );

    let image = call(&registry, "mcp_everything_get-tiny-image", json!({})).await;
    let blocks: Value = serde_json::from_str(&image.blocks_json).unwrap();
    assert!(
        blocks[0]["image_url"]["url"]
            .as_str()
            .unwrap()
            .starts_with("data:image/png;base64,")
    );

    let resource = names
        .iter()
        .find(|n| n.starts_with("mcp_everything_resource_"))
        .unwrap();
    let read = call(&registry, resource, json!({})).await;
    assert!(!read.is_error && read.content != "(no output)", "{read:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn enabled_tools_select_by_raw_or_wrapped_name_and_hide_resources() {
    let bin = npm_bin("mcp-server-everything");
    let mut cfg = stdio(&bin, &[]);
    cfg.enabled_tools = vec![
        "echo".into(),
        "mcp_everything_get-sum".into(),
        "nope".into(),
    ];
    let (_server, registry) = connect("everything", cfg, Guard::default()).await;
    assert_eq!(
        registry.names(),
        ["mcp_everything_echo", "mcp_everything_get-sum"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_time_out_and_a_dead_child_is_replaced() {
    let bin = npm_bin("mcp-server-everything");
    let mut cfg = stdio(&bin, &[]);
    cfg.tool_timeout = 1;
    let (server, registry) = connect("everything", cfg, Guard::default()).await;
    let slow = call(
        &registry,
        "mcp_everything_trigger-long-running-operation",
        json!({"duration": 3, "steps": 1}),
    )
    .await;
    assert_eq!(
        slow,
        ToolOutput::error("(MCP tool call timed out after 1s)")
    );

    let first = server.child_pid();
    assert!(first > 0);
    let pid = rustix::process::Pid::from_raw(first as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    let echo = call(
        &registry,
        "mcp_everything_echo",
        json!({"message": "again"}),
    )
    .await;
    assert_eq!(echo, ToolOutput::text("Echo: again"));
    assert_ne!(server.child_pid(), first, "a new child serves the call");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_errors_reconnect_then_retry_once_then_give_up() {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use rmcp::ServiceError;

    use super::server::Failure;

    let bin = npm_bin("mcp-server-everything");
    let server = Arc::new(Server::new(
        "everything".into(),
        stdio(&bin, &[]),
        Guard::default(),
    ));
    server.discover().await.unwrap();
    let first_child = server.child_pid();

    // A closed transport once: the session is reopened and the call goes through.
    let attempts = AtomicUsize::new(0);
    let recovered = server
        .request(|_session| {
            let attempt = attempts.fetch_add(1, Ordering::SeqCst);
            async move {
                match attempt {
                    0 => Err(ServiceError::TransportClosed),
                    _ => Ok("done"),
                }
            }
        })
        .await;
    assert!(matches!(recovered, Ok("done")), "{recovered:?}");
    assert_eq!(attempts.load(Ordering::SeqCst), 2);
    assert_ne!(server.child_pid(), first_child, "the session was reopened");

    // Still failing: reconnect, one retry after a pause, then upstream's message.
    let attempts = AtomicUsize::new(0);
    let started = Instant::now();
    let failed = server
        .request(|_session| {
            attempts.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), _>(ServiceError::TransportClosed) }
        })
        .await;
    assert!(
        matches!(failed, Err(Failure::AfterRetry("TransportClosed"))),
        "{failed:?}"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 3);
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "the retry waits first"
    );

    // A protocol error is not retried.
    let attempts = AtomicUsize::new(0);
    let refused = server
        .request(|_session| {
            attempts.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), _>(ServiceError::UnexpectedResponse) }
        })
        .await;
    assert!(
        matches!(refused, Err(Failure::Failed("UnexpectedResponse", _))),
        "{refused:?}"
    );
    assert_eq!(attempts.load(Ordering::SeqCst), 1);
}

/// `server-everything streamableHttp` (or `sse`) on a free loopback port, killed on drop.
struct HttpServer {
    child: Child,
    port: u16,
}

impl HttpServer {
    fn start(bin: &Path, port: u16) -> Self {
        Self::start_as(bin, "streamableHttp", port)
    }

    fn start_as(bin: &Path, transport: &str, port: u16) -> Self {
        let child = Command::new(bin)
            .arg(transport)
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn server-everything");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "server-everything never listened on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Self { child, port }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http_servers_are_ssrf_guarded_and_survive_a_restart() {
    let bin = npm_bin("mcp-server-everything");
    let http = HttpServer::start(&bin, free_port());
    let cfg = ServerConfig {
        url: format!("http://127.0.0.1:{}/mcp", http.port),
        enabled_tools: vec!["echo".into()],
        tool_timeout: 3,
        ..ServerConfig::default()
    };
    let refused = Arc::new(Server::new("remote".into(), cfg.clone(), Guard::default()));
    let error = refused.discover().await.unwrap_err().to_string();
    assert!(
        error.contains(
            "blocked unsafe url (Blocked: 127.0.0.1 resolves to private/internal address 127.0.0.1)"
        ),
        "{error}"
    );

    let guard = Guard::new(vec![Cidr::parse("127.0.0.1/32").unwrap()]);
    let (_server, registry) = connect("remote", cfg, guard).await;
    assert_eq!(registry.names(), ["mcp_remote_echo"]);
    let echo = call(
        &registry,
        "mcp_remote_echo",
        json!({"message": "over http"}),
    )
    .await;
    assert_eq!(echo, ToolOutput::text("Echo: over http"));

    // The server restarts: its sessions are gone (it rejects the old one without naming the
    // request, so the call times out); the probe finds the session dead and reconnects.
    let port = http.port;
    drop(http);
    let _restarted = HttpServer::start(&bin, port);
    let again = call(
        &registry,
        "mcp_remote_echo",
        json!({"message": "after restart"}),
    )
    .await;
    assert_eq!(again, ToolOutput::text("Echo: after restart"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filesystem_server_reads_files_in_its_allowed_directory_and_readers_are_read_only() {
    let bin = npm_bin("mcp-server-filesystem");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("note.txt"), "from the filesystem server").unwrap();
    let root = dir.path().canonicalize().unwrap();
    let cfg = stdio(&bin, &[root.to_str().unwrap()]);
    let (_server, registry) = connect("fs", cfg, Guard::default()).await;
    let names = registry.names();
    assert!(
        names.iter().any(|n| n == "mcp_fs_read_text_file"),
        "{names:?}"
    );
    // `readOnlyHint` decides whether the runner may retry a call on another executor.
    let read_only = |name: &str| {
        let specs = registry.specs();
        let spec = specs.iter().find(|s| s.name == name);
        spec.unwrap_or_else(|| panic!("{name} listed")).read_only
    };
    assert!(read_only("mcp_fs_read_text_file"));
    assert!(read_only("mcp_fs_list_directory"));
    assert!(!read_only("mcp_fs_write_file"));
    let path = root.join("note.txt").display().to_string();
    let read = call(&registry, "mcp_fs_read_text_file", json!({"path": path})).await;
    assert_eq!(read, ToolOutput::text("from the filesystem server"));
    let outside = call(
        &registry,
        "mcp_fs_read_text_file",
        json!({"path": "/etc/hostname"}),
    )
    .await;
    assert!(outside.is_error, "{outside:?}");
}

fn loopback() -> Guard {
    Guard::new(vec![Cidr::parse("127.0.0.1/32").unwrap()])
}

#[test]
fn reconnect_attempts_back_off_from_one_second_doubling_up_to_a_minute() {
    let secs: Vec<u64> = [1, 2, 3, 4, 6, 7, 40]
        .map(|n| super::backoff(n).as_secs())
        .to_vec();
    assert_eq!(secs, [1, 2, 4, 8, 32, 60, 60]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_servers_are_ssrf_guarded_serve_tools_and_are_reconnected_after_a_restart() {
    let bin = npm_bin("mcp-server-everything");
    let sse = HttpServer::start_as(&bin, "sse", free_port());
    // A URL ending in /sse selects the SSE transport.
    let cfg = ServerConfig {
        url: format!("http://127.0.0.1:{}/sse", sse.port),
        enabled_tools: vec!["echo".into()],
        tool_timeout: 3,
        ..ServerConfig::default()
    };
    let refused = Arc::new(Server::new("remote".into(), cfg.clone(), Guard::default()));
    let error = refused.discover().await.unwrap_err().to_string();
    assert!(
        error.contains(
            "blocked unsafe url (Blocked: 127.0.0.1 resolves to private/internal address 127.0.0.1)"
        ),
        "{error}"
    );

    let (server, registry) = connect("remote", cfg, loopback()).await;
    assert_eq!(registry.names(), ["mcp_remote_echo"]);
    let echo = call(&registry, "mcp_remote_echo", json!({"message": "over sse"})).await;
    assert_eq!(echo, ToolOutput::text("Echo: over sse"));

    // The server goes away: the call fails at once with the reason, and the next calls do
    // not try again before the backoff has passed.
    let port = sse.port;
    drop(sse);
    let down = call(&registry, "mcp_remote_echo", json!({"message": "down"})).await;
    assert_eq!(
        down,
        ToolOutput::error(
            "(MCP tool call failed: server 'remote' is unreachable, next reconnect attempt in 1s)"
        )
    );
    assert_eq!(server.failed_attempts(), 1);
    for _ in 0..3 {
        let backing_off = call(&registry, "mcp_remote_echo", json!({"message": "down"})).await;
        assert!(
            backing_off.is_error && backing_off.content.contains("is unreachable"),
            "{backing_off:?}"
        );
    }
    assert_eq!(server.failed_attempts(), 1, "no attempt while backing off");

    // It comes back: a later call reconnects and goes through.
    let _restarted = HttpServer::start_as(&bin, "sse", port);
    nanobot_runtime::testsuite::wait_until(
        || async {
            call(&registry, "mcp_remote_echo", json!({"message": "back"})).await
                == ToolOutput::text("Echo: back")
        },
        Duration::from_secs(30),
    )
    .await
    .expect("a call after the restart reconnects");
    assert_eq!(
        server.failed_attempts(),
        0,
        "reaching the server ends the outage"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_down_at_start_are_reached_later_by_a_call_or_the_tool_list() {
    let bin = npm_bin("mcp-server-everything");
    let (called_port, listed_port) = (free_port(), free_port());
    let servers = BTreeMap::from([
        (
            "called".to_string(),
            json!({"url": format!("http://127.0.0.1:{called_port}/sse"), "enabledTools": ["echo"]}),
        ),
        (
            "listed".to_string(),
            json!({"type": "streamableHttp", "url": format!("http://127.0.0.1:{listed_port}/mcp"), "enabledTools": ["echo"]}),
        ),
    ]);
    let (tools, pending) = super::connect_all(&servers, &loopback()).await;
    assert!(tools.is_empty(), "nothing is up yet");
    let mut registry = Registry::default();
    registry.set_pending_mcp(pending);
    assert!(registry.names().is_empty());

    // A call to a tool of a server not reached yet tries to reach it, and says why not.
    let down = call(&registry, "mcp_called_echo", json!({"message": "hi"})).await;
    assert_eq!(
        down,
        ToolOutput::error(
            "(MCP tool call failed: server 'called' is unreachable, next reconnect attempt in 1s)"
        )
    );
    // A name no configured server owns stays an unknown tool.
    let unknown = call(&registry, "mcp_other_echo", json!({})).await;
    assert!(
        unknown
            .content
            .starts_with("Error: Tool 'mcp_other_echo' not found"),
        "{unknown:?}"
    );

    let _called = HttpServer::start_as(&bin, "sse", called_port);
    nanobot_runtime::testsuite::wait_until(
        || async {
            call(&registry, "mcp_called_echo", json!({"message": "hi"})).await
                == ToolOutput::text("Echo: hi")
        },
        Duration::from_secs(30),
    )
    .await
    .expect("a call reaches the server once it is up");
    assert_eq!(registry.names(), ["mcp_called_echo"]);

    // The tool list retries the others in the background and lists them once reached.
    let _listed = HttpServer::start(&bin, listed_port);
    nanobot_runtime::testsuite::wait_until(
        || async {
            registry.pending_mcp().reach_in_background();
            registry.specs().iter().any(|s| s.name == "mcp_listed_echo")
        },
        Duration::from_secs(30),
    )
    .await
    .expect("the tool list reaches the server once it is up");
    let echo = call(&registry, "mcp_listed_echo", json!({"message": "listed"})).await;
    assert_eq!(echo, ToolOutput::text("Echo: listed"));
}

/// Method and `X-Api-Key` header of each request a [`Recorder`] forwarded.
type Seen = Arc<std::sync::Mutex<Vec<(String, Option<String>)>>>;

/// A recording reverse proxy in front of a real server: notes each request's method and
/// `X-Api-Key` header, then forwards it and streams the answer back.
struct Recorder {
    seen: Seen,
    port: u16,
}

impl Recorder {
    async fn start(upstream: u16) -> Self {
        use axum::body::Body;
        use axum::extract::{Request, State};
        use axum::response::Response;

        async fn forward(State((seen, upstream)): State<(Seen, u16)>, req: Request) -> Response {
            let key = req.headers().get("x-api-key");
            let key = key.and_then(|v| v.to_str().ok()).map(str::to_string);
            seen.lock().unwrap().push((req.method().to_string(), key));
            let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
            let url = format!("http://127.0.0.1:{upstream}{path}");
            let (method, headers) = (req.method().clone(), req.headers().clone());
            let body = axum::body::to_bytes(req.into_body(), usize::MAX)
                .await
                .unwrap();
            let answer = reqwest::Client::new()
                .request(method, url)
                .headers(headers)
                .body(body)
                .send()
                .await
                .unwrap();
            let mut response = Response::builder().status(answer.status());
            for (name, value) in answer.headers() {
                if name != "transfer-encoding" && name != "content-length" {
                    response = response.header(name, value);
                }
            }
            response
                .body(Body::from_stream(answer.bytes_stream()))
                .unwrap()
        }

        let seen = Seen::default();
        let app = axum::Router::new()
            .fallback(forward)
            .with_state((seen.clone(), upstream));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Self { seen, port }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_servers_get_the_configured_headers_on_the_stream_and_on_every_message() {
    let bin = npm_bin("mcp-server-everything");
    let sse = HttpServer::start_as(&bin, "sse", free_port());
    let recorder = Recorder::start(sse.port).await;
    let cfg = ServerConfig {
        kind: Some("sse".into()),
        url: format!("http://127.0.0.1:{}/sse", recorder.port),
        headers: BTreeMap::from([("X-Api-Key".into(), "secret-1".into())]),
        enabled_tools: vec!["echo".into()],
        ..ServerConfig::default()
    };
    let (_server, registry) = connect("keyed", cfg, loopback()).await;
    let echo = call(&registry, "mcp_keyed_echo", json!({"message": "with key"})).await;
    assert_eq!(echo, ToolOutput::text("Echo: with key"));
    let seen = recorder.seen.lock().unwrap().clone();
    assert_eq!(seen[0], ("GET".to_string(), Some("secret-1".to_string())));
    assert!(
        seen.len() >= 3,
        "initialize, initialized, tools/list, call: {seen:?}"
    );
    assert!(
        seen[1..]
            .iter()
            .all(|s| *s == ("POST".to_string(), Some("secret-1".to_string()))),
        "{seen:?}"
    );
}
