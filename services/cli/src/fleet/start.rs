//! Starting each piece of the local fleet: NATS, Redis, the local model and the role binaries,
//! or finding it already running.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::Duration;

use anyhow::Context as _;

use nanobot_runtime::config::Config;
use nanobot_runtime::config::secrets::{self, FleetSecrets};

use super::launch::{self, Endpoint, Probe, RunDirs};
use super::{ROLES, Row, UpOptions, pidfile};

/// The python script that serves the local model (kept in `scripts/`, embedded here so the
/// binary works from anywhere).
const LOCAL_MODEL_PY: &str = include_str!("../../../../scripts/local_model.py");

pub(super) async fn start_nats(
    dirs: &RunDirs,
    cfg: &Config,
    secrets: &FleetSecrets,
    http: &reqwest::Client,
) -> anyhow::Result<Row> {
    let ep = Endpoint::parse(&cfg.bus.url, 4222).context("read bus.url")?;
    let info = Probe::NatsInfo(ep.addr());
    if let Some(row) = already_up("nats", dirs, &ep, &info, http).await? {
        return Ok(row);
    }
    let bin = dependency("nats-server", "NATS_SERVER")?;
    let monitor = launch::port_or_free(ep.port.checked_add(4000))?;
    let store = dirs.root.join("nats");
    let conf = dirs.root.join("nats.conf");
    let auth = match secrets.shared {
        true => format!(
            "authorization {{\n  user: {}\n  password: {}\n}}\n",
            serde_json::Value::from(secrets::NATS_USER),
            serde_json::Value::from(secrets.nats_password.as_str()),
        ),
        false => crate::deploy::local_nats_users(&secrets.nats_roles),
    };
    secrets::write_private(&conf, &auth).with_context(|| format!("write {}", conf.display()))?;
    let args: Vec<OsString> = vec![
        "-c".into(),
        conf.into_os_string(),
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

pub(super) async fn start_redis(
    dirs: &RunDirs,
    cfg: &Config,
    secrets: &FleetSecrets,
    http: &reqwest::Client,
) -> anyhow::Result<Row> {
    let ep = Endpoint::parse(&cfg.store.url, 6379).context("read store.url")?;
    let probe = Probe::RedisPing(ep.addr());
    if let Some(row) = already_up("redis", dirs, &ep, &probe, http).await? {
        return Ok(row);
    }
    let bin = dependency("redis-server", "REDIS_SERVER")?;
    let data = dirs.root.join("redis");
    std::fs::create_dir_all(&data).with_context(|| format!("create {}", data.display()))?;
    let conf = dirs.root.join("redis.conf");
    let auth = match secrets.shared {
        true => format!("requirepass {}\n", secrets.redis_password),
        false => crate::deploy::local_redis_users(&secrets.redis_roles),
    };
    secrets::write_private(&conf, &auth).with_context(|| format!("write {}", conf.display()))?;
    let args: Vec<OsString> = vec![
        conf.into_os_string(),
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

pub(super) async fn start_model(
    dirs: &RunDirs,
    cfg: &Config,
    http: &reqwest::Client,
) -> anyhow::Result<Row> {
    let base = cfg.runner.local_model_url.trim_end_matches('/');
    let ep = Endpoint::parse(base, 80).context("read runner.localModelUrl")?;
    let probe = Probe::Http(format!("{base}/models"));
    if let Some(row) = already_up("model", dirs, &ep, &probe, http).await? {
        return Ok(row);
    }
    let venv = launch::cache_dir().join("venv");
    let gguf = launch::find_gguf(&venv, std::env::var_os("NANOBOT_LOCAL_MODEL_GGUF"))?;
    let (python, args) = model_command(dirs, &venv, &gguf, ep.port, &cfg.runner.local_model, None)?;
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

/// Returns the program and arguments serving `gguf` on 127.0.0.1:`port` as `alias`, with the
/// script written to `<run>/local_model.py`; `max_tokens` overrides the script's reply cap.
fn model_command(
    dirs: &RunDirs,
    venv: &Path,
    gguf: &Path,
    port: u16,
    alias: &str,
    max_tokens: Option<u32>,
) -> anyhow::Result<(PathBuf, Vec<OsString>)> {
    let script = dirs.root.join("local_model.py");
    std::fs::write(&script, LOCAL_MODEL_PY)
        .with_context(|| format!("write {}", script.display()))?;
    let mut args: Vec<OsString> = vec![
        script.into_os_string(),
        "--model".into(),
        gguf.into(),
        "--host".into(),
        "127.0.0.1".into(),
        "--port".into(),
        port.to_string().into(),
        "--alias".into(),
        alias.into(),
    ];
    if let Some(cap) = max_tokens {
        args.extend(["--max-tokens".into(), cap.to_string().into()]);
    }
    Ok((venv.join("bin/python"), args))
}

pub(super) async fn start_roles(
    dirs: &RunDirs,
    opts: &UpOptions,
    cfg: &Config,
    secrets: &FleetSecrets,
    http: &reqwest::Client,
) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    let mut starting: Vec<(String, Child, Probe)> = Vec::new();
    for (role, port) in ROLES {
        let env = nanobot_runtime::config::scope::role_named(role)
            .map(|r| super::confine::role_env(r, cfg, secrets))
            .map_err(anyhow::Error::msg)?;
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
        let child = launch::spawn_with_env(dirs, &name, &bin, &args, &env)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_script_caps_the_length_of_every_request() {
        let out = std::process::Command::new("python3")
            .args(["-c", LOCAL_MODEL_PY, "--self-test"])
            .output();
        let out = out.expect("run python3 (scripts/deps.sh installs it)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Runs the real local model (`make test` installs it with `scripts/deps.sh model`).
    #[tokio::test]
    async fn local_model_answers_chat_completions_within_its_reply_cap() {
        let venv = launch::cache_dir().join("venv");
        let gguf = launch::find_gguf(&venv, None)
            .expect("the local model is installed (scripts/deps.sh model)");
        let run = tempfile::tempdir().unwrap();
        let dirs = RunDirs::create(run.path()).unwrap();
        let port = launch::port_or_free(None).unwrap();
        let (python, args) =
            model_command(&dirs, &venv, &gguf, port, "tiny-test", Some(8)).unwrap();
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let base = format!("http://127.0.0.1:{port}/v1");
        let probe = Probe::Http(format!("{base}/models"));
        let mut child = launch::spawn(&dirs, "model", &python, &args).unwrap();
        let ready = launch::wait_ready(
            &http,
            "model",
            Some(&mut child),
            &probe,
            &dirs.log("model"),
            Duration::from_secs(120),
        )
        .await;

        let reply = async {
            ready?;
            let body = serde_json::json!({
                "model": "tiny-test",
                "messages": [{"role": "user", "content": "Write a very long story about a dragon."}],
                "max_tokens": 4096,
            });
            let resp = http.post(format!("{base}/chat/completions")).json(&body).send().await?;
            anyhow::Ok(resp.json::<serde_json::Value>().await?)
        }
        .await;
        child.kill().unwrap();
        child.wait().unwrap();

        let reply = reply.unwrap();
        assert!(
            reply["choices"][0]["message"]["content"].is_string(),
            "{reply}"
        );
        assert!(
            reply["usage"]["completion_tokens"].as_u64().unwrap() <= 8,
            "{reply}"
        );
        assert_eq!(reply["model"], "tiny-test", "{reply}");
    }
}
