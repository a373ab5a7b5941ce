//! `nanobot deploy nats-config` and `nanobot deploy redis-acl`: server-side configurations
//! with one user per fleet role and the least rights each role needs, derived from
//! `nanobot_proto::subjects::permissions` and `nanobot_proto::keys::acl_patterns_of`.
//!
//! Each writes the server file and, next to it, an env file (mode 0600) with every role's
//! generated password; running the command again keeps the passwords already in that file,
//! so a deployed fleet keeps working when its configuration is regenerated.
//!
//! With `--bot` (repeatable), each bot is isolated: NATS gets one account per bot (its own
//! JetStream: streams, consumers and payload store exist per bot, so one bot's users cannot
//! even name another's), Redis one user per role and bot allowed that bot's keys only; the
//! users are `<role>-<bot>` and the role processes of each bot run with `--bot <bot>`.

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
    /// With `--bot`: one account per bot, users `<role>-<bot>`.
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
        /// Isolate this bot (repeatable): its own NATS account (its own streams, consumers
        /// and payload store) with users `<role>-<bot>` allowed only its subjects; variables
        /// `NANOBOT_NATS_<ROLE>_<BOT>_PASSWORD`. Run each bot's roles with `--bot <bot>` and
        /// `nanobot bus init` once per account, as its `cli-<bot>` user. Bot ids: letters,
        /// digits, `-` and `_`.
        #[arg(long = "bot", value_name = "BOT")]
        bots: Vec<String>,
    },
    /// Write a Redis ACL file (`aclfile`): one user per role allowed only its keys and
    /// data commands, the `default` user off; passwords go to `redis-secrets.env`. With
    /// `--bot`: users `<role>-<bot>` allowed only that bot's keys.
    RedisAcl {
        /// The file to write (passwords are stored as SHA-256 hashes).
        #[arg(long, default_value = "users.acl")]
        out: PathBuf,
        /// Isolate this bot (repeatable): users `<role>-<bot>` whose keys are that bot's only
        /// (`NANOBOT_REDIS_<ROLE>_<BOT>_PASSWORD`). Bot ids: letters, digits, `-` and `_`.
        #[arg(long = "bot", value_name = "BOT")]
        bots: Vec<String>,
    },
}

/// One user `nanobot deploy` writes: a role's, for every bot (`bot` = `None`) or for one bot
/// of a per-bot deployment.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Login {
    bot: Option<String>,
    role: Role,
}

impl Login {
    /// Every role's login, for every bot (no `bots`) or for each of `bots`.
    fn all(bots: &[String], roles: &[Role]) -> Vec<Login> {
        let scopes: Vec<Option<String>> = if bots.is_empty() {
            vec![None]
        } else {
            bots.iter().cloned().map(Some).collect()
        };
        scopes
            .iter()
            .flat_map(|bot| {
                roles.iter().map(|role| Login {
                    bot: bot.clone(),
                    role: *role,
                })
            })
            .collect()
    }

    /// The user name: the role's (`agent`), or `agent-<bot>`.
    fn user(&self) -> String {
        match &self.bot {
            None => self.role.name().to_string(),
            Some(bot) => format!("{}-{bot}", self.role.name()),
        }
    }

    /// The env variable holding this login's `what` (`PASSWORD`, `NKEY_SEED`) for `server`.
    fn var(&self, server: &str, what: &str) -> String {
        let user = self.user().to_ascii_uppercase().replace('-', "_");
        format!("NANOBOT_{server}_{user}_{what}")
    }
}

/// Checks the bot ids of a per-bot deployment. Each names a NATS account and is part of user
/// names, env variables (upper-cased, `-` as `_`), subjects and Redis key patterns: only
/// letters, digits, `-` and `_` are safe in all of them (a brace would digest the bot's Redis
/// hash tag, `*` or `?` would widen its key patterns, `.` would split its subjects).
fn check_bots(bots: &[String]) -> anyhow::Result<()> {
    let mut vars: BTreeMap<String, &str> = BTreeMap::new();
    for bot in bots {
        if bot.is_empty()
            || !bot
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            anyhow::bail!(
                "--bot {bot:?}: a per-bot deployment needs bot ids of letters, digits, '-' and '_' only \
                 (the id names a NATS account, users, env variables and Redis key patterns)"
            );
        }
        if bot.len() > subjects::MAX_TOKEN {
            anyhow::bail!(
                "--bot {bot}: longer than {} characters",
                subjects::MAX_TOKEN
            );
        }
        let var = bot.to_ascii_uppercase().replace('-', "_");
        if let Some(other) = vars.insert(var.clone(), bot) {
            anyhow::bail!(
                "--bot {other} and --bot {bot} would share the env variables NANOBOT_…_{var}_PASSWORD; \
                 give each bot once, with ids that differ in more than case or '-'/'_'"
            );
        }
    }
    Ok(())
}

/// Runs a deploy command and prints what it wrote.
pub fn run(command: &DeployCommand) -> anyhow::Result<()> {
    let (out, secrets) = match command {
        DeployCommand::NatsConfig {
            out,
            env_refs: true,
            bots,
            ..
        } => {
            check_bots(bots)?;
            let logins = Login::all(bots, &Role::ALL)
                .into_iter()
                .map(|login| {
                    let var = login.var("NATS", "PASSWORD");
                    let text = format!("user: \"{}\"\n      password: ${var}", login.user());
                    (login, text)
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
        DeployCommand::NatsConfig {
            out, nkeys, bots, ..
        } => {
            check_bots(bots)?;
            let secrets = secrets_path(out, "nats");
            let kind = if *nkeys {
                Secret::NkeySeed
            } else {
                Secret::Password
            };
            let generated = generate(&secrets, "NATS", kind, Login::all(bots, &Role::ALL))?;
            let logins = generated
                .into_iter()
                .map(|(login, secret)| {
                    let text = match kind {
                        Secret::Password => {
                            format!("user: \"{}\"\n      password: \"{secret}\"", login.user())
                        }
                        Secret::NkeySeed => {
                            let pair = nkeys::KeyPair::from_seed(&secret).map_err(|e| {
                                anyhow::anyhow!("nkey seed of {}: {e}", login.user())
                            })?;
                            format!("nkey: \"{}\"", pair.public_key())
                        }
                    };
                    Ok((login, text))
                })
                .collect::<anyhow::Result<BTreeMap<_, _>>>()?;
            write_private(out, &nats_config(&logins, ""))
                .with_context(|| format!("write {}", out.display()))?;
            (out, secrets)
        }
        DeployCommand::RedisAcl { out, bots } => {
            check_bots(bots)?;
            let secrets = secrets_path(out, "redis");
            let passwords = generate(&secrets, "REDIS", Secret::Password, redis_logins(bots))?;
            write_private(out, &redis_acl(&passwords))
                .with_context(|| format!("write {}", out.display()))?;
            (out, secrets)
        }
    };
    println!("wrote {} and {} (0600)", out.display(), secrets.display());
    Ok(())
}

/// The NATS users of the local fleet (`nanobot up`): one per role, with the permissions of
/// `nanobot deploy nats-config` and the password of `passwords` (by role name).
pub fn local_nats_users(passwords: &BTreeMap<String, String>) -> String {
    let logins = Login::all(&[], &Role::ALL)
        .into_iter()
        .filter_map(|login| {
            let password = passwords.get(login.role.name())?;
            let entry = format!(
                "user: {}\n      password: {}",
                serde_json::Value::from(login.user()),
                serde_json::Value::from(password.as_str())
            );
            Some((login, entry))
        })
        .collect();
    nats_config(&logins, "")
}

/// The Redis users of the local fleet (`nanobot up`, lines of a `redis.conf`): `default` off,
/// one per role with a Redis user, with the rules of `nanobot deploy redis-acl`.
pub fn local_redis_users(passwords: &BTreeMap<String, String>) -> String {
    let logins = redis_logins(&[])
        .into_iter()
        .filter_map(|login| Some((login.clone(), passwords.get(login.role.name())?.clone())))
        .collect();
    redis_acl(&logins)
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
    Login { bot: None, role }.var(server, "PASSWORD")
}

/// Logins with a Redis user: every role but the tool executors, which keep nothing there.
fn redis_logins(bots: &[String]) -> Vec<Login> {
    let roles: Vec<Role> = Role::ALL
        .into_iter()
        .filter(|r| !keys::acl_patterns(*r).is_empty())
        .collect();
    Login::all(bots, &roles)
}

/// Each login's password or seed: kept from the env file at `path` when it has one, else
/// generated; the file is (re)written at mode 0600.
fn generate(
    path: &Path,
    server: &str,
    kind: Secret,
    logins: Vec<Login>,
) -> anyhow::Result<BTreeMap<Login, String>> {
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
    if logins.iter().any(|l| l.bot.is_some()) {
        text.push_str(
            "# Per bot: user agent-<bot> with NANOBOT_NATS_AGENT_<BOT>_PASSWORD, and the role\n\
             # run with --bot <bot>.\n",
        );
    }
    for login in logins {
        let var = match kind {
            Secret::Password => login.var(server, "PASSWORD"),
            Secret::NkeySeed => login.var(server, "NKEY_SEED"),
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
        out.insert(login, password);
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

/// The header lines of a per-bot `nats-config`.
const PER_BOT_NOTE: &str = "# One account per bot: its own JetStream (streams, consumers, payloads), users\n\
     # <role>-<bot> allowed only that bot's subjects. Run `nanobot bus init` once per account\n\
     # (as cli-<bot>) and each bot's roles with --bot <bot>.\n";

/// The nats-server configuration: one user per login (`logins`: its `user`/`password` or
/// `nkey` lines) with its permissions, after the header and `note`; all in the `authorization`
/// block, or per bot in its own account.
fn nats_config(logins: &BTreeMap<Login, String>, note: &str) -> String {
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
    let mut accounts: BTreeMap<Option<&str>, String> = BTreeMap::new();
    for (login, entry) in logins {
        let p = subjects::permissions(login.role, login.bot.as_deref());
        let users = accounts.entry(login.bot.as_deref()).or_default();
        let _ = write!(
            users,
            "    {{\n      {entry}\n      permissions: {{\n        \
             publish: {{ allow: [{}] }}\n        subscribe: {{ allow: [{}] }}\n        \
             allow_responses: {{ max: -1, expires: \"{}\" }}\n      }}\n    }}\n",
            list(&p.publish),
            list(&p.subscribe),
            subjects::RESPONSE_WINDOW,
        );
    }
    if let Some(users) = accounts.get(&None) {
        text.push_str("authorization {\n  users = [\n");
        text.push_str(users);
        text.push_str("  ]\n}\n");
        return text;
    }
    text.push_str(PER_BOT_NOTE);
    text.push_str("accounts {\n");
    for (bot, users) in &accounts {
        let bot = bot.unwrap_or_default();
        let _ = write!(
            text,
            "  \"{bot}\": {{\n    jetstream: enabled\n    users = [\n{}    ]\n  }}\n",
            indent(users, "    ")
        );
    }
    text.push_str("}\n");
    text
}

/// `text` with `prefix` before each line.
fn indent(text: &str, prefix: &str) -> String {
    text.lines().map(|l| format!("{prefix}{l}\n")).collect()
}

/// Data commands a role may run: reads, writes, scripts (session writes are Lua), MULTI,
/// connection commands, `WAIT` and `ROLE` (a session write waits for a replica when the
/// primary lists one); nothing else administrative or
/// dangerous (`FLUSHALL`, `CONFIG`, `DEBUG`, …), and nothing that lists key names beyond the
/// user's patterns (`KEYS`, `SCAN`, `RANDOMKEY`, `DBSIZE`: a per-bot user would see every
/// bot's), which no role needs (each reads keys it can name, or an index key).
const REDIS_COMMANDS: &str = "-@all +@read +@write +@scripting +@transaction +@connection +select +wait \
     -@admin -@dangerous -keys -scan -randomkey -dbsize +role";

/// The Redis ACL file: `default` off, one user per login with its key patterns.
fn redis_acl(passwords: &BTreeMap<Login, String>) -> String {
    let mut text = String::from("user default off resetkeys resetchannels -@all\n");
    for (login, password) in passwords {
        let hash: String = Sha256::digest(password.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let bot = login.bot.as_deref();
        let patterns: Vec<String> = keys::acl_patterns_of(login.role, bot)
            .iter()
            .map(|p| format!("~{p}"))
            .chain(
                keys::acl_read_patterns_of(login.role, bot)
                    .iter()
                    .map(|p| format!("%R~{p}")),
            )
            .collect();
        let _ = writeln!(
            text,
            "user {} on #{hash} resetkeys {} resetchannels {REDIS_COMMANDS}",
            login.user(),
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
            bots: Vec::new(),
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
            bots: Vec::new(),
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
            bots: Vec::new(),
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
            bots: Vec::new(),
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
            bots: Vec::new(),
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
        run(&DeployCommand::RedisAcl {
            out: out.clone(),
            bots: Vec::new(),
        })
        .unwrap();
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

    fn bots(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|b| (*b).to_string()).collect()
    }

    #[test]
    fn per_bot_nats_config_gives_each_bot_its_own_account_and_users() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("nats.conf");
        let nats = |bots: Vec<String>| DeployCommand::NatsConfig {
            out: out.clone(),
            nkeys: false,
            env_refs: false,
            bots,
        };
        run(&nats(bots(&["alpha", "beta-2"]))).unwrap();
        let conf = std::fs::read_to_string(&out).unwrap();
        let secrets = parse_env(&std::fs::read_to_string(secrets_path(&out, "nats")).unwrap());
        assert_eq!(secrets.len(), 2 * Role::ALL.len(), "{secrets:?}");
        assert!(!conf.contains("authorization"), "{conf}");
        for (bot, var) in [("alpha", "ALPHA"), ("beta-2", "BETA_2")] {
            assert!(conf.contains(&format!("  \"{bot}\": {{\n    jetstream: enabled\n")));
            for role in Role::ALL {
                let user = format!("user: \"{}-{bot}\"", role.name());
                assert!(conf.contains(&user), "{user} in {conf}");
                let key = format!("NANOBOT_NATS_{}_{var}_PASSWORD", role.name().to_uppercase());
                assert!(conf.contains(&secrets[&key]), "{key}");
            }
            let inbound = format!("\"{}\"", subjects::scoped(subjects::INBOUND_ALL, Some(bot)));
            assert!(conf.contains(&inbound), "{inbound} in {conf}");
        }
        for every_bot in [
            subjects::INBOUND_ALL,
            subjects::OUTBOUND_ALL,
            subjects::JOBS_ALL,
            subjects::CONSOLIDATE_ALL,
            subjects::CRON_FIRE_ALL,
            subjects::SUBAGENT_ALL,
            subjects::EVENTS_ALL,
            subjects::EXEC_SESSIONS_ALL,
            subjects::TOOL_CALL_ALL,
            subjects::TOOL_LIST_ALL,
            subjects::STOP_ALL,
        ] {
            assert!(
                !conf.contains(every_bot),
                "no user may reach every bot ({every_bot}): {conf}"
            );
        }

        run(&DeployCommand::NatsConfig {
            out: out.clone(),
            nkeys: false,
            env_refs: true,
            bots: bots(&["alpha"]),
        })
        .unwrap();
        let refs = std::fs::read_to_string(&out).unwrap();
        assert!(
            refs.contains(
                "user: \"agent-alpha\"\n          password: $NANOBOT_NATS_AGENT_ALPHA_PASSWORD\n"
            ),
            "{refs}"
        );

        let keyed = dir.path().join("nkeys").join("nats.conf");
        std::fs::create_dir_all(keyed.parent().unwrap()).unwrap();
        run(&DeployCommand::NatsConfig {
            out: keyed.clone(),
            nkeys: true,
            env_refs: false,
            bots: bots(&["alpha"]),
        })
        .unwrap();
        let conf = std::fs::read_to_string(&keyed).unwrap();
        let seeds = parse_env(&std::fs::read_to_string(secrets_path(&keyed, "nats")).unwrap());
        let seed = &seeds["NANOBOT_NATS_AGENT_ALPHA_NKEY_SEED"];
        let public = nkeys::KeyPair::from_seed(seed).unwrap().public_key();
        assert!(conf.contains(&format!("nkey: \"{public}\"")), "{conf}");
        assert!(conf.contains("  \"alpha\": {") && !conf.contains(seed.as_str()));
    }

    #[test]
    fn per_bot_mode_refuses_bot_ids_that_cannot_name_an_account_a_variable_or_a_key_pattern() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("users.acl");
        for (ids, needle) in [
            (bots(&["a.b"]), "\"a.b\""),
            (bots(&["{x}"]), "\"{x}\""),
            (bots(&["a*"]), "\"a*\""),
            (bots(&[""]), "\"\""),
            (bots(&["a-b", "A_B"]), "--bot a-b and --bot A_B"),
            (bots(&["x", "x"]), "--bot x and --bot x"),
        ] {
            let err = run(&DeployCommand::RedisAcl {
                out: out.clone(),
                bots: ids.clone(),
            })
            .unwrap_err()
            .to_string();
            assert!(err.contains(needle), "{ids:?}: {err}");
            let err = run(&DeployCommand::NatsConfig {
                out: dir.path().join("nats.conf"),
                nkeys: false,
                env_refs: true,
                bots: ids,
            })
            .unwrap_err()
            .to_string();
            assert!(err.contains(needle), "{err}");
        }
        assert!(
            !out.exists() && !dir.path().join("nats.conf").exists(),
            "nothing written"
        );
    }

    #[test]
    fn per_bot_acl_users_reach_only_their_bots_keys() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("users.acl");
        run(&DeployCommand::RedisAcl {
            out: out.clone(),
            bots: bots(&["alpha", "beta"]),
        })
        .unwrap();
        let acl = std::fs::read_to_string(&out).unwrap();
        let secrets = parse_env(&std::fs::read_to_string(secrets_path(&out, "redis")).unwrap());
        assert!(
            secrets.contains_key("NANOBOT_REDIS_AGENT_BETA_PASSWORD"),
            "{secrets:?}"
        );
        let agent = acl
            .lines()
            .find(|l| l.starts_with("user agent-alpha on #"))
            .unwrap_or_else(|| panic!("{acl}"));
        assert!(
            agent.contains("~nanobot:{alpha:*}:session:messages"),
            "{agent}"
        );
        assert!(!agent.contains("beta") && !agent.contains("{*}"), "{agent}");
        assert!(!acl.contains("user tools-"), "{acl}");
        assert!(acl.contains("user cron-beta on #"), "{acl}");
    }
}
