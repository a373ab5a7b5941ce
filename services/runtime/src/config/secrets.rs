//! Credentials of the local fleet's own NATS and Redis. Upstream has no broker or database;
//! left open, any local process could call `exec` through the tool subjects, inject messages
//! into any session or read every session from Redis. So `nanobot up` generates passwords on
//! first start into [`FILE`] next to the config (mode 0600) and starts both servers with them.
//!
//! By default each role gets a user of its own on both servers, with the rights `nanobot
//! deploy` gives it (the tool executors: no Redis at all, NATS only to answer tool calls), and
//! `up` hands each role only its own password; the CLI (and any process that loads the config
//! without credentials of its own) logs in as the operator (`cli`) for loopback URLs the config
//! gives no credentials for. `nanobot up --unconfined` keeps the old single login
//! (user [`NATS_USER`], Redis `requirepass`) that every role shares. A config with its own
//! credentials, or servers elsewhere, are left alone.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use nanobot_proto::keys;
use nanobot_proto::subjects::Role;

use super::Config;

/// The file name, in the config's directory.
pub const FILE: &str = "fleet-secrets.json";
/// The NATS user every role shares with `up --unconfined`.
pub const NATS_USER: &str = "nanobot";

/// The generated credentials.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetSecrets {
    /// Password of [`NATS_USER`] (`up --unconfined`).
    pub nats_password: String,
    /// Redis `requirepass` (`up --unconfined`).
    pub redis_password: String,
    /// Whether the running fleet shares one login (`up --unconfined`); else every
    /// role has its own ([`Self::nats_roles`], [`Self::redis_roles`]).
    #[serde(default)]
    pub shared: bool,
    /// Each role's NATS password, by role name.
    #[serde(default)]
    pub nats_roles: BTreeMap<String, String>,
    /// Each role's Redis password, by role name (the roles with Redis keys: not `tools`).
    #[serde(default)]
    pub redis_roles: BTreeMap<String, String>,
}

impl std::fmt::Debug for FleetSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetSecrets { .. }")
    }
}

/// Whether `role` has a Redis user (the tool executors keep nothing in Redis).
pub fn has_redis_user(role: Role) -> bool {
    !keys::acl_patterns(role).is_empty()
}

/// Returns where the secrets of the config at `config_path` live.
pub fn path_for(config_path: &Path) -> PathBuf {
    config_path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
        .join(FILE)
}

/// Reads the secrets at `path`, if the file exists and parses.
pub fn read(path: &Path) -> Option<FleetSecrets> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str(&text).ok()
}

/// Returns the secrets at `path` for a fleet sharing one login (`shared`) or not, generating
/// what is missing (every role's passwords too, so switching later needs no new ones) and
/// writing the file (mode 0600) when anything changed.
pub fn ensure(path: &Path, shared: bool) -> std::io::Result<FleetSecrets> {
    let old = read(path);
    let mut secrets = old.clone().unwrap_or_else(|| FleetSecrets {
        nats_password: random_secret(),
        redis_password: random_secret(),
        shared,
        nats_roles: BTreeMap::new(),
        redis_roles: BTreeMap::new(),
    });
    secrets.shared = shared;
    for role in Role::ALL {
        let name = role.name().to_string();
        secrets
            .nats_roles
            .entry(name.clone())
            .or_insert_with(random_secret);
        if has_redis_user(role) {
            secrets
                .redis_roles
                .entry(name)
                .or_insert_with(random_secret);
        }
    }
    if old.as_ref() != Some(&secrets) {
        let text = serde_json::to_string_pretty(&secrets).map_err(std::io::Error::other)?;
        write_private(path, &text)?;
    }
    Ok(secrets)
}

/// Writes `text` to `path` readable and writable by the owner only (mode 0600, also when the
/// file existed with wider permissions), creating the parent directory. The file is replaced
/// whole (a private temp file renamed over it): a process killed mid-write leaves the old
/// contents, never a part that would make `nanobot up` generate passwords the running servers
/// do not know.
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    let written = (|| {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// 244 random bits (two v4 UUIDs), hex.
pub fn random_secret() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

impl FleetSecrets {
    /// The NATS login of `role`: its own user, or the shared one.
    pub fn nats_login(&self, role: Role) -> (String, String) {
        match self.nats_roles.get(role.name()).filter(|_| !self.shared) {
            Some(password) => (role.name().into(), password.clone()),
            None => (NATS_USER.into(), self.nats_password.clone()),
        }
    }

    /// The Redis login (`user:password`) of `role` for a URL's userinfo: its own user, the
    /// shared `requirepass` (`:password`), or `None` for a role without a Redis user.
    pub fn redis_userinfo(&self, role: Role) -> Option<String> {
        if self.shared || self.redis_roles.is_empty() {
            return Some(format!(":{}", self.redis_password));
        }
        let password = self.redis_roles.get(role.name())?;
        Some(format!("{}:{password}", role.name()))
    }

    /// Fills in credentials the config lacks for loopback servers, as the operator (`cli`) or
    /// the shared login: the NATS user and password when `bus` names none (user, token or creds
    /// file), the Redis login when `store.url` is one server and carries no credentials (`up`
    /// starts one Redis, never a cluster).
    pub fn apply_to(&self, config: &mut Config) {
        let bus = &mut config.bus;
        let bus_has_auth = bus.user.is_some()
            || bus.token.is_some()
            || bus.creds_file.is_some()
            || bus.nkey_seed.is_some();
        if !bus_has_auth && is_loopback_url(&bus.url) && !bus.url.contains('@') {
            let (user, password) = self.nats_login(Role::Cli);
            bus.user = Some(user);
            bus.password = Some(password);
        }
        if let Some(url) = self.store_url_for(&config.store.url, Role::Cli) {
            config.store.url = url;
        }
    }

    /// `url` (a config's `store.url`) with `role`'s Redis login, when it is one loopback server
    /// without credentials and `role` has a login.
    pub fn store_url_for(&self, url: &str, role: Role) -> Option<String> {
        if !is_loopback_url(url) || url.contains(['@', ',']) {
            return None;
        }
        let (scheme, rest) = url.split_once("://")?;
        Some(format!("{scheme}://{}@{rest}", self.redis_userinfo(role)?))
    }
}

/// Whether every host of a (comma-separated) URL list is a loopback name or address.
fn is_loopback_url(urls: &str) -> bool {
    urls.split(',').all(|url| {
        let rest = url.trim().split_once("://").map_or(url.trim(), |(_, r)| r);
        let host_port = rest.split(['/', '?']).next().unwrap_or("");
        let host = match host_port.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or(""),
            None => host_port.rsplit_once(':').map_or(host_port, |(h, _)| h),
        };
        host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secrets() -> FleetSecrets {
        FleetSecrets {
            nats_password: "np".into(),
            redis_password: "rp".into(),
            shared: true,
            nats_roles: BTreeMap::new(),
            redis_roles: BTreeMap::new(),
        }
    }

    #[test]
    fn a_private_file_replaces_a_wider_one_whole_and_leaves_no_temp_file() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nats.conf");
        std::fs::write(&path, "old").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        write_private(&path, "密码 🔑").unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "密码 🔑");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "no temp file left: {names:?}");
    }

    #[test]
    fn by_default_each_role_has_its_own_logins_and_the_config_gets_the_operators() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_for(&dir.path().join("config.json"));
        let secrets = ensure(&path, false).unwrap();
        let (user, password) = secrets.nats_login(Role::Tools);
        assert_eq!(user, "tools");
        assert_eq!(password, secrets.nats_roles["tools"]);
        assert_eq!(
            secrets.redis_userinfo(Role::Tools),
            None,
            "no Redis for tools"
        );
        let agent = secrets.redis_userinfo(Role::Agent).unwrap();
        assert_eq!(agent, format!("agent:{}", secrets.redis_roles["agent"]));
        let mut config = Config::default();
        secrets.apply_to(&mut config);
        assert_eq!(config.bus.user.as_deref(), Some("cli"));
        assert_eq!(
            config.store.url,
            format!("redis://cli:{}@127.0.0.1:6379", secrets.redis_roles["cli"])
        );
        let shared = ensure(&path, true).unwrap();
        assert_eq!(shared.nats_roles, secrets.nats_roles, "kept when switching");
        assert_eq!(shared.nats_login(Role::Tools).0, NATS_USER);
        assert_eq!(read(&path).unwrap(), shared);
    }

    #[test]
    fn loopback_servers_without_credentials_get_the_generated_ones() {
        let mut config = Config::default();
        secrets().apply_to(&mut config);
        assert_eq!(config.bus.user.as_deref(), Some(NATS_USER));
        assert_eq!(config.bus.password.as_deref(), Some("np"));
        assert_eq!(config.store.url, "redis://:rp@127.0.0.1:6379");
    }

    #[test]
    fn configured_credentials_and_remote_servers_are_left_alone() {
        let mut config = Config::default();
        config.bus.token = Some("t".into());
        config.store.url = "redis://:mine@localhost:6379/2".into();
        secrets().apply_to(&mut config);
        assert_eq!((config.bus.user, config.bus.password), (None, None));
        assert_eq!(config.store.url, "redis://:mine@localhost:6379/2");

        let mut remote = Config::default();
        remote.bus.url = "nats://10.0.0.5:4222".into();
        remote.store.url = "redis://redis.internal:6379".into();
        secrets().apply_to(&mut remote);
        assert_eq!(remote.bus.user, None);
        assert_eq!(remote.store.url, "redis://redis.internal:6379");
    }

    #[test]
    fn secrets_are_generated_once_and_readable_only_by_the_owner() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = path_for(&dir.path().join("config.json"));
        let first = ensure(&path, true).unwrap();
        assert_eq!(first.nats_password.len(), 64);
        assert_ne!(first.nats_password, first.redis_password);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(ensure(&path, true).unwrap(), first, "kept across starts");
        assert!(!format!("{first:?}").contains(&first.nats_password));
    }
}
