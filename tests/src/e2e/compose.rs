//! `docker-compose.yml` as Debian's `docker-compose` (v1, installed by `make test`) renders it:
//! valid, refused without any credential it names, every role given only its own logins, and
//! `scripts/credentials-env.sh` (`make compose-env`) generating those once. The servers started
//! as compose configures them are tried in `deploy_credentials.rs`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::{Command, Output};

use saphyr::{LoadableYamlNode as _, YamlOwned};
use serde_json::{Map, Value};
use sha2::Digest as _;

use nanobot_proto::subjects::Role;

use super::deploy_credentials::{credentials_env, has_redis_user, own_keys, password_key, root};

const ROLES: [&str; 5] = ["gateway", "agent", "tools", "memory", "cron"];

/// Runs `docker-compose config` with only the variables of `env_file` (no `.env`, no
/// inherited `NANOBOT_…` variable).
pub(super) fn compose_config(env_file: &Path) -> Output {
    let mut command = Command::new("docker-compose");
    command
        .arg("-f")
        .arg(root().join("docker-compose.yml"))
        .arg("--env-file")
        .arg(env_file)
        .arg("config");
    for (name, _) in std::env::vars() {
        if name.starts_with("NANOBOT_") {
            command.env_remove(name);
        }
    }
    command
        .output()
        .expect("run docker-compose (install it with `scripts/deps.sh compose`)")
}

/// The services of `docker-compose.yml` rendered with the credentials of `env_file`.
pub(super) fn render(env_file: &Path) -> Map<String, Value> {
    let out = compose_config(env_file);
    assert!(
        out.status.success(),
        "docker-compose config: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let docs = YamlOwned::load_from_str(&text).expect("docker-compose prints YAML");
    match docs.first().map(nanobot_core::skills::yaml_to_json) {
        Some(Value::Object(mut top)) => match top.remove("services") {
            Some(Value::Object(services)) => services,
            other => panic!("no services in {other:?}"),
        },
        other => panic!("not a compose file: {other:?}"),
    }
}

/// Every credential `docker-compose.yml` needs: each role's NATS password, each Redis user's
/// password (the operator's `cli` included), the API key.
fn expected_credentials() -> BTreeSet<String> {
    Role::ALL.iter().flat_map(|r| own_keys(r.name())).collect()
}

/// The SHA-256 of each Redis password, which is all the Redis service gets
/// (`NANOBOT_REDIS_AGENT_PASSWORD_SHA256`).
fn redis_password_hashes() -> BTreeSet<String> {
    Role::ALL
        .iter()
        .filter(|r| has_redis_user(r.name()))
        .map(|r| format!("{}_SHA256", password_key("REDIS", r.name())))
        .collect()
}

/// What `make compose-env` writes: the credentials and the Redis password hashes.
fn expected_env_keys() -> BTreeSet<String> {
    let mut keys = expected_credentials();
    keys.extend(redis_password_hashes());
    keys
}

#[test]
fn docker_compose_gives_each_role_only_its_own_logins() {
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join(".env");
    let creds = credentials_env(&env_file, &[root().join("docker-compose.yml")]);
    assert_eq!(
        creds.keys().cloned().collect::<BTreeSet<_>>(),
        expected_env_keys(),
        "make compose-env writes every role's logins, the API key and the Redis hashes"
    );
    for hash in redis_password_hashes() {
        let password = &creds[hash.trim_end_matches("_SHA256")];
        assert_eq!(
            creds[&hash],
            hex::encode(sha2::Sha256::digest(password.as_bytes())),
            "{hash} is the SHA-256 of its password"
        );
    }
    let services = render(&env_file);
    // The credentials a service's rendered config holds, anywhere in it.
    let holds = |service: &str| -> BTreeSet<String> {
        let text = services[service].to_string();
        creds
            .iter()
            .filter(|(_, value)| text.contains(value.as_str()))
            .map(|(key, _)| key.clone())
            .collect()
    };
    for role in ROLES {
        let name = format!("nanobot-{role}");
        let service = &services[&name];
        assert_eq!(
            service["command"][0],
            name.as_str(),
            "{name} runs its binary"
        );
        let env = &service["environment"];
        assert_eq!(env["NANOBOT_BUS__USER"], role, "{name}'s NATS user");
        assert_eq!(
            env["NANOBOT_BUS__PASSWORD"],
            creds[&password_key("NATS", role)].as_str()
        );
        let store = has_redis_user(role).then(|| {
            let password = &creds[&password_key("REDIS", role)];
            Value::String(format!("redis://{role}:{password}@redis:6379"))
        });
        assert_eq!(
            env.get("NANOBOT_STORE__URL"),
            store.as_ref(),
            "{name}'s Redis user"
        );
        assert_eq!(
            holds(&name),
            own_keys(role),
            "{name} holds only its own logins"
        );
        let env: HashMap<String, String> = env
            .as_object()
            .expect("environment")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        if let Err(e) = nanobot_runtime::config::load_str(None, Path::new("config.json"), &env) {
            panic!("{name}'s config loads without problems: {e}");
        }
    }
    assert_eq!(
        services["nanobot-gateway"]["environment"]["NANOBOT_API__API_KEY"],
        creds["NANOBOT_API_KEY"].as_str()
    );
    let all = |server: &str| -> BTreeSet<String> {
        expected_credentials()
            .into_iter()
            .filter(|k| k.starts_with(&format!("NANOBOT_{server}_")))
            .collect()
    };
    assert_eq!(
        holds("nats"),
        all("NATS"),
        "NATS checks every NATS password"
    );
    assert_eq!(
        holds("redis"),
        redis_password_hashes(),
        "Redis gets each Redis password's hash and no password, so `docker inspect` and `ps` \
         show none"
    );
    assert!(all("REDIS").len() > 3);
    assert_eq!(
        holds("bus-init"),
        BTreeSet::from([password_key("NATS", "cli")]),
        "the stream setup logs in as the operator"
    );
    assert_eq!(
        services["bus-init"]["environment"]["NANOBOT_BUS__USER"],
        "cli"
    );
    assert!(holds("jaeger").is_empty());
    let redis: Vec<&str> = services["redis"]["command"]
        .as_array()
        .expect("redis command as a list")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(
        redis.windows(3).any(|w| w == ["--user", "default", "off"])
            && !redis.contains(&"--requirepass"),
        "no default Redis login: {redis:?}"
    );
}

#[test]
fn docker_compose_refuses_to_start_without_any_credential() {
    let text = std::fs::read_to_string(root().join("docker-compose.yml")).unwrap();
    let references: Vec<&str> = text
        .split("${")
        .skip(1)
        .map(|rest| rest.split('}').next().unwrap_or_default())
        .collect();
    assert!(references.len() > 20, "{references:?}");
    for reference in &references {
        assert!(
            reference.contains(":?") && reference.contains("make compose-env"),
            "compose must refuse to start without ${{{reference}}}"
        );
    }

    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.env");
    std::fs::write(&empty, "").unwrap();
    let out = compose_config(&empty);
    assert!(
        !out.status.success(),
        "compose without credentials is refused"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("make compose-env"), "{stderr}");

    let partial = dir.path().join("partial.env");
    let creds = credentials_env(&partial, &[root().join("docker-compose.yml")]);
    let missing = password_key("NATS", "tools");
    let kept: String = creds
        .iter()
        .filter(|(k, _)| **k != missing)
        .map(|(k, v)| format!("{k}={v}\n"))
        .collect();
    std::fs::write(&partial, kept).unwrap();
    let out = compose_config(&partial);
    assert!(
        !out.status.success(),
        "compose without {missing} is refused"
    );
}

#[test]
fn compose_env_generates_private_credentials_once_and_rotates_one() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("scripts")).unwrap();
    let script = dir.path().join("scripts/credentials-env.sh");
    std::fs::copy(root().join("scripts/credentials-env.sh"), &script).unwrap();
    std::fs::copy(
        root().join("docker-compose.yml"),
        dir.path().join("docker-compose.yml"),
    )
    .unwrap();
    let env_file = dir.path().join(".env");
    // `make compose-env`: the script with no arguments, next to docker-compose.yml.
    let run = || -> BTreeMap<String, String> {
        let status = Command::new("bash").arg(&script).status().unwrap();
        assert!(status.success());
        super::deploy_credentials::parse_env(&std::fs::read_to_string(&env_file).unwrap())
    };
    let first = run();
    assert_eq!(
        first.keys().cloned().collect::<BTreeSet<_>>(),
        expected_env_keys()
    );
    for (key, value) in &first {
        assert!(
            value.len() == 64 && value.chars().all(|c| c.is_ascii_hexdigit()),
            "{key}={value}"
        );
    }
    let distinct: BTreeSet<&String> = first.values().collect();
    assert_eq!(distinct.len(), first.len(), "every credential is its own");
    let mode = std::fs::metadata(&env_file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(run(), first, "kept on the next run");

    // Rotation: delete one line, run again; only that credential (and its hash) changes.
    let rotated = password_key("REDIS", "agent");
    let rotated_hash = format!("{rotated}_SHA256");
    let text = std::fs::read_to_string(&env_file).unwrap();
    let kept: String = text
        .lines()
        .filter(|l| !l.starts_with(&format!("{rotated}=")))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&env_file, kept).unwrap();
    let second = run();
    for (key, value) in &first {
        if *key == rotated || *key == rotated_hash {
            assert_ne!(&second[key], value, "{key} is new");
        } else {
            assert_eq!(&second[key], value, "{key} is kept");
        }
    }
}

/// The volumes of a rendered service, as `source:target:mode`.
fn volumes(service: &Value) -> BTreeSet<String> {
    service["volumes"]
        .as_array()
        .map(|v| {
            v.iter()
                .filter_map(|m| m.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn waits_for_scoping(service: &Value) -> bool {
    service["depends_on"]["config-scope"]["condition"] == "service_completed_successfully"
}

#[test]
fn only_the_scoping_step_mounts_the_whole_config_and_each_role_gets_its_own_copy() {
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join(".env");
    credentials_env(&env_file, &[root().join("docker-compose.yml")]);
    let services = render(&env_file);

    let whole = format!("{}:", root().join("config").display());
    let mounting_whole: BTreeSet<&str> = services
        .iter()
        .filter(|(_, s)| volumes(s).iter().any(|v| v.starts_with(&whole)))
        .map(|(name, _)| name.as_str())
        .collect();
    assert_eq!(
        mounting_whole,
        BTreeSet::from(["config-scope"]),
        "no role reads the whole config.json"
    );
    let scope = &services["config-scope"];
    assert_eq!(scope["network_mode"], "none");
    for role in ROLES.iter().chain(&["cli"]) {
        assert!(
            volumes(scope).contains(&format!("config-{role}:/home/nanobot/scoped/{role}:rw")),
            "config-scope writes {role}'s copy: {:?}",
            volumes(scope)
        );
    }
    for role in ROLES {
        let name = format!("nanobot-{role}");
        assert_eq!(
            volumes(&services[&name]),
            BTreeSet::from([
                format!("config-{role}:/home/nanobot/.nanobot:ro"),
                "workspace:/workspace:rw".to_string(),
            ]),
            "{name} mounts only its own config"
        );
        assert!(waits_for_scoping(&services[&name]), "{name}");
    }
    assert_eq!(
        volumes(&services["bus-init"]),
        BTreeSet::from(["config-cli:/home/nanobot/.nanobot:ro".to_string()])
    );
    assert!(waits_for_scoping(&services["bus-init"]));

    // The scoping command as compose runs it, with the built `nanobot`, in a home laid out as
    // the container's: each role's volume gets its own copy, with only its own secrets.
    use super::config_scope::{canaries_in, canaries_kept, full_config};
    let home = tempfile::tempdir().unwrap();
    let home_dir = home.path().to_str().unwrap();
    std::fs::create_dir(home.path().join(".nanobot")).unwrap();
    std::fs::write(
        home.path().join(".nanobot/config.json"),
        full_config().to_string(),
    )
    .unwrap();
    for role in ROLES.iter().chain(&["cli"]) {
        std::fs::create_dir_all(home.path().join("scoped").join(role)).unwrap();
    }
    let command: Vec<String> = scope["command"]
        .as_array()
        .expect("config-scope's command as a list")
        .iter()
        .map(|a| {
            a.as_str()
                .unwrap()
                .replace("$$", "$")
                .replace("/home/nanobot", home_dir)
        })
        .collect();
    let bin_dir = crate::harness::bin_path("nanobot").unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut run = Command::new(&command[0]);
    run.args(&command[1..])
        .env("HOME", home.path())
        .env("PATH", path);
    for (name, _) in std::env::vars() {
        if name.starts_with("NANOBOT_") {
            run.env_remove(name);
        }
    }
    let out = run.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    for role in ROLES.iter().chain(&["cli"]) {
        let copy = home.path().join("scoped").join(role).join("config.json");
        let text = std::fs::read_to_string(&copy).unwrap();
        assert_eq!(canaries_in(&text), canaries_kept(role), "{role}: {text}");
    }
}
