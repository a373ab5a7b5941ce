//! `nanobot deploy nats-config` and `nanobot deploy redis-acl`: server-side configurations
//! with one user per fleet role and the least rights each role needs, derived from
//! `nanobot_proto::subjects::permissions` and `nanobot_proto::keys::acl_patterns`.
//!
//! Each writes the server file and, next to it, an env file (mode 0600) with every role's
//! generated password; running the command again keeps the passwords already in that file,
//! so a deployed fleet keeps working when its configuration is regenerated.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use sha2::{Digest as _, Sha256};

use nanobot_proto::keys;
use nanobot_proto::subjects::{self, Role};
use nanobot_runtime::config::secrets::{random_secret, write_private};

/// `nanobot deploy …` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum DeployCommand {
    /// Write a nats-server configuration: one user per role (gateway, agent, tools, memory,
    /// cron, cli) allowed only the subjects it needs; passwords go to `nats-secrets.env`.
    NatsConfig {
        /// The file to write (mode 0600: it holds the passwords the server checks).
        #[arg(long, default_value = "nats.conf")]
        out: PathBuf,
        /// NKey users instead of passwords: the config holds only public keys, the env file
        /// each role's seed (`NANOBOT_NATS_<ROLE>_NKEY_SEED`, for `bus.nkeySeed`).
        #[arg(long)]
        nkeys: bool,
        /// Reference each role's password as `$NANOBOT_NATS_<ROLE>_PASSWORD`, which
        /// nats-server reads from its environment at start: a file without secrets (for a
        /// ConfigMap or a checked-in file) and no env file.
        #[arg(long, conflicts_with = "nkeys")]
        env_refs: bool,
    },
    /// Write a Redis ACL file (`aclfile`): one user per role allowed only its keys and
    /// data commands, the `default` user off; passwords go to `redis-secrets.env`.
    RedisAcl {
        /// The file to write (passwords are stored as SHA-256 hashes).
        #[arg(long, default_value = "users.acl")]
        out: PathBuf,
    },
}

/// Runs a deploy command and prints what it wrote.
pub fn run(command: &DeployCommand) -> anyhow::Result<()> {
    let (out, secrets) = match command {
        DeployCommand::NatsConfig {
            out,
            env_refs: true,
            ..
        } => {
            let logins = Role::ALL
                .into_iter()
                .map(|role| {
                    let var = password_var("NATS", role);
                    let login = format!("user: \"{}\"\n      password: ${var}", role.name());
                    (role, login)
                })
                .collect();
            std::fs::write(out, nats_config(&logins, ENV_REFS_NOTE))
                .with_context(|| format!("write {}", out.display()))?;
            println!(
                "wrote {} (no secrets: nats-server reads NANOBOT_NATS_<ROLE>_PASSWORD from its environment)",
                out.display()
            );
            return Ok(());
        }
        DeployCommand::NatsConfig { out, nkeys, .. } => {
            let secrets = secrets_path(out, "nats");
            let kind = if *nkeys {
                Secret::NkeySeed
            } else {
                Secret::Password
            };
            let generated = generate(&secrets, "NATS", kind, &Role::ALL)?;
            let logins = generated
                .into_iter()
                .map(|(role, secret)| {
                    let login = match kind {
                        Secret::Password => {
                            format!("user: \"{}\"\n      password: \"{secret}\"", role.name())
                        }
                        Secret::NkeySeed => {
                            let pair = nkeys::KeyPair::from_seed(&secret).map_err(|e| {
                                anyhow::anyhow!("nkey seed of {}: {e}", role.name())
                            })?;
                            format!("nkey: \"{}\"", pair.public_key())
                        }
                    };
                    Ok((role, login))
                })
                .collect::<anyhow::Result<BTreeMap<_, _>>>()?;
            write_private(out, &nats_config(&logins, ""))
                .with_context(|| format!("write {}", out.display()))?;
            (out, secrets)
        }
        DeployCommand::RedisAcl { out } => {
            let secrets = secrets_path(out, "redis");
            let passwords = generate(&secrets, "REDIS", Secret::Password, &redis_roles())?;
            write_private(out, &redis_acl(&passwords))
                .with_context(|| format!("write {}", out.display()))?;
            (out, secrets)
        }
    };
    println!("wrote {} and {} (0600)", out.display(), secrets.display());
    Ok(())
}

/// The env file next to `out`: `<dir>/<kind>-secrets.env`.
pub fn secrets_path(out: &Path, kind: &str) -> PathBuf {
    out.parent()
        .unwrap_or(Path::new(""))
        .join(format!("{kind}-secrets.env"))
}

/// What `nanobot deploy` generates per role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Secret {
    /// A random password.
    Password,
    /// An NKey user's seed.
    NkeySeed,
}

/// The env variable holding `role`'s password for `server` (`NATS`, `REDIS`):
/// `NANOBOT_NATS_AGENT_PASSWORD`.
pub fn password_var(server: &str, role: Role) -> String {
    format!(
        "NANOBOT_{server}_{}_PASSWORD",
        role.name().to_ascii_uppercase()
    )
}

/// The env variable holding `role`'s NKey seed: `NANOBOT_NATS_AGENT_NKEY_SEED`.
pub fn nkey_seed_var(role: Role) -> String {
    format!(
        "NANOBOT_NATS_{}_NKEY_SEED",
        role.name().to_ascii_uppercase()
    )
}

/// Roles with a Redis user: every role but the tool executors, which keep nothing there.
fn redis_roles() -> Vec<Role> {
    Role::ALL
        .into_iter()
        .filter(|r| !keys::acl_patterns(*r).is_empty())
        .collect()
}

/// Each role's password or seed: kept from the env file at `path` when it has one, else
/// generated; the file is (re)written at mode 0600.
fn generate(
    path: &Path,
    server: &str,
    kind: Secret,
    roles: &[Role],
) -> anyhow::Result<BTreeMap<Role, String>> {
    let existing = match std::fs::read_to_string(path) {
        Ok(text) => parse_env(&text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
        Err(e) => return Err(e).with_context(|| format!("read {}", path.display())),
    };
    let mut out = BTreeMap::new();
    let mut text = format!(
        "# Generated by `nanobot deploy`: the {server} password of each fleet role (user = role\n\
         # name). Give each role only its own, e.g. NANOBOT_BUS__USER=agent and\n\
         # NANOBOT_BUS__PASSWORD=$NANOBOT_NATS_AGENT_PASSWORD, or\n\
         # NANOBOT_STORE__URL=redis://agent:$NANOBOT_REDIS_AGENT_PASSWORD@host:6379, or\n\
         # NANOBOT_BUS__NKEY_SEED=$NANOBOT_NATS_AGENT_NKEY_SEED.\n"
    );
    for role in roles {
        let var = match kind {
            Secret::Password => password_var(server, *role),
            Secret::NkeySeed => nkey_seed_var(*role),
        };
        let fresh = || match kind {
            Secret::Password => Ok(random_secret()),
            Secret::NkeySeed => nkeys::KeyPair::new_user()
                .seed()
                .map_err(|e| anyhow::anyhow!("generate an nkey: {e}")),
        };
        let password = match existing.get(&var).filter(|p| !p.is_empty()) {
            // Written into a quoted server config and a URL: only plain characters.
            Some(kept)
                if !kept
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') =>
            {
                anyhow::bail!(
                    "{var} in {} may only hold letters, digits, '-' and '_'; fix it or delete the line to generate a new one",
                    path.display()
                )
            }
            Some(kept) => kept.clone(),
            None => fresh()?,
        };
        let _ = writeln!(text, "{var}={password}");
        out.insert(*role, password);
    }
    write_private(path, &text).with_context(|| format!("write {}", path.display()))?;
    Ok(out)
}

/// `KEY=value` lines of an env file (comments and blank lines skipped).
pub fn parse_env(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The header line of `nats-config --env-refs` output.
const ENV_REFS_NOTE: &str =
    "# Each password is read from the server's environment: NANOBOT_NATS_<ROLE>_PASSWORD.\n";

/// The nats-server `authorization` block: one user per role (`logins`: its `user`/`password`
/// or `nkey` lines) with its permissions, after the header and `note`.
fn nats_config(logins: &BTreeMap<Role, String>, note: &str) -> String {
    let list = |items: &[String]| {
        items
            .iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut text = String::from(
        "# Generated by `nanobot deploy nats-config`: one user per fleet role, allowed only the\n\
         # subjects it needs (nanobot_proto::subjects::permissions). Use it as the server's\n\
         # config (`nats-server -c nats.conf -js …`) or `include` it in yours.\n",
    );
    text.push_str(note);
    text.push_str("authorization {\n  users = [\n");
    for (role, login) in logins {
        let p = subjects::permissions(*role, None);
        let _ = write!(
            text,
            "    {{\n      {login}\n      permissions: {{\n        \
             publish: {{ allow: [{}] }}\n        subscribe: {{ allow: [{}] }}\n      }}\n    }}\n",
            list(&p.publish),
            list(&p.subscribe),
        );
    }
    text.push_str("  ]\n}\n");
    text
}

/// Data commands a role may run: reads, writes, scripts (session writes are Lua), MULTI,
/// connection commands and `WAIT` (replication on clusters); nothing administrative or
/// dangerous (`FLUSHALL`, `CONFIG`, `KEYS`, `DEBUG`, …).
const REDIS_COMMANDS: &str =
    "-@all +@read +@write +@scripting +@transaction +@connection +select +wait -@admin -@dangerous";

/// The Redis ACL file: `default` off, one user per role with its key patterns.
pub fn redis_acl(passwords: &BTreeMap<Role, String>) -> String {
    let mut text = String::from("user default off resetkeys resetchannels -@all\n");
    for (role, password) in passwords {
        let hash: String = Sha256::digest(password.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let patterns: Vec<String> = keys::acl_patterns(*role)
            .iter()
            .map(|p| format!("~{p}"))
            .collect();
        let _ = writeln!(
            text,
            "user {} on #{hash} resetkeys {} resetchannels {REDIS_COMMANDS}",
            role.name(),
            patterns.join(" ")
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_generated_once_private_and_kept_on_rerun() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("nats.conf");
        run(&DeployCommand::NatsConfig {
            out: out.clone(),
            nkeys: false,
            env_refs: false,
        })
        .unwrap();
        let secrets = secrets_path(&out, "nats");
        let first = parse_env(&std::fs::read_to_string(&secrets).unwrap());
        assert_eq!(first.len(), Role::ALL.len(), "{first:?}");
        for path in [&out, &secrets] {
            let mode = std::fs::metadata(path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "{}", path.display());
        }
        let conf = std::fs::read_to_string(&out).unwrap();
        for (role, var) in Role::ALL.map(|r| (r, password_var("NATS", r))) {
            assert!(conf.contains(&format!("user: \"{}\"", role.name())));
            assert!(conf.contains(&first[&var]), "{var} in the server config");
        }
        run(&DeployCommand::NatsConfig {
            out: out.clone(),
            nkeys: false,
            env_refs: false,
        })
        .unwrap();
        let second = parse_env(&std::fs::read_to_string(&secrets).unwrap());
        assert_eq!(first, second, "a rerun keeps the deployed passwords");

        let var = password_var("NATS", Role::Tools);
        std::fs::write(&secrets, format!("{var}=a\"b\n")).unwrap();
        let err = run(&DeployCommand::NatsConfig {
            out: out.clone(),
            nkeys: false,
            env_refs: false,
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains(&var), "{err}");
        assert_eq!(
            std::fs::read_to_string(&out).unwrap(),
            conf,
            "the config is left as it was"
        );
    }

    #[test]
    fn env_refs_name_each_role_password_variable_and_write_no_secret() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("nats-users.conf");
        run(&DeployCommand::NatsConfig {
            out: out.clone(),
            nkeys: false,
            env_refs: true,
        })
        .unwrap();
        let conf = std::fs::read_to_string(&out).unwrap();
        for role in Role::ALL {
            let login = format!(
                "user: \"{}\"\n      password: ${}\n",
                role.name(),
                password_var("NATS", role)
            );
            assert!(conf.contains(&login), "{login} in {conf}");
        }
        assert!(
            !secrets_path(&out, "nats").exists(),
            "no env file: the passwords live in the server's environment"
        );
        let with_passwords = dir.path().join("nats.conf");
        run(&DeployCommand::NatsConfig {
            out: with_passwords.clone(),
            nkeys: false,
            env_refs: false,
        })
        .unwrap();
        let permissions = |text: &str| -> Vec<String> {
            text.lines()
                .filter(|l| l.contains("allow:"))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(
            permissions(&conf),
            permissions(&std::fs::read_to_string(&with_passwords).unwrap()),
            "the same users and permissions either way"
        );
    }

    #[test]
    fn the_acl_file_disables_default_and_stores_only_password_hashes() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("users.acl");
        run(&DeployCommand::RedisAcl { out: out.clone() }).unwrap();
        let acl = std::fs::read_to_string(&out).unwrap();
        let secrets = parse_env(&std::fs::read_to_string(secrets_path(&out, "redis")).unwrap());
        assert!(acl.starts_with("user default off"), "{acl}");
        assert!(!acl.contains("user tools"), "tools keep nothing in redis");
        for password in secrets.values() {
            assert!(!acl.contains(password.as_str()), "plain password in {acl}");
        }
        assert!(acl.contains("user agent on #"), "{acl}");
        assert!(acl.contains("-@dangerous"), "{acl}");
    }
}
