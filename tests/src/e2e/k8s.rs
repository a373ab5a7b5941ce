//! The Kubernetes manifests (`deploy/k8s`): each overlay renders with kustomize (`kubectl
//! kustomize`), passes schema validation offline (`kubernetes-validate --strict`, which bundles
//! the API schemas), and the rendered objects fit the fleet: every role runs its binary with
//! probes on its health endpoints, limits and a disruption budget; every referenced ConfigMap,
//! Secret and claim exists; the config is valid for the fleet's own loader and asks for as many
//! stream replicas as there are NATS servers; the agent scales on the inbound consumer the
//! fleet really uses; every role's pod holds only its own logins (its NATS and Redis passwords,
//! the API key for the gateway), the NATS pods every NATS password, Redis every Redis one.
//! `make test` installs kubectl and the validator (`scripts/deps.sh k8s`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

use nanobot_proto::subjects::{self, Role};
use nanobot_runtime::testsuite::find_server_binary;

use super::deploy_credentials::{credentials_env, has_redis_user, own_keys, password_key};

const ROLES: [&str; 5] = ["gateway", "agent", "tools", "memory", "cron"];

/// The Secret of the fleet's logins, one key per role and server (and the API key): generated
/// by the local overlay, created by the operator in production.
const CREDENTIALS: &str = "nanobot-credentials";

/// The optional Secret of provider API keys, created by the operator.
const LLM_SECRET: &str = "nanobot-llm-secrets";

/// The optional Secret of channel tokens, created by the operator.
const CHANNEL_SECRET: &str = "nanobot-channel-secrets";

/// The operator's Secret a role reads whole: provider keys reach only the roles that call
/// LLMs, channel tokens only the gateway.
fn operator_secret_of(role: &str) -> Option<&'static str> {
    match role {
        "agent" | "memory" => Some(LLM_SECRET),
        "gateway" => Some(CHANNEL_SECRET),
        _ => None,
    }
}

fn overlay(name: &str) -> PathBuf {
    PathBuf::from(manifest_dir())
        .parent()
        .expect("workspace root")
        .join("deploy/k8s/overlays")
        .join(name)
}

/// The rendered objects of one overlay, schema-validated.
pub(super) struct Rendered {
    pub(super) objects: Vec<Value>,
}

/// Renders the overlay `name` with kustomize and validates it.
pub(super) fn render(name: &str) -> Rendered {
    let kubectl = find_server_binary("kubectl", "NANOBOT_KUBECTL").expect("kubectl");
    let out = Command::new(&kubectl)
        .arg("kustomize")
        .arg(overlay(name))
        .output()
        .expect("run kubectl kustomize");
    assert!(
        out.status.success(),
        "kustomize {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(format!("{name}.yaml"));
    std::fs::write(&file, &out.stdout).unwrap();

    let validator = find_server_binary("kubernetes-validate", "NANOBOT_KUBERNETES_VALIDATE")
        .expect("kubernetes-validate");
    let check = Command::new(&validator)
        .args(["--strict", "--quiet", "-k", "1.30.0"])
        .arg(&file)
        .output()
        .expect("run kubernetes-validate");
    let report = String::from_utf8_lossy(&check.stdout).to_string()
        + &String::from_utf8_lossy(&check.stderr);
    assert!(
        check.status.success() && !report.contains("ERROR"),
        "{name} does not validate:\n{report}"
    );

    // YAML to JSON with the validator's own Python (its venv has PyYAML).
    let python = std::fs::canonicalize(&validator)
        .unwrap()
        .with_file_name("python");
    let json = Command::new(python)
        .args([
            "-c",
            "import json, sys, yaml; json.dump([d for d in yaml.safe_load_all(sys.stdin) if d], sys.stdout)",
        ])
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .expect("convert YAML to JSON");
    assert!(
        json.status.success(),
        "{}",
        String::from_utf8_lossy(&json.stderr)
    );
    let objects: Vec<Value> = serde_json::from_slice(&json.stdout).unwrap();
    assert!(objects.len() > 20, "{name} renders the fleet");
    Rendered { objects }
}

impl Rendered {
    /// The object of `kind` named `name`.
    pub(super) fn find(&self, kind: &str, name: &str) -> &Value {
        self.objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("{kind} {name} is rendered"))
    }

    /// Names of objects of `kind`.
    fn names(&self, kind: &str) -> BTreeSet<String> {
        self.objects
            .iter()
            .filter(|o| o["kind"] == kind)
            .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
            .collect()
    }

    /// The rendered ConfigMap generated from `name` (kustomize appends a content hash).
    pub(super) fn config_map(&self, name: &str) -> &Value {
        let prefix = format!("{name}-");
        self.objects
            .iter()
            .find(|o| {
                o["kind"] == "ConfigMap"
                    && o["metadata"]["name"]
                        .as_str()
                        .is_some_and(|n| n.starts_with(&prefix))
            })
            .unwrap_or_else(|| panic!("config map {name} is rendered"))
    }

    /// Every (kind, name) a pod spec requires: config maps, secrets and claims.
    fn references(&self) -> Vec<(&'static str, String)> {
        fn walk(v: &Value, out: &mut Vec<(&'static str, String)>) {
            match v {
                Value::Object(map) => {
                    for (key, child) in map {
                        let name = child["name"].as_str().map(str::to_string);
                        // An optional reference may be absent (the operator's Secrets).
                        let name = name.filter(|_| child["optional"] != true);
                        match (key.as_str(), name) {
                            ("configMapRef" | "configMapKeyRef" | "configMap", Some(n)) => {
                                out.push(("ConfigMap", n))
                            }
                            ("secretRef" | "secretKeyRef", Some(n)) => out.push(("Secret", n)),
                            _ => {}
                        }
                        if key == "persistentVolumeClaim" {
                            let claim = child["claimName"].as_str().unwrap_or_default();
                            out.push(("PersistentVolumeClaim", claim.to_string()));
                        }
                        walk(child, out);
                    }
                }
                Value::Array(items) => items.iter().for_each(|i| walk(i, out)),
                _ => {}
            }
        }
        let mut out = Vec::new();
        for o in &self.objects {
            walk(&o["spec"], &mut out);
        }
        out
    }

    /// The config `role` loads: config.json plus the env overrides of the `nanobot-env`
    /// ConfigMap and of its container's `env` (Secret keys from the rendered Secret, or, in
    /// production, from what the operator's Secret holds: `operator`).
    fn fleet_config(
        &self,
        role: &str,
        operator: &BTreeMap<String, String>,
    ) -> nanobot_runtime::config::Config {
        let config = self.config_map("nanobot-config");
        let text = config["data"]["config.json"].as_str().expect("config.json");
        let mut env: HashMap<String, String> = self.config_map("nanobot-env")["data"]
            .as_object()
            .expect("env data")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        let pod = format!("nanobot-{role}");
        let container = &self.find("Deployment", &pod)["spec"]["template"]["spec"]["containers"][0];
        env.extend(self.container_env(container, &pod, operator));
        nanobot_runtime::config::load_str(Some(text), Path::new("config.json"), &env)
            .unwrap_or_else(|e| panic!("{pod}'s config loads without problems: {e}"))
    }
}

impl Rendered {
    /// The value of `key` in the Secret `name`: from the rendered Secret, or from `operator`
    /// (what the operator's Secret holds) when it is not rendered.
    fn secret_value(&self, name: &str, key: &str, operator: &BTreeMap<String, String>) -> String {
        use base64::Engine as _;
        let Some(secret) = self
            .objects
            .iter()
            .find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == name)
        else {
            return operator
                .get(key)
                .unwrap_or_else(|| panic!("the operator's Secret {name} has no {key}"))
                .clone();
        };
        let data = secret["data"][key]
            .as_str()
            .unwrap_or_else(|| panic!("Secret {name} has no {key}"));
        let raw = base64::engine::general_purpose::STANDARD
            .decode(data)
            .expect("secret data is base64");
        String::from_utf8(raw).expect("utf-8 secret")
    }

    /// A container's `env` as the kubelet resolves it: Secret keys read (`operator` for a
    /// Secret that is not rendered), `$(VAR)` of earlier entries expanded, `metadata.name` as
    /// `<pod>-0`.
    pub(super) fn container_env(
        &self,
        container: &Value,
        pod: &str,
        operator: &BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for entry in container["env"].as_array().into_iter().flatten() {
            let name = entry["name"].as_str().expect("env name").to_string();
            let from = &entry["valueFrom"];
            let value = if let Some(r) = from.get("secretKeyRef") {
                let secret = r["name"].as_str().expect("secret name");
                self.secret_value(secret, r["key"].as_str().expect("key"), operator)
            } else if from.get("fieldRef").is_some() {
                format!("{pod}-0")
            } else {
                expand(entry["value"].as_str().unwrap_or_default(), &env)
            };
            env.insert(name, value);
        }
        env
    }
}

/// `text` with each `$(VAR)` of `env` replaced, as the kubelet expands `value`, `command` and
/// `args` (a reference to an undefined variable stays as written).
pub(super) fn expand(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = text.to_string();
    for (name, value) in env {
        out = out.replace(&format!("$({name})"), value);
    }
    out
}

/// The Secret keys a container's `env` reads.
fn secret_keys(container: &Value) -> BTreeSet<String> {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["valueFrom"]["secretKeyRef"]["key"].as_str())
        .map(str::to_string)
        .collect()
}

/// Each pod holds only the logins it needs: a role its own, NATS every NATS password, Redis
/// every Redis password, the stream job the operator's; no pod takes the credentials Secret
/// whole.
fn check_logins(r: &Rendered) {
    let env_value = |container: &Value, name: &str| -> Option<String> {
        container["env"]
            .as_array()?
            .iter()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str().map(str::to_string))
    };
    for role in ROLES {
        let name = format!("nanobot-{role}");
        let container = &r.find("Deployment", &name)["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(
            secret_keys(container),
            own_keys(role),
            "{name} holds only its own logins"
        );
        assert_eq!(
            env_value(container, "NANOBOT_BUS__USER").as_deref(),
            Some(role)
        );
        let store = env_value(container, "NANOBOT_STORE__URL");
        let expected =
            has_redis_user(role).then(|| format!("redis://{role}:$(REDIS_PASSWORD)@redis:6379"));
        assert_eq!(store, expected, "{name} logs into Redis as itself");
        let whole: Vec<&Value> = container["envFrom"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|source| source.get("secretRef"))
            .collect();
        let expected: Vec<Value> = operator_secret_of(role)
            .map(|secret| json!({"name": secret, "optional": true}))
            .into_iter()
            .collect();
        assert_eq!(
            whole,
            expected.iter().collect::<Vec<_>>(),
            "{name} reads whole only the operator's Secret its role needs"
        );
    }
    let all = |server: &str| -> BTreeSet<String> {
        Role::ALL
            .iter()
            .filter(|r| server == "NATS" || has_redis_user(r.name()))
            .map(|r| password_key(server, r.name()))
            .collect()
    };
    let first = |kind: &str, name: &str| {
        r.find(kind, name)["spec"]["template"]["spec"]["containers"][0].clone()
    };
    assert_eq!(secret_keys(&first("StatefulSet", "nats")), all("NATS"));
    assert_eq!(secret_keys(&first("StatefulSet", "redis")), all("REDIS"));
    let job = first("Job", "nanobot-bus-init");
    assert_eq!(
        secret_keys(&job),
        BTreeSet::from([password_key("NATS", "cli")])
    );
    assert_eq!(env_value(&job, "NANOBOT_BUS__USER").as_deref(), Some("cli"));
    let containers = r
        .objects
        .iter()
        .filter_map(|o| o["spec"]["template"]["spec"]["containers"].as_array())
        .flatten();
    for container in containers {
        for source in container["envFrom"].as_array().into_iter().flatten() {
            let name = source["secretRef"]["name"].as_str().unwrap_or_default();
            assert!(
                !name.starts_with(CREDENTIALS),
                "{} takes the credentials Secret whole",
                container["name"]
            );
        }
    }
}

fn check_roles(r: &Rendered) {
    let env = &r.config_map("nanobot-env")["data"];
    let health_port: i64 = env["NANOBOT_HEALTH_ADDR"]
        .as_str()
        .and_then(|a| a.rsplit(':').next())
        .and_then(|p| p.parse().ok())
        .expect("NANOBOT_HEALTH_ADDR has a port");
    for role in ROLES {
        let name = format!("nanobot-{role}");
        let deployment = r.find("Deployment", &name);
        let pod = &deployment["spec"]["template"];
        let container = &pod["spec"]["containers"][0];
        assert_eq!(
            container["command"][0],
            name.as_str(),
            "{name} runs its binary"
        );
        let port = container["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "health")
            .unwrap_or_else(|| panic!("{name} names its health port"));
        assert_eq!(port["containerPort"], health_port, "{name}'s health port");
        assert_eq!(container["readinessProbe"]["httpGet"]["path"], "/ready");
        assert_eq!(container["livenessProbe"]["httpGet"]["path"], "/health");
        for side in ["requests", "limits"] {
            for res in ["cpu", "memory"] {
                assert!(
                    container["resources"][side][res].is_string(),
                    "{name} sets {side}.{res}"
                );
            }
        }
        let labels = &pod["metadata"]["labels"];
        let budget = r
            .objects
            .iter()
            .filter(|o| o["kind"] == "PodDisruptionBudget")
            .find(|b| {
                let wanted = b["spec"]["selector"]["matchLabels"].as_object().unwrap();
                wanted.iter().all(|(k, v)| &labels[k] == v)
            });
        assert!(budget.is_some(), "a disruption budget covers {name}");
    }
    let job = r.find("Job", "nanobot-bus-init");
    let command = &job["spec"]["template"]["spec"]["containers"][0]["command"];
    assert_eq!(command, &serde_json::json!(["nanobot", "bus", "init"]));
}

fn check_references(r: &Rendered, operator_secrets: &[&str]) {
    let mut missing = Vec::new();
    for (kind, name) in r.references() {
        let by_operator = kind == "Secret" && operator_secrets.contains(&name.as_str());
        if !by_operator && !r.names(kind).contains(&name) {
            missing.push(format!("{kind} {name}"));
        }
    }
    missing.sort();
    missing.dedup();
    assert!(
        missing.is_empty(),
        "referenced but not rendered: {missing:?}"
    );
}

fn check_nats_and_scaling(
    r: &Rendered,
    namespace: &str,
    servers: i64,
    operator: &BTreeMap<String, String>,
) {
    let nats = r.find("StatefulSet", "nats");
    assert_eq!(nats["spec"]["replicas"], servers, "NATS servers");
    let conf = r.config_map("nats-config")["data"]["nats.conf"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(conf.contains("jetstream"), "NATS runs JetStream");
    let routes = conf.matches(".nats-headless:6222").count() as i64;
    assert_eq!(
        routes,
        if servers > 1 { servers } else { 0 },
        "cluster routes"
    );
    for role in ROLES {
        let config = r.fleet_config(role, operator);
        assert_eq!(
            config.bus.stream_replicas as i64, servers,
            "streams have as many replicas as there are NATS servers"
        );
    }

    let scaler = r.find("ScaledObject", "nanobot-agent");
    assert_eq!(scaler["spec"]["scaleTargetRef"]["name"], "nanobot-agent");
    let trigger = &scaler["spec"]["triggers"][0];
    assert_eq!(trigger["type"], "nats-jetstream");
    let meta = &trigger["metadata"];
    assert_eq!(
        meta["stream"],
        subjects::INBOUND_STREAM,
        "the inbound stream"
    );
    assert_eq!(
        meta["consumer"],
        subjects::INBOUND_CONSUMER,
        "the runners' consumer"
    );
    assert_eq!(
        meta["natsServerMonitoringEndpoint"],
        format!("nats.{namespace}.svc.cluster.local:8222"),
        "KEDA reads the monitoring port of this namespace's NATS"
    );
    let hpa = r.find("HorizontalPodAutoscaler", "nanobot-tools");
    assert_eq!(hpa["spec"]["scaleTargetRef"]["name"], "nanobot-tools");
    for o in &r.objects {
        if o["kind"] != "Namespace" {
            assert_eq!(
                o["metadata"]["namespace"], namespace,
                "{}",
                o["metadata"]["name"]
            );
        }
    }
}

#[test]
fn the_local_overlay_renders_validates_and_runs_one_nats_server() {
    let r = render("local");
    check_roles(&r);
    check_logins(&r);
    check_references(&r, &[]);
    check_nats_and_scaling(&r, "nanobot-local", 1, &BTreeMap::new());
}

#[test]
fn the_production_overlay_runs_a_three_node_jetstream_cluster_with_r3_streams() {
    let r = render("production");
    check_roles(&r);
    check_logins(&r);
    check_references(&r, &[CREDENTIALS]);
    // The Secret as the overlay tells the operator to make it: every key the manifests read.
    let dir = tempfile::tempdir().unwrap();
    let base = overlay("production").join("../../base");
    let manifests: Vec<PathBuf> = std::fs::read_dir(&base)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    let operator = credentials_env(&dir.path().join("creds.env"), &manifests);
    let read: BTreeSet<String> = r
        .objects
        .iter()
        .flat_map(|o| {
            o["spec"]["template"]["spec"]["containers"]
                .as_array()
                .cloned()
        })
        .flatten()
        .flat_map(|c| secret_keys(&c))
        .collect();
    assert_eq!(
        operator.keys().cloned().collect::<BTreeSet<_>>(),
        read,
        "scripts/credentials-env.sh makes exactly the keys the manifests read"
    );
    check_nats_and_scaling(&r, "nanobot", 3, &operator);
    for secret in [CREDENTIALS, LLM_SECRET, CHANNEL_SECRET] {
        assert!(
            !r.names("Secret").contains(secret),
            "production secrets are created by the operator, never committed"
        );
    }
    for role in ["agent", "tools"] {
        let d = r.find("Deployment", &format!("nanobot-{role}"));
        assert!(
            d["spec"]["replicas"].as_i64().unwrap() >= 3,
            "{role} replicas"
        );
    }
}

/// The package directory of the checkout the tests run from (read when they run: build
/// artifacts are shared between checkouts through the target dir, so the compile-time path may
/// name another, or a deleted, checkout).
fn manifest_dir() -> String {
    std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR for tests")
}
