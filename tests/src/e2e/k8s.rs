//! The Kubernetes manifests (`deploy/k8s`): each overlay renders with kustomize (`kubectl
//! kustomize`), passes schema validation offline (`kubernetes-validate --strict`, which bundles
//! the API schemas), and the rendered objects fit the fleet: every role runs its binary with
//! probes on its health endpoints, limits and a disruption budget; every referenced ConfigMap,
//! Secret and claim exists; the config is valid for the fleet's own loader and asks for as many
//! stream replicas as there are NATS servers; the agent scales on the inbound consumer the
//! fleet really uses. `make test` installs kubectl and the validator (`scripts/deps.sh k8s`).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use nanobot_proto::subjects;
use nanobot_runtime::testsuite::find_server_binary;

const ROLES: [&str; 5] = ["gateway", "agent", "tools", "memory", "cron"];

/// The Secret an operator creates in production (documented in the overlay and the README).
const OPERATOR_SECRET: &str = "nanobot-secrets";

fn overlay(name: &str) -> PathBuf {
    PathBuf::from(manifest_dir())
        .parent()
        .expect("workspace root")
        .join("deploy/k8s/overlays")
        .join(name)
}

/// The rendered objects of one overlay, schema-validated.
struct Rendered {
    objects: Vec<Value>,
}

fn render(name: &str) -> Rendered {
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
    fn find(&self, kind: &str, name: &str) -> &Value {
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
    fn config_map(&self, name: &str) -> &Value {
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

    /// Every (kind, name) a pod spec refers to: config maps, secrets and claims.
    fn references(&self) -> Vec<(&'static str, String)> {
        fn walk(v: &Value, out: &mut Vec<(&'static str, String)>) {
            match v {
                Value::Object(map) => {
                    for (key, child) in map {
                        let name = child["name"].as_str().map(str::to_string);
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

    /// The fleet's config as the roles load it: config.json plus the env overrides from the
    /// `nanobot-env` ConfigMap and the rendered Secret (or, in production, what the operator's
    /// Secret holds: `operator_env`).
    fn fleet_config(&self, operator_env: &[(&str, &str)]) -> nanobot_runtime::config::Config {
        use base64::Engine as _;
        let config = self.config_map("nanobot-config");
        let text = config["data"]["config.json"].as_str().expect("config.json");
        let mut env: HashMap<String, String> = self.config_map("nanobot-env")["data"]
            .as_object()
            .expect("env data")
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        for secret in self.objects.iter().filter(|o| o["kind"] == "Secret") {
            for (k, v) in secret["data"].as_object().into_iter().flatten() {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(v.as_str().unwrap_or_default())
                    .expect("secret data is base64");
                env.insert(k.clone(), String::from_utf8(raw).expect("utf-8 secret"));
            }
        }
        env.extend(
            operator_env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        nanobot_runtime::config::load_str(Some(text), Path::new("config.json"), &env)
            .unwrap_or_else(|e| panic!("the manifests' config loads without problems: {e}"))
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
        let store_url = container["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "NANOBOT_STORE__URL")
            .and_then(|e| e["value"].as_str())
            .unwrap_or_default();
        assert!(
            store_url.contains("$(REDIS_PASSWORD)@"),
            "{name} reaches Redis with its password: {store_url}"
        );
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
    operator_env: &[(&str, &str)],
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
    let config = r.fleet_config(operator_env);
    assert_eq!(
        config.bus.stream_replicas as i64, servers,
        "streams have as many replicas as there are NATS servers"
    );

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
    check_references(&r, &[]);
    check_nats_and_scaling(&r, "nanobot-local", 1, &[]);
}

#[test]
fn the_production_overlay_runs_a_three_node_jetstream_cluster_with_r3_streams() {
    let r = render("production");
    check_roles(&r);
    check_references(&r, &[OPERATOR_SECRET]);
    // The keys the production overlay tells the operator to put in the Secret.
    let operator_env = [
        ("NANOBOT_API__API_KEY", "operator-generated"),
        ("NANOBOT_BUS__USER", "nanobot"),
        ("NANOBOT_BUS__PASSWORD", "operator-generated"),
        ("REDIS_PASSWORD", "operator-generated"),
    ];
    check_nats_and_scaling(&r, "nanobot", 3, &operator_env);
    assert!(
        !r.names("Secret").contains(OPERATOR_SECRET),
        "production secrets are created by the operator, never committed"
    );
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
