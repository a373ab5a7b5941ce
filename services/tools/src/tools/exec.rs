//! `exec`: runs a shell command (`bash -c`, or the `sh`/`zsh` the call names, `-l` for a
//! login shell: [`super::exec_shell`]) in the workspace with a minimal environment, a timeout
//! that kills the whole process group, and upstream's output format and truncation; inside
//! bubblewrap (`sh -c` there, as upstream) when `tools.exec.sandbox` says so
//! ([`super::exec_sandbox`]).

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt as _};

use nanobot_runtime::config::ExecConfig;

use super::exec_guard::{ExecPolicy, check_paths, working_dir_allowed};
use super::exec_sandbox::ExecSandbox;
use super::exec_session::{self, ExecSessions, Start, clamp};
use super::exec_shell;
use super::exec_url::{Cidr, check_urls};
use crate::registry::{
    Args, RegistryError, Tool, ToolContext, ToolOutput, arg_bool, arg_i64, arg_str,
};
use crate::sandbox::BOUNDARY_NOTE;

/// Largest per-call timeout in seconds.
const MAX_TIMEOUT: u64 = 600;
/// Bytes kept per stream; the rest is read and dropped so the command never blocks.
const CAPTURE_LIMIT: usize = 8 * 1024 * 1024;
/// PATH when the executor itself has none.
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Runs shell commands.
#[derive(Debug)]
pub struct Exec {
    policy: ExecPolicy,
    cfg: ExecConfig,
    ssrf_whitelist: Vec<Cidr>,
    sandbox: ExecSandbox,
    sessions: Arc<ExecSessions>,
}

impl Exec {
    /// Returns the tool configured by `tools.exec`.
    pub fn new(cfg: &ExecConfig) -> Result<Self, RegistryError> {
        Ok(Self {
            policy: ExecPolicy::new(cfg)?,
            cfg: cfg.clone(),
            ssrf_whitelist: Vec::new(),
            sandbox: ExecSandbox::from_config(cfg)?,
            sessions: Arc::default(),
        })
    }

    /// Keeps commands still running after `yield_time_ms` in `sessions`.
    pub fn with_sessions(mut self, sessions: Arc<ExecSessions>) -> Self {
        self.sessions = sessions;
        self
    }

    /// Lets URLs on these internal ranges through (`tools.ssrfWhitelist`).
    pub fn with_ssrf_whitelist(mut self, whitelist: Vec<Cidr>) -> Self {
        self.ssrf_whitelist = whitelist;
        self
    }

    /// Returns the child's environment: PATH, HOME, LANG, TERM and `allowedEnvKeys` only, so
    /// no secret of the executor leaks into commands.
    fn env(&self) -> HashMap<String, String> {
        let var = |key: &str, default: &str| std::env::var(key).unwrap_or_else(|_| default.into());
        let path_parts = [
            self.cfg.path_prepend.clone(),
            Some(var("PATH", DEFAULT_PATH)),
            self.cfg.path_append.clone(),
        ];
        let path: Vec<String> = path_parts
            .into_iter()
            .flatten()
            .filter(|p| !p.is_empty())
            .collect();
        let mut env = HashMap::from([
            ("PATH".to_string(), path.join(":")),
            ("HOME".to_string(), var("HOME", "/tmp")),
            ("LANG".to_string(), var("LANG", "C.UTF-8")),
            ("TERM".to_string(), var("TERM", "dumb")),
            ("PYTHONUNBUFFERED".to_string(), "1".to_string()),
        ]);
        for key in &self.cfg.allowed_env_keys {
            if let Ok(value) = std::env::var(key) {
                env.insert(key.clone(), value);
            }
        }
        env
    }

    /// Returns the effective timeout: the call's (capped at 600 s), else the config's
    /// (`0` = none, not capped).
    fn timeout(&self, requested: Option<i64>) -> Option<u64> {
        match requested
            .and_then(|t| u64::try_from(t).ok())
            .filter(|t| *t > 0)
        {
            Some(t) => Some(t.min(MAX_TIMEOUT)),
            None => (self.cfg.timeout > 0).then_some(self.cfg.timeout),
        }
    }
}

#[async_trait::async_trait]
impl Tool for Exec {
    fn name(&self) -> &str {
        "exec"
    }

    fn exclusive(&self) -> bool {
        true
    }

    fn description(&self) -> &str {
        "Execute a shell command."
    }

    fn parameters(&self) -> Value {
        let nullable_int = |description: &str, min: i64, max: i64| json!({"type": ["integer", "null"], "description": description, "minimum": min, "maximum": max});
        let (min_out, max_out) = (
            exec_session::MIN_OUTPUT_CHARS,
            exec_session::MAX_OUTPUT_CHARS,
        );
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The shell command to execute"},
                "cmd": {"type": "string", "description": "Compatibility alias for command"},
                "working_dir": {"type": "string", "description": "Optional working directory for the command"},
                "workdir": {"type": "string", "description": "Compatibility alias for working_dir"},
                "timeout": {"type": "integer", "description": "Hard timeout in seconds (default 60, max 600).",
                    "minimum": 1, "maximum": MAX_TIMEOUT},
                "shell": {"type": ["string", "null"],
                    "description": "Shell override; omit for bash, or pass 'sh' or 'zsh'."},
                "login": {"type": ["boolean", "null"], "description": "Run bash/zsh as a login shell.",
                    "default": false},
                "yield_time_ms": nullable_int(
                    "Return after this many milliseconds if still running; omit to wait for exit.",
                    0, exec_session::MAX_YIELD_MS),
                "max_output_chars": nullable_int(
                    "Session output limit in characters (default 10000, max 50000).", min_out, max_out),
                "max_output_tokens": nullable_int(
                    "Compatibility alias for max_output_chars.", min_out, max_out),
            },
            "additionalProperties": false,
        })
    }

    async fn execute(&self, ctx: &ToolContext, args: Args) -> ToolOutput {
        // `command or cmd`, `working_dir or workdir`, as 0.3.5.
        let either = |a: &str, b: &str| {
            arg_str(&args, a)
                .filter(|s| !s.is_empty())
                .or(arg_str(&args, b))
        };
        let Some(command) = either("command", "cmd").filter(|c| !c.is_empty()) else {
            return ToolOutput::error("Error: Missing command. Provide command or cmd.");
        };
        let cwd = match working_dir(ctx, either("working_dir", "workdir")) {
            Ok(cwd) => cwd,
            Err(message) => return ToolOutput::error(message),
        };
        if let Some(refusal) = self.policy.check(command) {
            return ToolOutput::error(refusal);
        }
        if let Some(refusal) = check_urls(command, &self.ssrf_whitelist).await {
            return ToolOutput::error(refusal);
        }
        let env = self.env();
        if ctx.sandbox.restricted()
            && let Some(refusal) = check_paths(command, &ctx.sandbox, &cwd, &env)
        {
            return ToolOutput::error(refusal);
        }
        let shell = match exec_shell::resolve(arg_str(&args, "shell")) {
            Ok(shell) => shell,
            Err(refusal) => return ToolOutput::error(refusal),
        };
        let argv = if matches!(self.sandbox, ExecSandbox::None) {
            exec_shell::argv(shell, arg_bool(&args, "login"), command)
        } else {
            match self.sandbox.argv(command, ctx.sandbox.root(), &cwd) {
                Ok(argv) => argv,
                Err(refusal) => return ToolOutput::error(refusal),
            }
        };
        let timeout = self.timeout(arg_i64(&args, "timeout"));
        let max_chars =
            arg_i64(&args, "max_output_chars").or_else(|| arg_i64(&args, "max_output_tokens"));
        if let Some(yield_ms) = arg_i64(&args, "yield_time_ms") {
            let start = Start {
                argv: &argv,
                command,
                cwd: &cwd,
                env: &env,
                timeout,
                yield_ms: clamp(
                    Some(yield_ms),
                    exec_session::DEFAULT_YIELD_MS,
                    0,
                    exec_session::MAX_YIELD_MS,
                ),
                max_chars: clamp(
                    max_chars,
                    exec_session::DEFAULT_MAX_OUTPUT_CHARS,
                    exec_session::MIN_OUTPUT_CHARS,
                    exec_session::MAX_OUTPUT_CHARS,
                ) as usize,
            };
            return self.sessions.start(ctx, start).await;
        }
        // One-shot output keeps 10 000 characters unless the call asks otherwise (upstream).
        let max_chars = clamp(
            max_chars,
            10_000,
            exec_session::MIN_OUTPUT_CHARS,
            exec_session::MAX_OUTPUT_CHARS,
        ) as usize;
        run(&argv, &cwd, &env, timeout, max_chars).await
    }
}

fn working_dir(ctx: &ToolContext, requested: Option<&str>) -> Result<PathBuf, String> {
    let Some(requested) = requested.filter(|w| !w.is_empty()) else {
        return Ok(ctx.sandbox.root().to_path_buf());
    };
    let open = crate::sandbox::Sandbox::new(ctx.sandbox.root(), false);
    let dir = open.resolve(requested)?;
    if !working_dir_allowed(&ctx.sandbox, &dir) {
        return Err(format!(
            "Error: working_dir is outside the configured workspace{BOUNDARY_NOTE}"
        ));
    }
    match std::fs::metadata(&dir) {
        Err(_) => Err(format!("Error: working_dir not found: {requested}")),
        Ok(meta) if !meta.is_dir() => Err(format!(
            "Error: working_dir is not a directory: {requested}"
        )),
        Ok(_) => Ok(dir),
    }
}

/// Kills a process group when dropped, unless disarmed: a call cancelled mid-run (or timed
/// out) never leaves its processes behind.
pub(crate) struct GroupKill(Option<u32>);

impl GroupKill {
    /// Arms the kill for the process group led by `pid`.
    pub(crate) fn new(pid: Option<u32>) -> Self {
        Self(pid)
    }

    /// Kills the group now (once).
    pub(crate) fn kill_now(&mut self) {
        let Some(pgid) = self.0.take() else { return };
        let pid = i32::try_from(pgid)
            .ok()
            .and_then(rustix::process::Pid::from_raw);
        if let Some(pid) = pid {
            // ESRCH (already gone) is fine.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    }

    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for GroupKill {
    fn drop(&mut self) {
        self.kill_now();
    }
}

/// Returns the command line `argv` in `cwd` with `env` only, output piped, in a process
/// group of its own (killed as a whole), stdin piped for a session or else `/dev/null`.
pub(crate) fn command(
    argv: &[OsString],
    cwd: &std::path::Path,
    env: &HashMap<String, String>,
    stdin_piped: bool,
) -> Result<tokio::process::Command, String> {
    let Some((program, args)) = argv.split_first() else {
        return Err("Error executing command: empty command line".into());
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env)
        .stdin(if stdin_piped {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    Ok(command)
}

/// Runs `argv` (`bash -c command`, possibly wrapped in a sandbox) in `cwd`.
async fn run(
    argv: &[OsString],
    cwd: &std::path::Path,
    env: &HashMap<String, String>,
    timeout: Option<u64>,
    max_chars: usize,
) -> ToolOutput {
    let mut child = match command(argv, cwd, env, false).map(|mut c| c.spawn()) {
        Ok(Ok(child)) => child,
        Ok(Err(e)) => return ToolOutput::error(format!("Error executing command: {e}")),
        Err(message) => return ToolOutput::error(message),
    };
    let mut group = GroupKill(child.id());
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let finished = {
        let collect = async { tokio::join!(capture(stdout), capture(stderr), child.wait()) };
        match timeout {
            Some(secs) => tokio::time::timeout(Duration::from_secs(secs), collect)
                .await
                .ok(),
            None => Some(collect.await),
        }
    };
    let Some((out, err, status)) = finished else {
        group.kill_now();
        let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
        let secs = timeout.unwrap_or_default();
        return ToolOutput::error(format!("Error: Command timed out after {secs} seconds"));
    };
    group.disarm();
    let status = match status {
        Ok(status) => status,
        Err(e) => return ToolOutput::error(format!("Error executing command: {e}")),
    };
    ToolOutput::text(format_output(&out, &err, exit_code(status), max_chars))
}

async fn capture<R: AsyncRead + Unpin>(stream: Option<R>) -> Vec<u8> {
    let Some(mut stream) = stream else {
        return Vec::new();
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = CAPTURE_LIMIT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

/// Returns the exit code as Python reports it (`-signal` when killed by a signal).
pub(crate) fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt as _;
    status
        .code()
        .unwrap_or_else(|| -status.signal().unwrap_or(0))
}

/// Formats output as upstream: stdout, `STDERR:` block, exit code, then head+tail
/// truncation past 10 000 characters.
fn format_output(stdout: &[u8], stderr: &[u8], code: i32, max_chars: usize) -> String {
    let mut parts = Vec::new();
    if !stdout.is_empty() {
        parts.push(String::from_utf8_lossy(stdout).into_owned());
    }
    let err = String::from_utf8_lossy(stderr);
    if !err.trim().is_empty() {
        parts.push(format!("STDERR:\n{err}"));
    }
    parts.push(format!("\nExit code: {code}"));
    truncate(&parts.join("\n"), max_chars)
}

fn truncate(text: &str, max_chars: usize) -> String {
    let total = text.chars().count();
    if total <= max_chars {
        return text.to_string();
    }
    let half = max_chars / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(total - half).collect();
    format!(
        "{head}\n\n... ({} chars truncated) ...\n\n{tail}",
        thousands(total - max_chars)
    )
}

pub(crate) fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::sandbox::Sandbox;

    fn ctx(restrict: bool) -> (tempfile::TempDir, ToolContext) {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join("sub")).unwrap();
        (
            dir,
            ToolContext {
                sandbox: Sandbox::new(&ws, restrict),
                session_key: "s".into(),
                origin: Default::default(),
                file_reads: Vec::new(),
            },
        )
    }

    fn exec(cfg: ExecConfig) -> Exec {
        Exec::new(&cfg).unwrap()
    }

    async fn call(tool: &Exec, ctx: &ToolContext, args: Value) -> ToolOutput {
        let Value::Object(args) = args else {
            panic!("args must be an object")
        };
        tool.execute(ctx, args).await
    }

    #[tokio::test]
    async fn formats_stdout_stderr_and_exit_code_like_upstream() {
        let (_dir, ctx) = ctx(true);
        let tool = exec(ExecConfig::default());
        let out = call(
            &tool,
            &ctx,
            json!({"command": "echo hi; echo err >&2; exit 3"}),
        )
        .await;
        assert_eq!(
            out,
            ToolOutput::text("hi\n\nSTDERR:\nerr\n\n\nExit code: 3")
        );
        assert_eq!(
            call(&tool, &ctx, json!({"command": "true"})).await.content,
            "\nExit code: 0"
        );
        let pwd = call(&tool, &ctx, json!({"command": "pwd"})).await.content;
        assert_eq!(
            pwd,
            format!("{}\n\n\nExit code: 0", ctx.sandbox.root().display())
        );
        let sub = call(&tool, &ctx, json!({"command": "pwd", "working_dir": "sub"}))
            .await
            .content;
        assert!(
            sub.starts_with(&ctx.sandbox.root().join("sub").display().to_string()),
            "{sub}"
        );
    }

    #[tokio::test]
    async fn long_output_keeps_head_and_tail() {
        let (_dir, ctx) = ctx(true);
        let tool = exec(ExecConfig::default());
        let out = call(
            &tool,
            &ctx,
            json!({"command": "head -c 20000 /dev/zero | tr '\\0' a"}),
        )
        .await
        .content;
        assert!(out.starts_with(&"a".repeat(5000)));
        assert!(
            out.contains("\n\n... (10,014 chars truncated) ...\n\n"),
            "{}",
            &out[4990..5060]
        );
        assert!(out.ends_with("a\n\nExit code: 0"));
        assert_eq!(
            out.chars().count(),
            10_000 + "\n\n... (10,014 chars truncated) ...\n\n".len()
        );
        assert_eq!(thousands(1_234_567), "1,234,567");
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_process_group() {
        let (_dir, ctx) = ctx(true);
        let tool = exec(ExecConfig::default());
        let started = Instant::now();
        let out = call(
            &tool,
            &ctx,
            json!({"command": "sleep 100 & echo $! > bg.pid; sleep 100", "timeout": 1}),
        )
        .await;
        assert_eq!(
            out,
            ToolOutput::error("Error: Command timed out after 1 seconds")
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "took {:?}",
            started.elapsed()
        );
        let pid = std::fs::read_to_string(ctx.sandbox.root().join("bg.pid")).unwrap();
        let stat = format!("/proc/{}/stat", pid.trim());
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            // Gone, or a zombie waiting for a reaper: either way no longer running.
            let state = std::fs::read_to_string(&stat)
                .ok()
                .and_then(|s| s.rsplit(')').next().map(|r| r.trim().chars().next()));
            if matches!(state, None | Some(Some('Z'))) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "background sleeper {pid} survived: {state:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(tool.timeout(None), Some(60));
        assert_eq!(tool.timeout(Some(5000)), Some(600));
        assert_eq!(
            exec(ExecConfig {
                timeout: 0,
                ..ExecConfig::default()
            })
            .timeout(None),
            None
        );
        assert_eq!(
            exec(ExecConfig {
                timeout: 900,
                ..ExecConfig::default()
            })
            .timeout(None),
            Some(900)
        );
    }

    #[tokio::test]
    async fn environment_is_minimal_plus_allowed_keys() {
        let (_dir, ctx) = ctx(false);
        let minimal = [
            "PATH",
            "HOME",
            "LANG",
            "TERM",
            "PWD",
            "SHLVL",
            "_",
            "OLDPWD",
            "PYTHONUNBUFFERED",
        ];
        let secret = std::env::vars()
            .map(|(k, _)| k)
            .find(|k| !minimal.contains(&k.as_str()) && !k.contains('='))
            .expect("the test process has some variable");
        let plain = call(
            &exec(ExecConfig::default()),
            &ctx,
            json!({"command": "env"}),
        )
        .await
        .content;
        assert!(
            !plain.contains(&format!("{secret}=")),
            "{secret} leaked:\n{plain}"
        );
        assert!(plain.contains("PYTHONUNBUFFERED=1") && plain.contains("PATH="));
        let allowed = exec(ExecConfig {
            allowed_env_keys: vec![secret.clone()],
            path_prepend: Some("/opt/pre".into()),
            ..ExecConfig::default()
        });
        let out = call(&allowed, &ctx, json!({"command": "env"}))
            .await
            .content;
        assert!(out.contains(&format!("{secret}=")), "{out}");
        assert!(out.contains("PATH=/opt/pre:"), "{out}");
    }

    #[tokio::test]
    async fn guards_refuse_before_running() {
        let (dir, ctx) = ctx(true);
        let tool = exec(ExecConfig::default());
        let marker = dir.path().join("ran");
        let denied = call(
            &tool,
            &ctx,
            json!({"command": format!("touch {}; rm -rf /", marker.display())}),
        )
        .await;
        assert_eq!(
            denied,
            ToolOutput::error("Error: Command blocked by deny pattern filter")
        );
        let outside = call(
            &tool,
            &ctx,
            json!({"command": format!("touch {}", marker.display())}),
        )
        .await;
        assert!(
            outside
                .content
                .starts_with("Error: Command blocked by safety guard (path outside working dir)")
        );
        assert!(!marker.exists(), "a refused command never runs");
        let wd = call(&tool, &ctx, json!({"command": "ls", "working_dir": "/tmp"})).await;
        assert_eq!(
            wd.content,
            format!("Error: working_dir is outside the configured workspace{BOUNDARY_NOTE}")
        );
        let missing = call(&tool, &ctx, json!({"command": "ls", "working_dir": "nope"})).await;
        assert_eq!(missing.content, "Error: working_dir not found: nope");
        let ssrf = call(
            &tool,
            &ctx,
            json!({"command": "curl -s http://127.0.0.1:1/"}),
        )
        .await;
        assert_eq!(
            ssrf.content,
            "Error: Command blocked by safety guard (internal/private URL detected)"
        );
        let allow = exec(ExecConfig {
            allow_patterns: vec!["ls.*".into()],
            ..ExecConfig::default()
        });
        let sneaky = call(&allow, &ctx, json!({"command": "ls $(touch pwned)"})).await;
        assert_eq!(
            sneaky.content,
            "Error: Command blocked by allowlist filter (not in allowlist)"
        );
        assert!(!ctx.sandbox.root().join("pwned").exists());
    }

    #[tokio::test]
    async fn cmd_and_workdir_aliases_and_a_missing_command_as_0_3_5() {
        let (_dir, ctx) = ctx(true);
        std::fs::create_dir_all(ctx.sandbox.root().join("目录🐱")).unwrap();
        let tool = exec(ExecConfig::default());
        let out = call(
            &tool,
            &ctx,
            json!({"cmd": "pwd; echo 你好🐱", "workdir": "目录🐱"}),
        )
        .await
        .content;
        let dir = ctx.sandbox.root().join("目录🐱");
        assert_eq!(out, format!("{}\n你好🐱\n\n\nExit code: 0", dir.display()));
        let first = call(&tool, &ctx, json!({"command": "echo a", "cmd": "echo b"})).await;
        assert!(first.content.starts_with("a\n"), "{first:?}");
        for args in [
            json!({}),
            json!({"command": ""}),
            json!({"working_dir": "."}),
        ] {
            assert_eq!(
                call(&tool, &ctx, args).await,
                ToolOutput::error("Error: Missing command. Provide command or cmd.")
            );
        }
    }

    #[tokio::test]
    async fn bash_runs_by_default_and_shell_picks_sh_with_login_for_bash_only() {
        let (_dir, ctx) = ctx(true);
        let tool = exec(ExecConfig::default());
        let probe =
            "echo \"${BASH_VERSION:+bash}:$0:$(shopt -q login_shell 2>/dev/null && echo login)\"";
        let default = call(&tool, &ctx, json!({"command": probe})).await.content;
        assert!(default.starts_with("bash:"), "{default}");
        assert!(default.contains("bash:\n"), "not a login shell: {default}");
        let login = call(&tool, &ctx, json!({"command": probe, "login": true}))
            .await
            .content;
        assert!(
            login.starts_with("bash:") && login.contains(":login\n"),
            "{login}"
        );
        let sh = call(
            &tool,
            &ctx,
            json!({"command": probe, "shell": "sh", "login": true}),
        )
        .await
        .content;
        assert!(sh.starts_with(":") && sh.contains("sh:"), "{sh}");
        let refused = call(&tool, &ctx, json!({"command": "echo 🐟", "shell": "fish"})).await;
        assert_eq!(
            refused,
            ToolOutput::error("Error: unsupported shell 'fish'. Allowed: bash, sh, zsh")
        );
    }
}
