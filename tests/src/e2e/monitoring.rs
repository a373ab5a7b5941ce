//! What the fleet ships for monitoring (`deploy/monitoring`): the alert rules pass `promtool
//! check rules` and their unit tests (`promtool test rules`; Debian's `prometheus`, installed
//! by `make test`), the dashboard's queries are valid PromQL, every metric the rules and the
//! dashboard name is one a role exports with the labels they use (and docs/metrics.md or
//! docs/monitoring.md describes), the production
//! overlay ships the same rules as a PrometheusRule with a PodMonitor for every role, and the
//! compose `monitoring` profile starts Prometheus and Grafana on loopback with those files. A
//! role's `/metrics` shows its NATS connection dropping and its Redis requests failing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use saphyr::{LoadableYamlNode as _, YamlOwned};
use serde_json::Value;

use nanobot_runtime::testsuite::{Nats, Redis, find_server_binary, wait_until};

use super::deploy_credentials::{credentials_env, root};

const ROLES: [&str; 5] = ["gateway", "agent", "tools", "memory", "cron"];

/// Metrics Prometheus makes itself, not a role.
const PROMETHEUS_OWN: [&str; 1] = ["up"];

fn monitoring() -> PathBuf {
    root().join("deploy/monitoring")
}

fn promtool() -> PathBuf {
    find_server_binary("promtool", "NANOBOT_PROMTOOL")
        .expect("promtool (Debian's prometheus): run `scripts/deps.sh monitoring`")
}

/// Runs promtool with `args` in `dir`; fails with its output unless it succeeds.
fn promtool_ok(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(promtool())
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run promtool");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "promtool {args:?}:\n{text}");
    text
}

fn yaml_file(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let docs = YamlOwned::load_from_str(&text).expect("valid YAML");
    nanobot_core::skills::yaml_to_json(docs.first().expect("one document"))
}

fn dashboard() -> Value {
    let path = monitoring().join("grafana/dashboards/nanobot-fleet.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("dashboard JSON")
}

/// Every `expr` of the alert rules.
fn rule_exprs() -> Vec<String> {
    let rules = yaml_file(&monitoring().join("alerts.yml"));
    rules["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").iter())
        .map(|r| r["expr"].as_str().expect("expr").to_string())
        .collect()
}

/// Every query of the dashboard: panel targets and template variables.
fn dashboard_queries() -> Vec<String> {
    let dash = dashboard();
    let mut out: Vec<String> = dash["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default())
        .map(|t| t["expr"].as_str().expect("target expr").to_string())
        .collect();
    for var in dash["templating"]["list"].as_array().expect("variables") {
        if var["type"] == "query" {
            let query = var["query"]["query"].as_str().expect("variable query");
            // `label_values(metric{…}, label)`: the metric is what Prometheus is asked.
            let inner = query
                .strip_prefix("label_values(")
                .and_then(|q| q.rsplit_once(','))
                .map(|(selector, _)| selector.to_string())
                .expect("label_values(selector, label)");
            out.push(inner);
        }
    }
    assert!(out.len() > 20, "{out:?}");
    out
}

/// The dashboard's Grafana variables replaced by what Grafana would send.
fn as_promql(query: &str) -> String {
    query
        .replace("$__rate_interval", "1m")
        .replace("$__range", "6h")
        .replace("$bot", ".*")
        .replace("$role", ".*")
}

/// Labels Prometheus adds to every series it scrapes (the target's), and a histogram's `le`.
const TARGET_LABELS: [&str; 4] = ["job", "role", "instance", "le"];

/// Every metric the roles export, with its labels, as the metric modules declare them: each
/// family's field is documented with its exported name and labels
/// (`` /// `nanobot_turns_total{bot,channel,outcome}` ``); a histogram's `_bucket`, `_sum` and
/// `_count` series come with it. Checked against what the process renders.
fn exported() -> BTreeMap<String, BTreeSet<String>> {
    let runtime = root().join("services/runtime/src");
    let mut files = vec![runtime.join("dependency_metrics.rs")];
    for entry in std::fs::read_dir(runtime.join("metrics")).expect("metrics module") {
        files.push(entry.unwrap().path());
    }
    let mut out = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let Some(rest) = line.trim().strip_prefix("/// `nanobot_") else {
                continue;
            };
            let declared = format!("nanobot_{}", rest.split('`').next().unwrap());
            let (name, labels) = match declared.split_once('{') {
                Some((name, labels)) => (name.to_string(), labels.trim_end_matches('}')),
                None => (declared.clone(), ""),
            };
            let labels: BTreeSet<String> = labels
                .split(',')
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect();
            let field = lines[i + 1..]
                .iter()
                .find(|l| l.trim().starts_with("pub "))
                .expect("the documented field");
            if field.contains("Histogram") {
                for suffix in ["_bucket", "_sum", "_count"] {
                    out.insert(format!("{name}{suffix}"), labels.clone());
                }
            }
            out.insert(name, labels);
        }
    }
    // What the process renders (the families with series so far) is declared.
    let text = nanobot_runtime::metrics::get().render()
        + &nanobot_runtime::dependency_metrics::get().render();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap();
            assert!(
                out.contains_key(name),
                "{name} is rendered but not declared"
            );
        }
    }
    assert!(out.len() > 20, "{out:?}");
    out
}

/// The label names `query` selects on or groups by (`{bot=~"…"}`, `by (bot, model)`).
fn label_names(query: &str) -> BTreeSet<String> {
    // Label values out of the way: `"a,b"` becomes `""`.
    let query: String = query
        .split('"')
        .enumerate()
        .map(|(i, part)| if i % 2 == 0 { part } else { "" })
        .collect::<Vec<_>>()
        .join("\"");
    let query = query.as_str();
    let mut labels = BTreeSet::new();
    for part in query.split('{').skip(1) {
        let inner = part.split('}').next().unwrap_or_default();
        for matcher in inner.split(',') {
            let name = matcher.split(['=', '!']).next().unwrap_or_default().trim();
            if !name.is_empty() && !name.starts_with('"') {
                labels.insert(name.to_string());
            }
        }
    }
    for keyword in ["by (", "without ("] {
        for part in query.split(keyword).skip(1) {
            let inner = part.split(')').next().unwrap_or_default();
            labels.extend(inner.split(',').map(|l| l.trim().to_string()));
        }
    }
    labels
}

/// The metric names `query` uses: every word starting `nanobot_`, and every word followed by a
/// label matcher (`up{…}`).
fn metric_names(query: &str) -> BTreeSet<String> {
    let chars: Vec<char> = query.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        let word_char = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
        if !word_char(chars[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && word_char(chars[i]) {
            i += 1;
        }
        let word: String = chars[start..i].iter().collect();
        let quoted = chars[..start].iter().filter(|c| **c == '"').count() % 2 == 1;
        if !quoted && (word.starts_with("nanobot_") || chars.get(i) == Some(&'{')) {
            names.insert(word);
        }
    }
    names
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let dir = monitoring();
    let checked = promtool_ok(&dir, &["check", "rules", "alerts.yml"]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool_ok(&dir, &["test", "rules", "alerts.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    // The compose profile's Prometheus config, and the rules it loads.
    promtool_ok(&dir, &["check", "config", "prometheus.yml"]);

    // Every alert is unit-tested firing.
    let tests = yaml_file(&dir.join("alerts.test.yml"));
    let fired: BTreeSet<&str> = tests["tests"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().unwrap().iter())
        .filter(|c| c["exp_alerts"].as_array().is_some_and(|a| !a.is_empty()))
        .filter_map(|c| c["alertname"].as_str())
        .collect();
    let rules = yaml_file(&dir.join("alerts.yml"));
    let alerts: BTreeSet<&str> = rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap().iter())
        .filter_map(|r| r["alert"].as_str())
        .collect();
    assert!(alerts.len() >= 8, "{alerts:?}");
    assert_eq!(fired, alerts, "every alert has a test where it fires");
}

#[test]
fn the_dashboard_queries_are_valid_promql() {
    // promtool checks PromQL in rule files: each query becomes a recording rule.
    let rules: Vec<String> = dashboard_queries()
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let expr = serde_json::to_string(&as_promql(q)).unwrap();
            format!("      - record: dashboard:query_{i}\n        expr: {expr}\n")
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dashboard.rules.yml");
    let text = format!(
        "groups:\n  - name: dashboard\n    rules:\n{}",
        rules.concat()
    );
    std::fs::write(&file, text).unwrap();
    promtool_ok(dir.path(), &["check", "rules", "dashboard.rules.yml"]);

    let dash = dashboard();
    assert_eq!(dash["uid"], "nanobot-fleet");
    let titles: Vec<&str> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] != "row")
        .map(|p| p["title"].as_str().unwrap())
        .collect();
    let ids: BTreeSet<i64> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_i64().unwrap())
        .collect();
    assert_eq!(
        ids.len(),
        dash["panels"].as_array().unwrap().len(),
        "panel ids are unique"
    );
    assert!(titles.len() >= 20, "{titles:?}");
}

#[test]
fn every_metric_and_label_the_rules_and_the_dashboard_use_is_exported_and_documented() {
    let exported = exported();
    let docs: String = ["docs/metrics.md", "docs/monitoring.md"]
        .iter()
        .map(|f| std::fs::read_to_string(root().join(f)).unwrap_or_default())
        .collect();
    let mut used = BTreeSet::new();
    for query in rule_exprs().iter().chain(&dashboard_queries()) {
        let names = metric_names(query);
        // A label the query names is one of its metrics' (or the scrape target's).
        let mut known: BTreeSet<String> = TARGET_LABELS.iter().map(|l| l.to_string()).collect();
        for name in &names {
            known.extend(exported.get(name).cloned().unwrap_or_default());
        }
        for label in label_names(query) {
            assert!(
                known.contains(&label),
                "label {label} of {query:?} is not exported with {names:?}"
            );
        }
        used.extend(names);
    }
    for name in ["nanobot_turns_total", "up", "nanobot_bus_connected"] {
        assert!(used.contains(name), "{name} is found in {used:?}");
    }
    for name in &used {
        if PROMETHEUS_OWN.contains(&name.as_str()) {
            continue;
        }
        assert!(
            exported.contains_key(name),
            "{name} is used by deploy/monitoring but no role exports it (exported: {:?})",
            exported.keys()
        );
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .filter(|base| exported.contains_key(*base))
            .unwrap_or(name);
        assert!(
            docs.contains(family),
            "{family} is used by deploy/monitoring but docs/metrics.md (or docs/monitoring.md) does not describe it"
        );
    }
}

#[test]
fn label_names_are_found_in_queries() {
    let found = label_names(
        r#"sum by (bot, model) (rate(x{bot=~"a,b", outcome!="机器人"}[5m])) / on (role) up{job="n"}"#,
    );
    assert_eq!(
        found,
        BTreeSet::from(["bot", "model", "outcome", "job"].map(String::from))
    );
}

#[test]
fn metric_names_are_found_in_queries() {
    let found = metric_names(
        r#"sum by (bot) (rate(nanobot_turns_total{bot=~"nanobot_x", outcome="failed"}[5m])) / up{job="nanobot"} + nanobot_bus_connected"#,
    );
    assert_eq!(
        found,
        BTreeSet::from(["nanobot_turns_total", "up", "nanobot_bus_connected"].map(String::from))
    );
}

#[test]
fn the_production_overlay_ships_the_alert_rules_and_scrapes_every_role() {
    let rendered = super::k8s::render("production");
    let rule = rendered.find("PrometheusRule", "nanobot-fleet");
    let shipped = yaml_file(&monitoring().join("alerts.yml"));
    assert_eq!(
        rule["spec"]["groups"], shipped["groups"],
        "the PrometheusRule holds deploy/monitoring/alerts.yml: run scripts/prometheus-rule.sh"
    );
    let monitor = rendered.find("PodMonitor", "nanobot-fleet");
    let selected: BTreeSet<&str> = monitor["spec"]["selector"]["matchExpressions"][0]["values"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let roles: BTreeSet<String> = ROLES.iter().map(|r| format!("nanobot-{r}")).collect();
    assert_eq!(
        selected,
        roles.iter().map(String::as_str).collect(),
        "every role is scraped"
    );
    let endpoint = &monitor["spec"]["podMetricsEndpoints"][0];
    assert_eq!(endpoint["path"], "/metrics");
    for role in &roles {
        let deployment = rendered.find("Deployment", role);
        let ports = &deployment["spec"]["template"]["spec"]["containers"][0]["ports"];
        assert!(
            ports
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == endpoint["port"] && p["containerPort"] == 18790),
            "{role} serves /metrics on the port the PodMonitor scrapes"
        );
    }
    // The labels the rules and the dashboard select on: job="nanobot", role="<role>".
    let relabel = endpoint["relabelings"].to_string();
    assert!(
        relabel.contains(r#""targetLabel":"job""#)
            && relabel.contains(r#""replacement":"nanobot""#)
    );
    assert!(
        relabel.contains(r#""regex":"nanobot-(.+)""#)
            && relabel.contains(r#""targetLabel":"role""#)
    );
}

#[test]
fn the_monitoring_profile_runs_prometheus_and_grafana_on_loopback_with_the_shipped_files() {
    let dir = tempfile::tempdir().unwrap();
    let env_file = dir.path().join(".env");
    credentials_env(&env_file, &[root().join("docker-compose.yml")]);
    let services = super::compose::render(&env_file);
    for name in ["prometheus", "grafana"] {
        let service = &services[name];
        assert_eq!(
            service["profiles"],
            serde_json::json!(["monitoring"]),
            "{name}"
        );
        let ports = service["ports"].to_string();
        assert!(
            ports.contains("127.0.0.1") && !ports.contains("0.0.0.0"),
            "{name} publishes on loopback only: {ports}"
        );
        for volume in service["volumes"].as_array().unwrap() {
            let source = volume.as_str().unwrap().split(':').next().unwrap();
            if source.starts_with('/') {
                assert!(Path::new(source).exists(), "{name} mounts {source}");
            }
        }
    }
    // The roles stay out of the profile: a plain `up` starts them, not the monitoring.
    for (name, service) in &services {
        if name != "prometheus" && name != "grafana" {
            assert!(service.get("profiles").is_none(), "{name}");
        }
    }
    let grafana = services["grafana"]["environment"].to_string();
    assert!(grafana.contains(r#""GF_AUTH_DISABLE_LOGIN_FORM":"true""#));
    assert!(grafana.contains(r#""GF_AUTH_ANONYMOUS_ORG_ROLE":"Viewer""#));
    // Prometheus finds every role by its compose service name.
    let config = yaml_file(&monitoring().join("prometheus.yml"));
    let names = config["scrape_configs"][0]["dns_sd_configs"][0]["names"].to_string();
    for role in ROLES {
        let service = format!("nanobot-{role}");
        assert!(services.contains_key(&service));
        assert!(
            names.contains(&format!("\"{service}\"")),
            "{service} scraped"
        );
    }
}

/// The role's `/metrics` text, fetched over HTTP.
async fn scrape(url: &str) -> String {
    reqwest::get(url).await.unwrap().text().await.unwrap()
}

/// The value of the series `line_start` (`name` or `name{labels}`) in `text`.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn a_roles_metrics_show_nats_dropping_and_redis_requests_failing() {
    let (mut nats, mut redis) = tokio::try_join!(Nats::start(), Redis::start()).unwrap();
    let cancel = tokio_util::sync::CancellationToken::new();
    let health = nanobot_runtime::health::Health::new("memory");
    let addr =
        nanobot_runtime::health::serve_http("127.0.0.1:0".parse().unwrap(), health, cancel.clone())
            .await
            .unwrap();
    let url = format!("http://{addr}/metrics");
    let cfg = nanobot_runtime::config::BusConfig {
        url: nats.url(),
        ..Default::default()
    };
    let _bus =
        nanobot_runtime::bus::connect(&cfg, nanobot_proto::subjects::Role::Memory, "test", &cancel)
            .await
            .unwrap();
    let mut store = redis.conn().await.unwrap();
    let pong: String = redis::cmd("PING").query_async(&mut store).await.unwrap();
    assert_eq!(pong, "PONG");
    // A command the server refuses is the command's fault, not the connection's.
    let refused: redis::RedisResult<String> = redis::cmd("GET")
        .arg("🔑-键")
        .arg("extra")
        .query_async(&mut store)
        .await;
    assert!(refused.is_err());
    let text = scrape(&url).await;
    assert_eq!(value(&text, "nanobot_bus_connected"), Some(1.0), "{text}");
    assert_eq!(
        value(&text, "nanobot_store_errors_total"),
        Some(0.0),
        "{text}"
    );
    let sent = value(&text, "nanobot_store_requests_total").unwrap();
    assert!(sent >= 2.0, "{text}");

    redis.kill().unwrap();
    let lost: redis::RedisResult<String> = redis::cmd("PING").query_async(&mut store).await;
    assert!(lost.is_err());
    nats.kill().unwrap();
    let troubled = wait_until(
        || async {
            let text = scrape(&url).await;
            value(&text, "nanobot_bus_connected") == Some(0.0)
                && value(&text, "nanobot_store_errors_total").unwrap_or_default() >= 1.0
        },
        Duration::from_secs(20),
    )
    .await;
    assert!(troubled.is_ok(), "{}", scrape(&url).await);
    cancel.cancel();
}
