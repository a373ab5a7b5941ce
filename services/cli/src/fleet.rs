//! `nanobot up` / `nanobot down`: the whole local fleet as separate OS processes on 127.0.0.1.
//!
//! `up` starts NATS (JetStream), Redis, the local default model (when no provider is
//! configured) and every role binary, each in its own process group, with its output in
//! `<run>/logs/<name>.log` and its pid in `<run>/pids/<name>.pid`. `down` stops exactly the
//! pids in those files: roles first, then the model, Redis and NATS.
//!
//! # Layout
//! - `launch`: locating binaries, endpoints, spawning detached processes, readiness probes.
//! - `pidfile`: pid files, liveness, stopping by pid.

mod launch;
mod pidfile;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use anyhow::Context as _;

use nanobot_runtime::config::Config;

use launch::{Endpoint, Probe, RunDirs};
use pidfile::StopOutcome;

/// The role binaries, in start order, with the port of their health probe.
pub const ROLES: [(&str, u16); 5] = [
    ("gateway", 18791),
    ("agent", 18792),
    ("tools", 18793),
    ("memory", 18794),
    ("cron", 18795),
];

/// The python script that serves the local model (kept in `scripts/`, embedded here so the
/// binary works from anywhere).
const LOCAL_MODEL_PY: &str = include_str!("../../../scripts/local_model.py");

/// Grace period between SIGTERM and SIGKILL in `down`.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Options of `nanobot up`.
#[derive(Debug, Clone)]
pub struct UpOptions {
    /// Config file passed to every role as `--config` (roles use their default when `None`).
    pub config: Option<PathBuf>,
    /// Where logs, pid files and NATS/Redis data go. Default `~/.nanobot/run`.
    pub run_dir: PathBuf,
    /// Directory of the `nanobot-*` binaries. Default: the directory of the running `nanobot`.
    pub bin_dir: PathBuf,
    /// Start the local model: `Some(true)` always, `Some(false)` never, `None` when no
    /// provider has an `apiKey` and `providers.custom.apiBase` is unset.
    pub with_model: Option<bool>,
}

impl UpOptions {
    /// Returns the options with the default run and binary directories.
    pub fn new(config: Option<PathBuf>) -> Self {
        Self {
            config,
            run_dir: default_run_dir(),
            bin_dir: default_bin_dir(),
            with_model: None,
        }
    }
}

/// Returns `~/.nanobot/run`.
pub fn default_run_dir() -> PathBuf {
    dirs::home_dir()
        .unwrap_or_else(|| PathBuf::from("."))
        .join(".nanobot/run")
}

/// Returns the directory of the running executable (symlinks resolved), or `.`.
pub fn default_bin_dir() -> PathBuf {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.canonicalize().ok())
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Returns whether `up` should start the local model for `cfg`.
pub fn wants_local_model(cfg: &Config, with_model: Option<bool>) -> bool {
    if let Some(forced) = with_model {
        return forced;
    }
    let has_key = cfg.providers.values().any(|p| !p.api_key.trim().is_empty());
    let has_custom_base = cfg
        .providers
        .get("custom")
        .and_then(|p| p.api_base.as_deref())
        .is_some_and(|base| !base.trim().is_empty());
    !has_key && !has_custom_base
}

/// One line of the summary table.
#[derive(Debug)]
struct Row {
    name: String,
    pid: Option<i32>,
    addr: String,
    status: &'static str,
}

/// Starts whatever part of the local fleet is not running yet, waits until each piece is
/// ready and prints a summary.
pub async fn up(opts: &UpOptions, cfg: &Config) -> anyhow::Result<()> {
    let dirs = RunDirs::create(&opts.run_dir)?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .context("build http client")?;
    let mut rows = Vec::new();

    rows.push(start_nats(&dirs, cfg, &http).await?);
    rows.push(start_redis(&dirs, cfg, &http).await?);
    if wants_local_model(cfg, opts.with_model) {
        rows.push(start_model(&dirs, cfg, &http).await?);
    }
    rows.extend(start_roles(&dirs, opts, &http).await?);

    print_summary(&rows, &dirs);
    Ok(())
}

/// Stops every process recorded under `run_dir/pids`, roles first, then the model, Redis and
/// NATS; SIGKILLs what is still alive after 5 s and removes the pid files.
pub async fn down(run_dir: &Path) -> anyhow::Result<()> {
    let pids = run_dir.join("pids");
    let mut stopped = Vec::new();
    for phase in stop_phases(&pids)? {
        stopped.extend(pidfile::stop_all(&phase, STOP_GRACE).await);
    }
    if stopped.is_empty() {
        println!("nothing to stop (no pid files in {})", pids.display());
    }
    for s in &stopped {
        match s.outcome {
            StopOutcome::Terminated => println!("stopped {:<8} pid {}", s.name, s.pid),
            StopOutcome::Killed => println!(
                "killed  {:<8} pid {} (still running after {}s)",
                s.name,
                s.pid,
                STOP_GRACE.as_secs()
            ),
            StopOutcome::NotRunning => println!(
                "{:<16} pid {} was not running (stale pid file removed)",
                s.name, s.pid
            ),
        }
    }
    Ok(())
}

/// Groups the pid files into stop phases: roles (and anything unknown), model, redis, nats.
fn stop_phases(pids: &Path) -> anyhow::Result<Vec<Vec<(String, PathBuf)>>> {
    let mut names = Vec::new();
    match std::fs::read_dir(pids) {
        Ok(entries) => {
            for entry in entries.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "pid")
                    && let Some(stem) = path.file_stem().and_then(|s| s.to_str())
                {
                    names.push((stem.to_string(), path.clone()));
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("read {}", pids.display())),
    }
    names.sort();
    let last = ["model", "redis", "nats"];
    let mut phases = vec![
        names
            .iter()
            .filter(|(n, _)| !last.contains(&n.as_str()))
            .cloned()
            .collect(),
    ];
    for dep in last {
        phases.push(names.iter().filter(|(n, _)| n == dep).cloned().collect());
    }
    Ok(phases)
}

async fn start_nats(dirs: &RunDirs, cfg: &Config, http: &reqwest::Client) -> anyhow::Result<Row> {
    let ep = Endpoint::parse(&cfg.bus.url, 4222).context("read bus.url")?;
    let info = Probe::NatsInfo(ep.addr());
    if let Some(row) = already_up("nats", dirs, &ep, &info, http).await? {
        return Ok(row);
    }
    let bin = dependency("nats-server", "NATS_SERVER")?;
    let monitor = launch::port_or_free(ep.port.checked_add(4000))?;
    let store = dirs.root.join("nats");
    let args: Vec<OsString> = vec![
        "-js".into(),
        "-a".into(),
        "127.0.0.1".into(),
        "-p".into(),
        ep.port.to_string().into(),
        "-m".into(),
        monitor.to_string().into(),
        "-sd".into(),
        store.into_os_string(),
    ];
    let probe = Probe::Http(format!(
        "http://127.0.0.1:{monitor}/healthz?js-enabled-only=true"
    ));
    start_and_wait(
        dirs,
        "nats",
        &bin,
        &args,
        &probe,
        Duration::from_secs(20),
        http,
    )
    .await?;
    Ok(started_row("nats", dirs, &ep))
}

async fn start_redis(dirs: &RunDirs, cfg: &Config, http: &reqwest::Client) -> anyhow::Result<Row> {
    let ep = Endpoint::parse(&cfg.store.url, 6379).context("read store.url")?;
    let probe = Probe::RedisPing(ep.addr());
    if let Some(row) = already_up("redis", dirs, &ep, &probe, http).await? {
        return Ok(row);
    }
    let bin = dependency("redis-server", "REDIS_SERVER")?;
    let data = dirs.root.join("redis");
    std::fs::create_dir_all(&data).with_context(|| format!("create {}", data.display()))?;
    let args: Vec<OsString> = vec![
        "--port".into(),
        ep.port.to_string().into(),
        "--bind".into(),
        "127.0.0.1".into(),
        "--appendonly".into(),
        "yes".into(),
        "--dir".into(),
        data.into_os_string(),
    ];
    start_and_wait(
        dirs,
        "redis",
        &bin,
        &args,
        &probe,
        Duration::from_secs(20),
        http,
    )
    .await?;
    Ok(started_row("redis", dirs, &ep))
}

async fn start_model(dirs: &RunDirs, cfg: &Config, http: &reqwest::Client) -> anyhow::Result<Row> {
    let base = cfg.runner.local_model_url.trim_end_matches('/');
    let ep = Endpoint::parse(base, 80).context("read runner.localModelUrl")?;
    let probe = Probe::Http(format!("{base}/models"));
    if let Some(row) = already_up("model", dirs, &ep, &probe, http).await? {
        return Ok(row);
    }
    let venv = launch::cache_dir().join("venv");
    let python = venv.join("bin/python");
    let gguf = launch::find_gguf(&venv, std::env::var_os("NANOBOT_LOCAL_MODEL_GGUF"))?;
    let script = dirs.root.join("local_model.py");
    std::fs::write(&script, LOCAL_MODEL_PY)
        .with_context(|| format!("write {}", script.display()))?;
    let args: Vec<OsString> = vec![
        script.into_os_string(),
        "--model".into(),
        gguf.into_os_string(),
        "--host".into(),
        "127.0.0.1".into(),
        "--port".into(),
        ep.port.to_string().into(),
        "--alias".into(),
        cfg.runner.local_model.clone().into(),
    ];
    start_and_wait(
        dirs,
        "model",
        &python,
        &args,
        &probe,
        Duration::from_secs(120),
        http,
    )
    .await?;
    Ok(started_row("model", dirs, &ep))
}

async fn start_roles(
    dirs: &RunDirs,
    opts: &UpOptions,
    http: &reqwest::Client,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut starting: Vec<(String, Child, Probe)> = Vec::new();
    for (role, port) in ROLES {
        let name = role.to_string();
        let addr = format!("127.0.0.1:{port}");
        let probe = Probe::Http(format!("http://{addr}/ready"));
        let ep = Endpoint {
            host: "127.0.0.1".into(),
            port,
        };
        if let Some(row) = already_up(&name, dirs, &ep, &probe, http).await? {
            rows.push(row);
            continue;
        }
        let bin = opts.bin_dir.join(format!("nanobot-{role}"));
        if !bin.is_file() {
            anyhow::bail!(
                "{} not found; build the fleet first (`make build` or `cargo build --workspace --bins`)",
                bin.display()
            );
        }
        let mut args: Vec<OsString> = Vec::new();
        if let Some(config) = &opts.config {
            args.extend(["--config".into(), config.clone().into_os_string()]);
        }
        args.extend(["--health-addr".into(), addr.clone().into()]);
        let child = launch::spawn(dirs, &name, &bin, &args)?;
        rows.push(Row {
            name: name.clone(),
            pid: i32::try_from(child.id()).ok(),
            addr,
            status: "started",
        });
        starting.push((name, child, probe));
    }
    for (name, mut child, probe) in starting {
        launch::wait_ready(
            http,
            &name,
            Some(&mut child),
            &probe,
            &dirs.log(&name),
            Duration::from_secs(60),
        )
        .await
        .with_context(|| format!("start {name} (stop the rest with `nanobot down`)"))?;
    }
    Ok(rows)
}

/// Returns a row when `name` needs no start: its pid file points at a live process, or
/// something already answers `probe` on its (loopback or remote) endpoint.
async fn already_up(
    name: &str,
    dirs: &RunDirs,
    ep: &Endpoint,
    probe: &Probe,
    http: &reqwest::Client,
) -> anyhow::Result<Option<Row>> {
    if let Some(rec) = pidfile::live(&dirs.pids, name) {
        return Ok(Some(Row {
            name: name.into(),
            pid: Some(rec.pid),
            addr: ep.addr(),
            status: "running",
        }));
    }
    let answers = probe.check(http).await;
    if answers {
        return Ok(Some(Row {
            name: name.into(),
            pid: None,
            addr: ep.addr(),
            status: "external",
        }));
    }
    if !ep.is_local() {
        anyhow::bail!(
            "{name} at {} is not local and does not answer; start it yourself or point the config at 127.0.0.1",
            ep.addr()
        );
    }
    if launch::port_open(&ep.addr()).await {
        anyhow::bail!(
            "port {} is taken by a process that is not a working {name}; stop it or change the port in the config",
            ep.addr()
        );
    }
    Ok(None)
}

fn dependency(name: &str, env_var: &str) -> anyhow::Result<PathBuf> {
    let cache_bin = launch::cache_dir().join("bin");
    launch::find_binary(
        name,
        env_var,
        std::env::var_os(env_var),
        &cache_bin,
        std::env::var_os("PATH"),
    )
}

async fn start_and_wait(
    dirs: &RunDirs,
    name: &str,
    program: &Path,
    args: &[OsString],
    probe: &Probe,
    timeout: Duration,
    http: &reqwest::Client,
) -> anyhow::Result<()> {
    let mut child = launch::spawn(dirs, name, program, args)?;
    launch::wait_ready(
        http,
        name,
        Some(&mut child),
        probe,
        &dirs.log(name),
        timeout,
    )
    .await
}

fn started_row(name: &str, dirs: &RunDirs, ep: &Endpoint) -> Row {
    let pid = pidfile::read(&pidfile::path_of(&dirs.pids, name)).map(|r| r.pid);
    Row {
        name: name.into(),
        pid,
        addr: ep.addr(),
        status: "started",
    }
}

fn print_summary(rows: &[Row], dirs: &RunDirs) {
    println!(
        "{:<9} {:<8} {:<22} {:<9} LOG",
        "NAME", "PID", "ADDRESS", "STATUS"
    );
    for row in rows {
        let pid = row.pid.map_or_else(|| "-".to_string(), |p| p.to_string());
        let log = if row.pid.is_some() {
            dirs.log(&row.name).display().to_string()
        } else {
            "-".into()
        };
        println!(
            "{:<9} {:<8} {:<22} {:<9} {}",
            row.name, pid, row.addr, row.status, log
        );
    }
    println!(
        "pids in {}; stop everything with `nanobot down`",
        dirs.pids.display()
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(json: &str) -> Config {
        let env = std::collections::HashMap::new();
        nanobot_runtime::config::load_str(Some(json), Path::new("config.json"), &env).unwrap()
    }

    #[test]
    fn local_model_runs_only_without_a_configured_provider() {
        assert!(wants_local_model(&cfg("{}"), None));
        assert!(!wants_local_model(
            &cfg(r#"{"providers":{"openrouter":{"apiKey":"k"}}}"#),
            None
        ));
        let custom = cfg(r#"{"providers":{"custom":{"apiBase":"http://127.0.0.1:9/v1"}}}"#);
        assert!(!wants_local_model(&custom, None));
        assert!(wants_local_model(&custom, Some(true)));
        assert!(!wants_local_model(&cfg("{}"), Some(false)));
        assert!(wants_local_model(
            &cfg(r#"{"providers":{"custom":{"apiKey":" "}}}"#),
            None
        ));
    }

    #[test]
    fn stop_phases_put_roles_first_and_nats_last() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "nats",
            "redis",
            "model",
            "agent",
            "gateway",
            "extra",
            "notes.txt",
        ] {
            std::fs::write(dir.path().join(format!("{name}.pid")), "1\n").unwrap();
        }
        std::fs::write(dir.path().join("README"), "").unwrap();
        let phases = stop_phases(dir.path()).unwrap();
        let names: Vec<Vec<&str>> = phases
            .iter()
            .map(|p| p.iter().map(|(n, _)| n.as_str()).collect())
            .collect();
        assert_eq!(
            names,
            vec![
                vec!["agent", "extra", "gateway", "notes.txt"],
                vec!["model"],
                vec!["redis"],
                vec!["nats"]
            ]
        );
        assert!(
            stop_phases(&dir.path().join("missing"))
                .unwrap()
                .iter()
                .all(Vec::is_empty)
        );
    }

    #[tokio::test]
    async fn down_stops_a_recorded_process_and_nothing_else() {
        let run = tempfile::tempdir().unwrap();
        let pids = run.path().join("pids");
        std::fs::create_dir_all(&pids).unwrap();
        let mut ours = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut other = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        pidfile::write(&pids.join("agent.pid"), ours.id(), Path::new("sleep")).unwrap();

        down(run.path()).await.unwrap();

        assert!(ours.wait().is_ok_and(|s| !s.success()));
        assert!(
            other.try_wait().unwrap().is_none(),
            "a process without a pid file was touched"
        );
        assert!(!pids.join("agent.pid").exists());
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
