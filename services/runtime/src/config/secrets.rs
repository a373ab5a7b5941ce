//! Credentials of the local fleet's own NATS and Redis. Upstream has no broker or database;
//! left open, any local process could call `exec` through the tool subjects, inject messages
//! into any session or read every session from Redis. So `nanobot up` generates a NATS
//! password and a Redis password on first start into [`FILE`] next to the config (mode 0600),
//! starts both servers with them, and every process that loads that config (roles, the CLI)
//! uses them for loopback URLs the config gives no credentials for. A config with its own
//! credentials, or servers elsewhere, are left alone.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::Config;

/// The file name, in the config's directory.
pub const FILE: &str = "fleet-secrets.json";
/// The NATS user the local fleet uses.
pub const NATS_USER: &str = "nanobot";

/// The generated credentials.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetSecrets {
    /// Password of [`NATS_USER`].
    pub nats_password: String,
    /// Redis `requirepass`.
    pub redis_password: String,
}

impl std::fmt::Debug for FleetSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FleetSecrets { .. }")
    }
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

/// Returns the secrets at `path`, generating and writing them (mode 0600) when missing.
pub fn ensure(path: &Path) -> std::io::Result<FleetSecrets> {
    if let Some(secrets) = read(path) {
        return Ok(secrets);
    }
    let secrets = FleetSecrets {
        nats_password: random_secret(),
        redis_password: random_secret(),
    };
    let text = serde_json::to_string_pretty(&secrets).map_err(std::io::Error::other)?;
    write_private(path, &text)?;
    Ok(secrets)
}

/// Writes `text` to `path` readable and writable by the owner only (mode 0600, also when the
/// file existed with wider permissions), creating the parent directory.
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(text.as_bytes())
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
    /// Fills in credentials the config lacks for loopback servers: the NATS user and password
    /// when `bus` names none (user, token or creds file), the Redis password when `store.url` is
    /// one server and carries no credentials (`up` starts one Redis, never a cluster).
    pub fn apply_to(&self, config: &mut Config) {
        let bus = &mut config.bus;
        let bus_has_auth = bus.user.is_some()
            || bus.token.is_some()
            || bus.creds_file.is_some()
            || bus.nkey_seed.is_some();
        if !bus_has_auth && is_loopback_url(&bus.url) && !bus.url.contains('@') {
            bus.user = Some(NATS_USER.into());
            bus.password = Some(self.nats_password.clone());
        }
        let store = &mut config.store;
        if is_loopback_url(&store.url)
            && !store.url.contains(['@', ','])
            && let Some((scheme, rest)) = store.url.split_once("://")
        {
            store.url = format!("{scheme}://:{}@{rest}", self.redis_password);
        }
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
        }
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
        let first = ensure(&path).unwrap();
        assert_eq!(first.nats_password.len(), 64);
        assert_ne!(first.nats_password, first.redis_password);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(ensure(&path).unwrap(), first, "kept across starts");
        assert!(!format!("{first:?}").contains(&first.nats_password));
    }
}
