//! Least privilege of the Kubernetes manifests, checked on both rendered overlays (as
//! `k8s.rs` renders them): every pod runs unprivileged (non-root, RuntimeDefault seccomp, no
//! capabilities, no privilege escalation, a read-only root with emptyDirs for what it writes)
//! and without a service-account token; NetworkPolicies deny everything by default and each pod
//! reaches only the servers its role uses. The policies are evaluated here as the API
//! defines them (a pod is isolated in a direction once a policy selects it for that direction;
//! then a connection needs a rule on the sender's egress and on the receiver's ingress), with
//! pods on private addresses, as every CNI gives them.
//!
//! Inside the tools pod `exec` has no bubblewrap (an unprivileged pod cannot create its
//! namespaces), so the executor keeps its own login from the commands it runs: the last test
//! runs the real executor and reads its `/proc` entries from a command.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::LazyLock;
use std::time::Duration;

use serde_json::{Value, json};

use super::ask;
use super::k8s::{Rendered, render};
use crate::harness::{Fleet, ServiceProc, bin_path, missing_ready_roles, wait_until};
use crate::scripted_llm::Reply;

static LOCAL: LazyLock<Rendered> = LazyLock::new(|| render("local"));
static PRODUCTION: LazyLock<Rendered> = LazyLock::new(|| render("production"));

fn overlays() -> [(&'static str, &'static Rendered); 2] {
    [("local", &LOCAL), ("production", &PRODUCTION)]
}

/// The namespace each overlay deploys to.
fn namespace_of(overlay: &str) -> &'static str {
    if overlay == "local" {
        "nanobot-local"
    } else {
        "nanobot"
    }
}

/// A pod the overlay runs: its workload's name, labels and container ports.
struct Pod<'a> {
    name: String,
    labels: &'a Value,
    spec: &'a Value,
}

impl Pod<'_> {
    /// The number of the container port `name` (named ports in policies).
    fn port_named(&self, name: &str) -> Option<i64> {
        self.ports()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, p)| p)
    }

    fn ports(&self) -> Vec<(String, i64)> {
        let containers = self.spec["containers"].as_array().into_iter().flatten();
        containers
            .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
            .map(|p| {
                let name = p["name"].as_str().unwrap_or_default().to_string();
                (name, p["containerPort"].as_i64().expect("containerPort"))
            })
            .collect()
    }
}

/// Every pod template of Deployments, StatefulSets and Jobs.
fn pods(r: &Rendered) -> Vec<Pod<'_>> {
    let kinds = ["Deployment", "StatefulSet", "Job"];
    let pods: Vec<Pod<'_>> = r
        .objects
        .iter()
        .filter(|o| kinds.iter().any(|k| o["kind"] == *k))
        .map(|o| Pod {
            name: o["metadata"]["name"].as_str().unwrap().to_string(),
            labels: &o["spec"]["template"]["metadata"]["labels"],
            spec: &o["spec"]["template"]["spec"],
        })
        .collect();
    assert_eq!(pods.len(), 8, "the fleet's workloads");
    pods
}

/// Who is at the other end of a connection.
#[derive(Clone, Copy, Debug)]
enum Peer<'a> {
    /// A pod of the fleet's namespace with these labels.
    Pod(&'a Value),
    /// Any pod of the namespace named so.
    Namespace(&'a str),
    /// An address outside the cluster.
    Address(IpAddr),
}

/// Addresses pods get: a CNI assigns them from a private range.
const POD_ADDRESSES: [&str; 4] = ["10.244.1.7", "172.17.0.5", "192.168.3.9", "100.96.0.4"];

fn in_cidr(ip: IpAddr, cidr: &str) -> bool {
    let (net, bits) = cidr.split_once('/').expect("cidr has a prefix length");
    let net: IpAddr = net.parse().expect("cidr address");
    let bits: u32 = bits.parse().expect("cidr length");
    let (ip, net, width) = match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => (u32::from(a) as u128, u32::from(n) as u128, 32),
        (IpAddr::V6(a), IpAddr::V6(n)) => (u128::from(a), u128::from(n), 128),
        _ => return false,
    };
    let shift = width - bits;
    shift >= width || (ip >> shift) == (net >> shift)
}

fn block_allows(block: &Value, ip: IpAddr) -> bool {
    let inside = in_cidr(ip, block["cidr"].as_str().expect("ipBlock cidr"));
    let except = block["except"].as_array().into_iter().flatten();
    inside && !except.filter_map(Value::as_str).any(|c| in_cidr(ip, c))
}

/// Whether a label selector selects `labels` (matchLabels and matchExpressions).
fn selects(selector: &Value, labels: &Value) -> bool {
    let wanted = selector["matchLabels"].as_object().into_iter().flatten();
    let labels_match = wanted.into_iter().all(|(k, v)| &labels[k] == v);
    let expressions = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten();
    labels_match
        && expressions.into_iter().all(|e| {
            let value = &labels[e["key"].as_str().unwrap()];
            let values = e["values"].as_array().cloned().unwrap_or_default();
            match e["operator"].as_str().unwrap() {
                "In" => values.contains(value),
                "NotIn" => !values.contains(value),
                "Exists" => !value.is_null(),
                "DoesNotExist" => value.is_null(),
                other => panic!("unknown selector operator {other}"),
            }
        })
}

/// Whether one `to`/`from` entry of a rule matches `peer`, seen from namespace `own`.
fn peer_matches(entry: &Value, peer: Peer<'_>, own: &str) -> bool {
    if let Some(block) = entry.get("ipBlock") {
        let pod_ip = || {
            POD_ADDRESSES
                .iter()
                .any(|a| block_allows(block, a.parse().unwrap()))
        };
        return match peer {
            Peer::Address(ip) => block_allows(block, ip),
            Peer::Pod(_) | Peer::Namespace(_) => pod_ip(),
        };
    }
    let namespace_labels = |name: &str| serde_json::json!({"kubernetes.io/metadata.name": name});
    let (namespace, labels) = match peer {
        Peer::Address(_) => return false,
        Peer::Pod(labels) => (own, Some(labels)),
        Peer::Namespace(name) => (name, None),
    };
    let namespace_ok = match entry.get("namespaceSelector") {
        None => namespace == own,
        Some(selector) => selects(selector, &namespace_labels(namespace)),
    };
    // A pod of another namespace: its labels are unknown, so any pod selector may match it.
    let pod_ok = match (entry.get("podSelector"), labels) {
        (Some(selector), Some(labels)) => selects(selector, labels),
        _ => true,
    };
    namespace_ok && pod_ok
}

/// Whether a rule's `ports` let `port`/`protocol` through; named ports are `target`'s.
fn port_matches(ports: &Value, port: i64, protocol: &str, target: Option<&Pod<'_>>) -> bool {
    let Some(ports) = ports.as_array().filter(|p| !p.is_empty()) else {
        return true;
    };
    ports.iter().any(|p| {
        let proto = p["protocol"].as_str().unwrap_or("TCP");
        let number = match &p["port"] {
            Value::Null => return proto == protocol,
            Value::String(name) => target.and_then(|t| t.port_named(name)),
            other => other.as_i64(),
        };
        let end = p["endPort"].as_i64().or(number);
        proto == protocol && number.is_some_and(|n| n <= port && port <= end.unwrap())
    })
}

/// Policies of `r` that isolate `pod` in `direction` ("Ingress" or "Egress").
fn isolating<'a>(r: &'a Rendered, pod: &Pod<'_>, direction: &str) -> Vec<&'a Value> {
    r.objects
        .iter()
        .filter(|o| o["kind"] == "NetworkPolicy")
        .filter(|p| selects(&p["spec"]["podSelector"], pod.labels))
        .filter(|p| {
            let types = p["spec"]["policyTypes"].as_array();
            let key = if direction == "Egress" {
                "egress"
            } else {
                "ingress"
            };
            match types {
                Some(types) => types.iter().any(|t| t == direction),
                None => direction == "Ingress" || p["spec"].get(key).is_some(),
            }
        })
        .collect()
}

/// Whether `pod`'s policies allow traffic with `peer` on `port` in `direction`; `target` is
/// the pod whose named ports the rules mean.
fn allowed(
    r: &Rendered,
    own: &str,
    pod: &Pod<'_>,
    direction: &str,
    peer: Peer<'_>,
    port: (i64, &str),
    target: Option<&Pod<'_>>,
) -> bool {
    let policies = isolating(r, pod, direction);
    let (rules, peers) = if direction == "Egress" {
        ("egress", "to")
    } else {
        ("ingress", "from")
    };
    policies.is_empty()
        || policies.iter().any(|p| {
            let rules = p["spec"][rules].as_array().into_iter().flatten();
            rules.into_iter().any(|rule| {
                let peer_ok = match rule[peers].as_array().filter(|e| !e.is_empty()) {
                    None => true,
                    Some(entries) => entries.iter().any(|e| peer_matches(e, peer, own)),
                };
                peer_ok && port_matches(&rule["ports"], port.0, port.1, target)
            })
        })
}

/// Whether `from` may open a connection to `to`'s container port `port` (both sides allow it).
fn connects(r: &Rendered, own: &str, from: &Pod<'_>, to: &Pod<'_>, port: i64) -> bool {
    let tcp = (port, "TCP");
    allowed(r, own, from, "Egress", Peer::Pod(to.labels), tcp, Some(to))
        && allowed(r, own, to, "Ingress", Peer::Pod(from.labels), tcp, Some(to))
}

fn pod<'a>(pods: &'a [Pod<'a>], name: &str) -> &'a Pod<'a> {
    pods.iter().find(|p| p.name == name).expect("pod")
}

#[test]
fn no_pod_mounts_a_service_account_token() {
    for (overlay, r) in overlays() {
        for pod in pods(r) {
            assert_eq!(
                pod.spec["automountServiceAccountToken"], false,
                "{overlay}: {} mounts no service-account token",
                pod.name
            );
        }
    }
}

#[test]
fn every_pod_runs_as_non_root_with_runtime_default_seccomp_no_capabilities_and_a_read_only_root() {
    for (overlay, r) in overlays() {
        for pod in pods(r) {
            let name = format!("{overlay}: {}", pod.name);
            let spec = pod.spec;
            for host in ["hostNetwork", "hostPID", "hostIPC"] {
                assert_ne!(spec[host], true, "{name} shares the node's {host}");
            }
            let containers = ["initContainers", "containers"]
                .iter()
                .flat_map(|k| spec[k].as_array().cloned().unwrap_or_default());
            for c in containers {
                let sc = &c["securityContext"];
                let either = |key: &str| {
                    let own = &sc[key];
                    if own.is_null() {
                        spec["securityContext"][key].clone()
                    } else {
                        own.clone()
                    }
                };
                assert_eq!(either("runAsNonRoot"), true, "{name} runs as non-root");
                assert_eq!(
                    either("seccompProfile")["type"],
                    "RuntimeDefault",
                    "{name}'s seccomp profile"
                );
                assert_eq!(sc["allowPrivilegeEscalation"], false, "{name}");
                assert_ne!(sc["privileged"], true, "{name} is unprivileged");
                assert_eq!(
                    sc["capabilities"]["drop"],
                    serde_json::json!(["ALL"]),
                    "{name}"
                );
                assert!(
                    sc["capabilities"]["add"].is_null(),
                    "{name} adds no capability"
                );
                assert_eq!(
                    sc["readOnlyRootFilesystem"], true,
                    "{name}'s root is read-only"
                );
            }
            // The fleet's binaries write temporary files: /tmp is a bounded emptyDir.
            let fleet_image = spec["containers"][0]["image"]
                .as_str()
                .is_some_and(|i| i.contains("nanobot-fleet"));
            if fleet_image {
                let mounts = spec["containers"][0]["volumeMounts"].as_array().unwrap();
                let tmp = mounts.iter().find(|m| m["mountPath"] == "/tmp");
                let volume = tmp.and_then(|m| {
                    let volumes = spec["volumes"].as_array()?;
                    volumes.iter().find(|v| v["name"] == m["name"])
                });
                let size = volume.map(|v| &v["emptyDir"]["sizeLimit"]);
                assert!(
                    size.is_some_and(Value::is_string),
                    "{name} writes /tmp to a bounded emptyDir"
                );
            }
        }
    }
}

#[test]
fn every_pod_is_denied_by_default_and_selected_by_a_policy_of_its_own() {
    for (overlay, r) in overlays() {
        let policies: Vec<&Value> = r
            .objects
            .iter()
            .filter(|o| o["kind"] == "NetworkPolicy")
            .collect();
        let deny_all = policies.iter().find(|p| {
            let spec = &p["spec"];
            spec["podSelector"] == serde_json::json!({})
                && spec["policyTypes"] == serde_json::json!(["Ingress", "Egress"])
                && spec["ingress"].is_null()
                && spec["egress"].is_null()
        });
        assert!(deny_all.is_some(), "{overlay} denies everything by default");
        for pod in pods(r) {
            for direction in ["Ingress", "Egress"] {
                let own = isolating(r, &pod, direction)
                    .into_iter()
                    .filter(|p| p["spec"]["podSelector"] != serde_json::json!({}))
                    .count();
                assert!(
                    own > 0,
                    "{overlay}: a NetworkPolicy of its own rules {}'s {direction}",
                    pod.name
                );
            }
        }
    }
}

#[test]
fn pods_of_the_fleet_reach_each_other_only_where_a_role_uses_the_server() {
    let uses = [
        ("nanobot-gateway", "nats", 4222),
        ("nanobot-gateway", "redis", 6379),
        ("nanobot-agent", "nats", 4222),
        ("nanobot-agent", "redis", 6379),
        ("nanobot-memory", "nats", 4222),
        ("nanobot-memory", "redis", 6379),
        ("nanobot-cron", "nats", 4222),
        ("nanobot-cron", "redis", 6379),
        ("nanobot-tools", "nats", 4222),
        ("nanobot-bus-init", "nats", 4222),
        ("nats", "nats", 6222),
    ];
    let expected: BTreeSet<(String, String, i64)> = uses
        .iter()
        .map(|(a, b, p)| (a.to_string(), b.to_string(), *p))
        .collect();
    for (overlay, r) in overlays() {
        let own = namespace_of(overlay);
        let pods = pods(r);
        let mut reached = BTreeSet::new();
        for from in &pods {
            for to in &pods {
                for (_, port) in to.ports() {
                    if connects(r, own, from, to, port) {
                        reached.insert((from.name.clone(), to.name.clone(), port));
                    }
                }
            }
        }
        assert_eq!(reached, expected, "{overlay}: who reaches whom");
    }
}

/// Addresses no pod may reach: the cloud metadata servers, every private range.
const FORBIDDEN: [&str; 14] = [
    "169.254.169.254",
    "169.254.0.1",
    "10.0.0.1",
    "10.255.255.254",
    "172.16.0.1",
    "172.31.255.254",
    "192.168.0.1",
    "192.168.255.254",
    "100.64.0.1",
    "100.127.255.254",
    "100.100.100.200",
    "fd00:ec2::254",
    "fe80::a9fe:a9fe",
    "fc00::1",
];

#[test]
fn no_pod_reaches_private_ranges_or_the_cloud_metadata_server() {
    for (overlay, r) in overlays() {
        let own = namespace_of(overlay);
        for pod in pods(r) {
            for address in FORBIDDEN {
                let ip: IpAddr = address.parse().unwrap();
                for port in [80, 443, 8080, 22, 6379, 4222] {
                    assert!(
                        !allowed(
                            r,
                            own,
                            &pod,
                            "Egress",
                            Peer::Address(ip),
                            (port, "TCP"),
                            None
                        ),
                        "{overlay}: {} reaches {address}:{port}",
                        pod.name
                    );
                }
            }
        }
    }
}

#[test]
fn only_tools_gateway_and_the_llm_callers_reach_the_internet() {
    // (pod, ports it may reach on a public address).
    let internet: [(&str, &[i64]); 8] = [
        ("nanobot-tools", &[22, 80, 443, 587, 993, 8443]),
        ("nanobot-gateway", &[443, 993, 587]),
        ("nanobot-agent", &[443]),
        ("nanobot-memory", &[443]),
        ("nanobot-cron", &[]),
        ("nanobot-bus-init", &[]),
        ("nats", &[]),
        ("redis", &[]),
    ];
    let public = ["93.184.216.34", "1.1.1.1", "2606:4700::1111"];
    for (overlay, r) in overlays() {
        let own = namespace_of(overlay);
        let pods = pods(r);
        for (name, ports) in internet {
            for address in public {
                let ip = Peer::Address(address.parse().unwrap());
                for port in [22, 80, 443, 587, 993, 8443] {
                    let reaches =
                        allowed(r, own, pod(&pods, name), "Egress", ip, (port, "TCP"), None);
                    assert_eq!(
                        reaches,
                        ports.contains(&port),
                        "{overlay}: {name} to {address}:{port}"
                    );
                }
            }
        }
    }
}

#[test]
fn other_namespaces_meet_the_fleet_only_for_dns_keda_metrics_and_the_collector() {
    let namespaces = [
        "kube-system",
        "keda",
        "monitoring",
        "observability",
        "default",
    ];
    let ports = [
        (53, "UDP"),
        (53, "TCP"),
        (4317, "TCP"),
        (4222, "TCP"),
        (6379, "TCP"),
    ];
    for (overlay, r) in overlays() {
        let own = namespace_of(overlay);
        // The collector the roles export to (production only): its namespace and port.
        let endpoint = r.config_map("nanobot-env")["data"]["OTEL_EXPORTER_OTLP_ENDPOINT"]
            .as_str()
            .map(|e| {
                let host_port = e.trim_start_matches("http://");
                let (host, port) = host_port.rsplit_once(':').unwrap();
                let namespace = host.split('.').nth(1).unwrap().to_string();
                (namespace, port.parse::<i64>().unwrap())
            });
        assert_eq!(endpoint.is_some(), overlay == "production");
        let pods = pods(r);
        for pod in &pods {
            let mut out = BTreeSet::new();
            for namespace in namespaces {
                for (port, proto) in ports {
                    let peer = Peer::Namespace(namespace);
                    if allowed(r, own, pod, "Egress", peer, (port, proto), None) {
                        out.insert((namespace.to_string(), port, proto));
                    }
                }
            }
            let mut expected = BTreeSet::new();
            if pod.name != "redis" {
                expected.insert(("kube-system".to_string(), 53, "UDP"));
                expected.insert(("kube-system".to_string(), 53, "TCP"));
            }
            if let Some((namespace, port)) = &endpoint
                && pod.name.starts_with("nanobot-")
                && pod.name != "nanobot-bus-init"
            {
                expected.insert((namespace.clone(), *port, "TCP"));
            }
            assert_eq!(out, expected, "{overlay}: {} to other namespaces", pod.name);

            // Into the pod: KEDA reads NATS's monitoring port, Prometheus every metrics port.
            for namespace in namespaces {
                for (_, port) in pod.ports() {
                    let peer = Peer::Namespace(namespace);
                    let tcp = (port, "TCP");
                    let open = allowed(r, own, pod, "Ingress", peer, tcp, Some(pod));
                    let wanted = match (pod.name.as_str(), namespace, port) {
                        ("nats", "keda" | "monitoring", 8222) => true,
                        ("nanobot-gateway", _, 8900) => true,
                        (name, "monitoring", 18790) => name.starts_with("nanobot-"),
                        _ => false,
                    };
                    assert_eq!(
                        open, wanted,
                        "{overlay}: {namespace} to {}:{port}",
                        pod.name
                    );
                }
            }
        }
        // The API is for the outside: any client reaches the gateway's API port.
        let client = Peer::Address("203.0.113.7".parse().unwrap());
        let gateway = pod(&pods, "nanobot-gateway");
        assert!(allowed(
            r,
            own,
            gateway,
            "Ingress",
            client,
            (8900, "TCP"),
            Some(gateway)
        ));
    }
}

/// A value only the executor's environment holds, as a pod's NATS password is.
const EXECUTOR_SECRET: &str = "executor-secret-机密-🔑";

/// A command reading its parent's (the executor's) `/proc` entries, and its own capabilities.
const READ_EXECUTOR: &str = r#"echo "parent=$(cat /proc/$PPID/comm)"; grep CapEff /proc/self/status
tr "\0" "\n" < /proc/$PPID/environ; head -c 64 /proc/$PPID/mem"#;

/// Whether this process holds capabilities (the suite runs as root).
fn privileged() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let effective = status.lines().find_map(|l| l.strip_prefix("CapEff:"));
    effective.is_some_and(|caps| !caps.trim().trim_start_matches('0').is_empty())
}

/// Starts `nanobot-tools` as the tools pod runs it: no capabilities (`setpriv` drops them when
/// the suite holds some), so it and its commands are one unprivileged user, and waits until
/// it is ready.
async fn unprivileged_executor(fleet: &Fleet) -> ServiceProc {
    let binary = bin_path("nanobot-tools").unwrap().display().to_string();
    let config = fleet.config_path().display().to_string();
    let mut args: Vec<&str> = Vec::new();
    if privileged() {
        args.extend([
            "/usr/bin/setpriv",
            "--bounding-set=-all",
            "--inh-caps=-all",
            "--",
        ]);
    }
    args.extend([
        binary.as_str(),
        "--config",
        &config,
        "--health-addr",
        "127.0.0.1:0",
    ]);
    let credentials = fleet.role_credentials("tools");
    let mut env: Vec<(&str, &str)> = vec![("NANOBOT_TEST_EXECUTOR_SECRET", EXECUTOR_SECRET)];
    env.extend(credentials.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    let program = std::path::PathBuf::from(args[0]);
    let executor = ServiceProc::spawn_program(&program, &args[1..], &env).unwrap();
    let client = fleet.nats_client().await.unwrap();
    let expected = BTreeMap::from([("tools".to_string(), 1)]);
    let ready = wait_until(
        || async {
            missing_ready_roles(&client, &expected)
                .await
                .is_ok_and(|m| m.is_empty())
        },
        Duration::from_secs(20),
    )
    .await;
    assert!(
        ready.is_ok(),
        "executor not ready:\n{}",
        executor.log_tail(30)
    );
    executor
}

#[tokio::test(flavor = "multi_thread")]
async fn exec_commands_cannot_read_the_executors_environment_or_memory() {
    let mut fleet = Fleet::builder().roles(&["agent"]).start().await.unwrap();
    let _executor = unprivileged_executor(&fleet).await;
    fleet.llm.push(Reply::tool_calls([(
        "exec",
        json!({"command": READ_EXECUTOR}),
    )]));
    fleet.llm.push(Reply::text("ran"));
    ask(&mut fleet, "读一下 🔍", Some("cli:environ")).await;
    let requests = fleet.llm.requests();
    let messages = requests.last().unwrap().messages();
    let content = &messages.last().unwrap()["content"];
    let result = content
        .as_str()
        .map_or_else(|| content.to_string(), str::to_string);
    // The reader ran next to the executor, as the same user without capabilities, and was
    // refused.
    assert!(result.contains("parent=nanobot-tools"), "{result}");
    assert!(result.contains("CapEff:\t0000000000000000"), "{result}");
    assert!(result.contains("Permission denied"), "{result}");
    assert!(!result.contains(EXECUTOR_SECRET), "exec read it: {result}");
}
