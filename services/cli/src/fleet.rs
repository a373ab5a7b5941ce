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
//! - `start`: starting NATS, Redis, the local model and the roles, or finding them running.
//! - `confine`: what each role gets by default (its own logins, the exec sandbox).

mod confine;
mod launch;
mod pidfile;
mod start;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;

use nanobot_runtime::config::Config;
use nanobot_runtime::config::secrets::FleetSecrets;

use launch::RunDirs;
use pidfile::StopOutcome;

/// The role binaries, in start order, with the port of their health probe.
pub const ROLES: [(&str, u16); 5] = [
    ("gateway", 18791),
    ("agent", 18792),
    ("tools", 18793),
    ("memory", 18794),
    ("cron", 18795),
];

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
///
/// NATS and Redis started here require the local fleet's generated credentials (`secrets`,
/// which `cfg` already carries for loopback URLs: see `nanobot_runtime::config::secrets`).
pub async fn up(opts: &UpOptions, cfg: &Config, secrets: &FleetSecrets) -> anyhow::Result<()> {
    let dirs = RunDirs::create(&opts.run_dir)?;
    let http = reqwest::Client::builder()
        .no_proxy()
        .build()
        .context("build http client")?;
    let mut rows = Vec::new();

    rows.push(start::start_nats(&dirs, cfg, secrets, &http).await?);
    init_streams(cfg).await?;
    rows.push(start::start_redis(&dirs, cfg, secrets, &http).await?);
    if wants_local_model(cfg, opts.with_model) {
        rows.push(start::start_model(&dirs, cfg, &http).await?);
    }
    rows.extend(start::start_roles(&dirs, opts, cfg, secrets, &http).await?);

    print_summary(&rows, &dirs);
    for line in confine::summary(secrets, cfg) {
        println!("{line}");
    }
    Ok(())
}

/// Creates or updates the JetStream streams (`nanobot bus init`) before any role starts, since
/// roles only check them.
async fn init_streams(cfg: &Config) -> anyhow::Result<()> {
    let cancel = tokio_util::sync::CancellationToken::new();
    let bus = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        nanobot_runtime::bus::connect(
            &cfg.bus,
            nanobot_proto::subjects::Role::Cli,
            "nanobot-up",
            &cancel,
        ),
    )
    .await
    .context("connect to nats to create the streams: timed out")?
    .context("connect to nats to create the streams")?;
    nanobot_runtime::bus::init_streams(&bus.js, cfg.bus.stream_replicas)
        .await
        .context("create the jetstream streams")
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
