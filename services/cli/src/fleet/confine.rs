//! What `nanobot up` confines by default, and what `--unconfined` turns off (the fleet as it
//! was before: one login every role shares, `exec` with the host's files and network).
//!
//! - Per-role logins: each role gets only its own NATS and Redis password (in its environment),
//!   so the tool executors, which run model-chosen commands, can answer tool calls but neither
//!   read a session in Redis (they have no Redis user) nor hear another role's subjects.
//! - The exec sandbox: the tool executors run every `exec` command in bubblewrap
//!   (`tools.exec.sandbox: "bwrap"`): only the workspace is visible (not the config directory
//!   with `fleet-secrets.json`), with no network (not the fleet's NATS and Redis on loopback).
//! - Workspace-only file tools (`tools.restrictToWorkspace`).
//!
//! A config that sets its own credentials, servers elsewhere, or its own `tools.exec.sandbox`
//! is left as it is.

use nanobot_proto::subjects::Role;
use nanobot_runtime::config::Config;
use nanobot_runtime::config::secrets::FleetSecrets;

/// The environment of `role`'s process under `nanobot up`: its own logins (unless the fleet
/// shares one or the config brings its own) and, for the tool executors, the sandbox and the
/// workspace restriction (unless `--unconfined`). `cfg` is the operator's, as loaded (with the
/// operator's logins filled in for loopback servers).
pub(crate) fn role_env(role: Role, cfg: &Config, secrets: &FleetSecrets) -> Vec<(String, String)> {
    let mut env = Vec::new();
    if secrets.shared {
        return env;
    }
    let operator = secrets.nats_login(Role::Cli);
    if cfg.bus.user.as_deref() == Some(operator.0.as_str())
        && cfg.bus.password.as_deref() == Some(operator.1.as_str())
    {
        let (user, password) = secrets.nats_login(role);
        env.push(("NANOBOT_BUS__USER".into(), user));
        env.push(("NANOBOT_BUS__PASSWORD".into(), password));
    }
    if let Some(cli) = secrets.redis_userinfo(Role::Cli)
        && let Some((scheme, rest)) = cfg.store.url.split_once("://")
        && let Some(server) = rest.strip_prefix(&format!("{cli}@"))
    {
        // A role without a Redis user gets a login that opens nothing (and keeps the
        // operator's from being filled in).
        let userinfo = secrets
            .redis_userinfo(role)
            .unwrap_or_else(|| role.name().to_string());
        env.push((
            "NANOBOT_STORE__URL".into(),
            format!("{scheme}://{userinfo}@{server}"),
        ));
    }
    if role == Role::Tools {
        if !has_sandbox(cfg) {
            env.push(("NANOBOT_TOOLS__EXEC__SANDBOX".into(), "bwrap".into()));
        }
        env.push(("NANOBOT_TOOLS__RESTRICT_TO_WORKSPACE".into(), "true".into()));
    }
    env
}

/// Whether the config chooses an exec sandbox of its own.
fn has_sandbox(cfg: &Config) -> bool {
    cfg.tools
        .exec
        .extra
        .get("sandbox")
        .and_then(serde_json::Value::as_str)
        .is_some_and(|s| !s.trim().is_empty())
}

/// The lines `up` prints about what the fleet confines (and a warning when the sandbox cannot
/// run: `exec` then refuses every command rather than run one unsandboxed).
pub(crate) fn summary(secrets: &FleetSecrets, cfg: &Config) -> Vec<String> {
    if secrets.shared {
        return vec![
            "unconfined: every role shares one NATS/Redis login, exec runs on the host \
             (restart without --unconfined to confine)"
                .into(),
        ];
    }
    let mut lines = vec![
        "confined: each role logs in as itself; exec runs in bubblewrap with only the \
         workspace and no network (`nanobot up --unconfined` turns this off)"
            .into(),
    ];
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path).any(|dir| dir.join("bwrap").is_file());
    if !has_sandbox(cfg) && !found {
        lines.push(
            "warning: bwrap is not installed, so exec refuses every command; install it \
             (`make deps`, or apt-get install bubblewrap)"
                .into(),
        );
    }
    lines
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn secrets(shared: bool) -> FleetSecrets {
        let roles = |prefix: &str| -> BTreeMap<String, String> {
            Role::ALL
                .iter()
                .map(|r| (r.name().to_string(), format!("{prefix}-{}", r.name())))
                .collect()
        };
        let mut redis = roles("r");
        redis.remove("tools");
        FleetSecrets {
            nats_password: "shared-n".into(),
            redis_password: "shared-r".into(),
            shared,
            nats_roles: roles("n"),
            redis_roles: redis,
        }
    }

    fn operator_config(secrets: &FleetSecrets) -> Config {
        let mut cfg = Config::default();
        secrets.apply_to(&mut cfg);
        cfg
    }

    fn get<'a>(env: &'a [(String, String)], key: &str) -> Option<&'a str> {
        env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    #[test]
    fn each_role_gets_its_own_logins_and_the_tools_the_sandbox() {
        let s = secrets(false);
        let cfg = operator_config(&s);
        let agent = role_env(Role::Agent, &cfg, &s);
        assert_eq!(get(&agent, "NANOBOT_BUS__USER"), Some("agent"));
        assert_eq!(get(&agent, "NANOBOT_BUS__PASSWORD"), Some("n-agent"));
        assert_eq!(
            get(&agent, "NANOBOT_STORE__URL"),
            Some("redis://agent:r-agent@127.0.0.1:6379")
        );
        assert_eq!(get(&agent, "NANOBOT_TOOLS__EXEC__SANDBOX"), None);
        let tools = role_env(Role::Tools, &cfg, &s);
        assert_eq!(get(&tools, "NANOBOT_BUS__USER"), Some("tools"));
        assert_eq!(
            get(&tools, "NANOBOT_STORE__URL"),
            Some("redis://tools@127.0.0.1:6379"),
            "no Redis password at all"
        );
        assert_eq!(get(&tools, "NANOBOT_TOOLS__EXEC__SANDBOX"), Some("bwrap"));
        assert_eq!(
            get(&tools, "NANOBOT_TOOLS__RESTRICT_TO_WORKSPACE"),
            Some("true")
        );
    }

    #[test]
    fn unconfined_or_own_settings_are_left_alone() {
        let shared = secrets(true);
        assert!(role_env(Role::Tools, &operator_config(&shared), &shared).is_empty());
        let s = secrets(false);
        let mut cfg = Config::default();
        cfg.bus.user = Some("mine".into());
        cfg.bus.password = Some("pw".into());
        cfg.store.url = "redis://me:pw@127.0.0.1:6379".into();
        cfg.tools
            .exec
            .extra
            .insert("sandbox".into(), serde_json::json!("bwrap"));
        let tools = role_env(Role::Tools, &cfg, &s);
        assert_eq!(
            tools,
            [(
                "NANOBOT_TOOLS__RESTRICT_TO_WORKSPACE".to_string(),
                "true".to_string()
            )]
        );
    }
}
