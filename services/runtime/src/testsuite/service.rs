//! A spawned binary whose stdout and stderr go to a log file, killed on drop.

use std::ffi::{OsStr, OsString};
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use rustix::process::{Pid, Signal, kill_process};

/// Returns the path of a workspace binary built next to the running test executable
/// (`target/<profile>/<name>`); `NANOBOT_BIN_DIR` overrides the directory.
pub fn bin_path(name: &str) -> anyhow::Result<PathBuf> {
    let dir = match std::env::var_os("NANOBOT_BIN_DIR") {
        Some(dir) => PathBuf::from(dir),
        None => profile_dir()?,
    };
    let path = dir.join(name);
    anyhow::ensure!(
        path.is_file(),
        "binary {name} not found at {}: run `cargo build --workspace --bins`",
        path.display()
    );
    Ok(path)
}

fn profile_dir() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe().context("locate the test executable")?;
    let mut dir = exe
        .parent()
        .context("test executable has no directory")?
        .to_path_buf();
    // Test executables live in target/<profile>/deps, binaries in target/<profile>.
    if dir.file_name() == Some(OsStr::new("deps")) {
        dir.pop();
    }
    Ok(dir)
}

/// A running (or exited) child process with its output captured to a log file.
#[derive(Debug)]
pub struct ServiceProc {
    name: String,
    program: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    child: Option<Child>,
    log_path: PathBuf,
    _log_dir: tempfile::TempDir,
}

impl ServiceProc {
    /// Spawns the workspace binary `name` (see [`bin_path`]) with `args` and extra `env`.
    pub fn spawn(name: &str, args: &[&str], env: &[(&str, &str)]) -> anyhow::Result<Self> {
        Self::spawn_program(&bin_path(name)?, args, env)
    }

    /// Spawns any program with `args` and extra `env`. `NANOBOT_*` variables of the test
    /// process are not inherited, so a developer's environment cannot change the test.
    pub fn spawn_program<S: AsRef<OsStr>>(
        program: &Path,
        args: &[S],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Self> {
        let name = program.file_name().map_or_else(
            || program.display().to_string(),
            |n| n.to_string_lossy().into_owned(),
        );
        let log_dir = tempfile::Builder::new()
            .prefix(&format!("{name}-log-"))
            .tempdir()
            .context("create log directory")?;
        let mut proc = Self {
            log_path: log_dir.path().join(format!("{name}.log")),
            name,
            program: program.to_path_buf(),
            args: args.iter().map(|a| a.as_ref().to_os_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                .collect(),
            child: None,
            _log_dir: log_dir,
        };
        proc.launch()?;
        Ok(proc)
    }

    fn launch(&mut self) -> anyhow::Result<()> {
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log_path)
            .with_context(|| format!("open log {}", self.log_path.display()))?;
        writeln!(log, "--- harness: starting {} ---", self.program.display()).ok();
        let stderr: File = log.try_clone().context("clone log handle")?;
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(stderr);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("NANOBOT_") {
                command.env_remove(key);
            }
        }
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        let child = command
            .spawn()
            .with_context(|| format!("spawn {}", self.program.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Returns the binary's file name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Returns the process id while the process has not been reaped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Returns whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(Child::try_wait), Some(Ok(None)))
    }

    /// Returns the exit status if the process has exited.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Sends SIGTERM (graceful shutdown).
    pub fn sigterm(&mut self) -> anyhow::Result<()> {
        self.signal(Signal::TERM)
    }

    /// Sends SIGKILL and reaps the process.
    pub fn sigkill(&mut self) -> anyhow::Result<()> {
        if let Some(child) = self.child.as_mut() {
            // An already exited child makes kill fail; waiting then returns its status.
            let _ = child.kill();
            child
                .wait()
                .with_context(|| format!("reap {}", self.name))?;
        }
        Ok(())
    }

    fn signal(&mut self, signal: Signal) -> anyhow::Result<()> {
        if !self.is_running() {
            return Ok(());
        }
        let pid = self
            .pid()
            .and_then(|p| i32::try_from(p).ok())
            .and_then(Pid::from_raw);
        let pid = pid.context("child has no valid pid")?;
        kill_process(pid, signal).with_context(|| format!("signal {}", self.name))
    }

    /// Waits up to `timeout` for the process to exit; returns its status, `None` if it is
    /// still running.
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit_status() {
                return Some(status);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stops the process gracefully: SIGTERM, then SIGKILL after `grace`.
    pub async fn stop(&mut self, grace: Duration) -> anyhow::Result<Option<ExitStatus>> {
        self.sigterm()?;
        if let Some(status) = self.wait_exit(grace).await {
            return Ok(Some(status));
        }
        self.sigkill()?;
        Ok(None)
    }

    /// Kills the process if it still runs and starts it again with the same arguments,
    /// appending to the same log.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.sigkill()?;
        self.launch()
    }

    /// Returns everything the process wrote to stdout and stderr so far.
    pub fn logs(&self) -> String {
        std::fs::read(&self.log_path)
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .unwrap_or_default()
    }

    /// Returns the last `n` lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        let logs = self.logs();
        let lines: Vec<&str> = logs.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Returns the log file path.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }
}

impl Drop for ServiceProc {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
