//! The baseline: upstream nanobot's `nanobot serve` from a venv, pointed at the same mock LLM
//! through `providers.custom`, with a temporary `HOME` so no real `~/.nanobot` is touched.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::json;

use nanobot_tests::harness::free_port;

use crate::servers::{self, LlmMode, TOOL_FILE};
use crate::system::{Kind, Running};

/// Where `make bench` installs upstream (`pip install nanobot-ai aiohttp`).
pub fn default_venv() -> PathBuf {
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".cache/nanobot/upstream-venv")
}

/// Returns the installed upstream version, or why the baseline cannot run.
pub async fn check(venv: &Path) -> Result<String, String> {
    let nanobot = venv.join("bin/nanobot");
    if !nanobot.is_file() {
        return Err(format!(
            "{} not found: install with `python3 -m venv {} && {}/bin/pip install nanobot-ai \
             aiohttp` (or `make bench`)",
            nanobot.display(),
            venv.display(),
            venv.display()
        ));
    }
    let output = tokio::process::Command::new(venv.join("bin/python"))
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('nanobot-ai'))",
        ])
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| format!("cannot run the venv's python: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "nanobot-ai is not importable: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// How the baseline is started.
#[derive(Debug, Clone)]
pub struct UpstreamOptions {
    /// The venv holding `nanobot-ai`.
    pub venv: PathBuf,
    /// How the mock LLM answers.
    pub llm: LlmMode,
    /// An LLM already running (the breakdown's probe); no mock is started then.
    pub llm_base: Option<String>,
    /// Extra environment (e.g. `NANOBOT_MAX_CONCURRENT_REQUESTS`).
    pub env: Vec<(String, String)>,
}

/// Starts the mock LLM and `nanobot serve`, and waits until `/health` answers.
pub async fn start(opts: &UpstreamOptions) -> anyhow::Result<Running> {
    let dir = tempfile::Builder::new()
        .prefix("nanobot-bench-upstream-")
        .tempdir()
        .context("create the upstream directory")?;
    let (mock, llm_base) = servers::llm(opts.llm, opts.llm_base.as_deref()).await?;
    let home = dir.path().join("home");
    let workspace = dir.path().join("workspace");
    std::fs::create_dir_all(&home).context("create the upstream home")?;
    std::fs::create_dir_all(&workspace).context("create the upstream workspace")?;
    std::fs::write(workspace.join(TOOL_FILE), crate::fleet::tool_file_text())
        .context("write the tool file")?;
    let port = free_port()?;
    let config = json!({
        "providers": {"custom": {"apiBase": llm_base, "apiKey": "bench-key"}},
        "agents": {"defaults": {
            "model": "test-model",
            "provider": "custom",
            "workspace": workspace.display().to_string(),
        }},
        "api": {"host": "127.0.0.1", "port": port, "timeout": 120.0},
    });
    let config_path = dir.path().join("config.json");
    let text = serde_json::to_string_pretty(&config).context("encode the config")?;
    std::fs::write(&config_path, text).context("write the config")?;

    let args = vec![
        "serve".to_string(),
        "--config".to_string(),
        config_path.display().to_string(),
    ];
    let home_text = home.display().to_string();
    let mut env: Vec<(&str, &str)> = vec![("HOME", home_text.as_str()), ("NO_COLOR", "1")];
    env.extend(opts.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let api_base = format!("http://127.0.0.1:{port}");
    let http = servers::probe_client()?;
    let health = format!("{api_base}/health");
    let serve = servers::spawn_ready(
        "nanobot serve",
        &opts.venv.join("bin/nanobot"),
        &args,
        &env,
        || servers::http_ok(&http, &health),
    )
    .await?;
    Ok(Running {
        clusters: None,
        kind: Kind::Upstream,
        api_base,
        members: mock.into_iter().chain([serve]).collect(),
        workspace,
        nats_url: None,
        redis_url: None,
        dir,
    })
}
