//! Drop-in from outside: an upstream `config.json` with keys the fleet does not know starts the
//! fleet with one warning per role, and the prompt's `Current Time` is in the configured zone.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::json;

use super::ask;
use crate::harness::Fleet;
use crate::scripted_llm::Reply;

const WARNING: &str = "config keys unknown to the fleet are ignored";

fn utc_hour() -> u64 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    secs / 3600 % 24
}

#[tokio::test]
async fn an_upstream_config_with_unknown_keys_starts_with_one_warning_and_the_time_in_its_zone() {
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({
            "agents": {"defaults": {"timezone": "Asia/Tokyo", "newUpstreamKnob": {"a": 1}}},
            "futureSection": {"enabled": true},
        }))
        .start()
        .await
        .unwrap();
    for role in ["gateway", "agent", "tools"] {
        let logs = fleet.service(role).logs();
        let warnings: Vec<&str> = logs.lines().filter(|l| l.contains(WARNING)).collect();
        assert_eq!(warnings.len(), 1, "{role} warns once:\n{logs}");
        for key in ["agents.defaults.newUpstreamKnob", "futureSection"] {
            assert!(warnings[0].contains(key), "{role}: {}", warnings[0]);
        }
    }

    fleet
        .llm
        .when_last_user_contains("what time is it", Reply::text("tea time"));
    let before = utc_hour();
    assert_eq!(ask(&mut fleet, "what time is it", None).await, "tea time");
    let after = utc_hour();
    let text = fleet
        .llm
        .requests()
        .iter()
        .filter_map(|r| r.last_user_text())
        .find(|t| t.contains("what time is it"))
        .expect("the turn reached the model");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Current Time: "))
        .unwrap_or_else(|| panic!("no Current Time in {text}"));
    assert!(line.ends_with(" (Asia/Tokyo, UTC+09:00)"), "{line}");
    let hour: u64 = line[11..13].parse().unwrap();
    assert!(
        [before, after].iter().any(|h| (h + 9) % 24 == hour),
        "{line} is Tokyo time (UTC hour {before}..{after})"
    );
}
