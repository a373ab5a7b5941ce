//! The optional OS sandbox of `exec` (`tools.exec.sandbox`, upstream's values): with
//! `"bwrap"` every command runs inside bubblewrap as upstream wraps it: system directories
//! read-only, a private `/tmp`, the workspace's parent hidden behind a tmpfs with only the
//! workspace bound read-write, `HOME` set to the workspace, `sandboxRoBinds` /
//! `sandboxRwBinds` added. The fleet adds `--unshare-pid`, so killing bwrap on a timeout takes
//! every process of the command with it, and, unlike upstream, `--unshare-net` unless
//! `sandboxNetwork` is true: upstream has no broker or database, but next to the fleet a
//! command with the host's network could reach Redis and NATS on loopback and read or rewrite
//! every session. A sandbox that is configured but not installed refuses the command: it
//! never runs unsandboxed.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use serde_json::Value;

use nanobot_runtime::config::ExecConfig;

use crate::registry::RegistryError;

/// Backends upstream knows, as its error lists them.
const BACKENDS: &str = "['bwrap', 'seatbelt']";
/// System directories bound read-only when they exist (`/usr` is required).
const SYSTEM_DIRS: [&str; 10] = [
    "/bin",
    "/lib",
    "/lib64",
    "/etc/alternatives",
    "/etc/ssl/certs",
    "/etc/pki/tls/certs",
    "/etc/pki/ca-trust",
    "/etc/crypto-policies",
    "/etc/resolv.conf",
    "/etc/ld.so.cache",
];

/// How `exec` isolates commands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ExecSandbox {
    /// No sandbox (`sandbox` empty or absent): `exec` runs its own shell ([`super::exec_shell`]).
    #[default]
    None,
    /// bubblewrap, found on `search_path` when a command runs.
    Bwrap {
        /// Extra read-only binds (absolute paths).
        ro_binds: Vec<PathBuf>,
        /// Extra read-write binds (absolute paths).
        rw_binds: Vec<PathBuf>,
        /// Where to look for `bwrap` (the executor's own PATH, not the command's).
        search_path: OsString,
        /// Keep the host's network (`sandboxNetwork: true`); otherwise the command gets a
        /// network namespace of its own with nothing but its own loopback.
        network: bool,
    },
    /// A backend this platform cannot run (`seatbelt` is macOS-only).
    Unavailable(String),
}

impl ExecSandbox {
    /// Reads `tools.exec.sandbox`, `sandboxRoBinds` and `sandboxRwBinds`; an unknown backend
    /// is a config error.
    pub fn from_config(cfg: &ExecConfig) -> Result<Self, RegistryError> {
        let get = |camel: &str, snake: &str| cfg.extra.get(camel).or_else(|| cfg.extra.get(snake));
        let name = get("sandbox", "sandbox")
            .and_then(Value::as_str)
            .unwrap_or("");
        match name.trim() {
            "" => Ok(Self::None),
            "bwrap" => {
                let search_path = std::env::var_os("PATH").unwrap_or_default();
                if find_program("bwrap", &search_path).is_none() {
                    tracing::warn!(
                        "tools.exec.sandbox is bwrap but bwrap is not installed: exec will refuse every command"
                    );
                }
                Ok(Self::Bwrap {
                    ro_binds: binds(get("sandboxRoBinds", "sandbox_ro_binds")),
                    rw_binds: binds(get("sandboxRwBinds", "sandbox_rw_binds")),
                    search_path,
                    network: get("sandboxNetwork", "sandbox_network")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                })
            }
            "seatbelt" => Ok(Self::Unavailable("seatbelt".into())),
            other => Err(RegistryError::Section {
                section: "tools.exec.sandbox",
                cause: format!("Unknown sandbox backend {other:?}. Available: {BACKENDS}"),
            }),
        }
    }

    /// Returns the program and arguments that run `command` in `cwd`, or the refusal for the
    /// model when the configured sandbox cannot run here.
    pub fn argv(
        &self,
        command: &str,
        workspace: &Path,
        cwd: &Path,
    ) -> Result<Vec<OsString>, String> {
        match self {
            Self::None => Ok(["/bin/sh", "-c", command].map(OsString::from).to_vec()),
            Self::Unavailable(name) => Err(not_installed(name)),
            Self::Bwrap {
                ro_binds,
                rw_binds,
                search_path,
                network,
            } => {
                let launcher =
                    find_program("bwrap", search_path).ok_or_else(|| not_installed("bwrap"))?;
                let binds = Binds {
                    ro: ro_binds,
                    rw: rw_binds,
                };
                Ok(bwrap_argv(
                    &launcher, command, workspace, cwd, &binds, *network,
                ))
            }
        }
    }
}

fn not_installed(name: &str) -> String {
    format!(
        "Error: Sandbox backend '{name}' is not installed; tools.exec.sandbox is set, so the \
         command was not run"
    )
}

/// Returns the absolute paths of a bind list (others are ignored, as upstream).
fn binds(value: Option<&Value>) -> Vec<PathBuf> {
    let Some(list) = value.and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .filter_map(Value::as_str)
        .map(|p| PathBuf::from(p.trim()))
        .filter(|p| p.is_absolute())
        .collect()
}

/// Returns the first executable `name` on `search_path`.
pub fn find_program(name: &str, search_path: &OsString) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    std::env::split_paths(search_path)
        .map(|dir| dir.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// Extra binds of the sandbox.
struct Binds<'a> {
    ro: &'a [PathBuf],
    rw: &'a [PathBuf],
}

/// Builds the bwrap command line as upstream's `_bwrap`, plus `--unshare-pid` and, without
/// `network`, `--unshare-net`.
fn bwrap_argv(
    launcher: &Path,
    command: &str,
    workspace: &Path,
    cwd: &Path,
    binds: &Binds<'_>,
    network: bool,
) -> Vec<OsString> {
    let ws = workspace
        .canonicalize()
        .unwrap_or_else(|_| workspace.to_path_buf());
    let cwd = cwd.canonicalize().unwrap_or_else(|_| cwd.to_path_buf());
    let inside = if cwd.starts_with(&ws) {
        cwd
    } else {
        ws.clone()
    };
    let mut args: Vec<OsString> = vec![launcher.into()];
    let mut push = |parts: &[&dyn AsRef<std::ffi::OsStr>]| {
        args.extend(parts.iter().map(|p| p.as_ref().to_os_string()));
    };
    push(&[&"--new-session", &"--die-with-parent", &"--unshare-pid"]);
    if !network {
        push(&[&"--unshare-net"]);
    }
    push(&[&"--setenv", &"HOME", &ws]);
    push(&[&"--ro-bind", &"/usr", &"/usr"]);
    for dir in SYSTEM_DIRS {
        push(&[&"--ro-bind-try", &dir, &dir]);
    }
    push(&[&"--proc", &"/proc", &"--dev", &"/dev", &"--tmpfs", &"/tmp"]);
    // Hide the workspace's parent (where config.json usually lives), then re-expose the
    // workspace itself read-write.
    if let Some(parent) = ws.parent().filter(|p| *p != Path::new("/")) {
        push(&[&"--tmpfs", &parent]);
    }
    push(&[&"--dir", &ws, &"--bind", &ws, &ws]);
    // A bind of the workspace or one of its parents would uncover what the tmpfs hides.
    let safe = |p: &&PathBuf| !ws.starts_with(p);
    for path in binds.ro.iter().filter(safe) {
        push(&[&"--ro-bind-try", path, path]);
    }
    for path in binds.rw.iter().filter(safe) {
        push(&[&"--bind-try", path, path]);
    }
    push(&[&"--chdir", &inside, &"--", &"sh", &"-c", &command]);
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exec_cfg(extra: Value) -> ExecConfig {
        let Value::Object(map) = extra else {
            panic!("object")
        };
        ExecConfig {
            extra: map.into_iter().collect(),
            ..ExecConfig::default()
        }
    }

    #[test]
    fn config_names_upstream_backends_and_refuses_unknown_ones() {
        assert_eq!(
            ExecSandbox::from_config(&exec_cfg(serde_json::json!({}))).unwrap(),
            ExecSandbox::None
        );
        let bwrap = ExecSandbox::from_config(&exec_cfg(serde_json::json!({
            "sandbox": "bwrap",
            "sandboxRoBinds": ["/opt/tools", "relative/ignored"],
            "sandbox_rw_binds": ["/var/cache/x"],
        })))
        .unwrap();
        let ExecSandbox::Bwrap {
            ro_binds, rw_binds, ..
        } = bwrap
        else {
            panic!("{bwrap:?}")
        };
        assert_eq!(ro_binds, [PathBuf::from("/opt/tools")]);
        assert_eq!(rw_binds, [PathBuf::from("/var/cache/x")]);
        let unknown = ExecSandbox::from_config(&exec_cfg(serde_json::json!({"sandbox": "docker"})));
        let message = unknown.unwrap_err().to_string();
        assert!(
            message
                .contains("Unknown sandbox backend \"docker\". Available: ['bwrap', 'seatbelt']"),
            "{message}"
        );
        let seatbelt =
            ExecSandbox::from_config(&exec_cfg(serde_json::json!({"sandbox": "seatbelt"})))
                .unwrap();
        let refused = seatbelt.argv("true", Path::new("/w"), Path::new("/w"));
        assert_eq!(
            refused.unwrap_err(),
            "Error: Sandbox backend 'seatbelt' is not installed; tools.exec.sandbox is set, so \
             the command was not run"
        );
    }

    #[test]
    fn bwrap_missing_from_the_path_refuses_instead_of_running_unsandboxed() {
        let empty = tempfile::tempdir().unwrap();
        let sandbox = ExecSandbox::Bwrap {
            ro_binds: Vec::new(),
            rw_binds: Vec::new(),
            search_path: empty.path().as_os_str().to_os_string(),
            network: false,
        };
        let refused = sandbox.argv("echo hi", Path::new("/w"), Path::new("/w"));
        assert!(
            refused
                .unwrap_err()
                .starts_with("Error: Sandbox backend 'bwrap' is not installed"),
        );
    }

    #[test]
    fn bwrap_hides_the_workspace_parent_and_never_rebinds_it() {
        let argv = bwrap_argv(
            Path::new("/usr/bin/bwrap"),
            "ls",
            Path::new("/srv/bot/workspace"),
            Path::new("/srv/bot/workspace/sub"),
            &Binds {
                ro: &[PathBuf::from("/srv/bot"), PathBuf::from("/opt/ro")],
                rw: &[PathBuf::from("/srv")],
            },
            false,
        );
        let text: Vec<String> = argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let joined = text.join(" ");
        assert!(joined.contains("--tmpfs /srv/bot --dir /srv/bot/workspace --bind /srv/bot/workspace /srv/bot/workspace"), "{joined}");
        assert!(joined.contains("--ro-bind-try /opt/ro /opt/ro"));
        assert!(
            !joined.contains("-bind-try /srv/bot /srv/bot")
                && !joined.contains("--bind-try /srv /srv")
        );
        assert!(
            joined.ends_with("--chdir /srv/bot/workspace/sub -- sh -c ls"),
            "{joined}"
        );
        assert!(joined.contains("--unshare-pid --unshare-net"), "{joined}");
        let networked = bwrap_argv(
            Path::new("/usr/bin/bwrap"),
            "ls",
            Path::new("/w"),
            Path::new("/w"),
            &Binds { ro: &[], rw: &[] },
            true,
        );
        assert!(!networked.iter().any(|a| a == "--unshare-net"));
    }
}
