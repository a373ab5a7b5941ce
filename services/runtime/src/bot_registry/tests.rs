use std::collections::HashMap;

use serde_json::json;

use super::*;

#[test]
fn an_entry_with_a_secret_in_plain_text_is_refused_naming_the_key() {
    let raw = json!({"channels": {"telegram": {"enabled": true, "token": "123:abc"}}});
    let err = entry("support", &raw).unwrap_err();
    assert!(
        err.contains("bots.support.channels.telegram.token"),
        "{err}"
    );
    assert!(!err.contains("123:abc"), "the secret is not echoed: {err}");
}

#[test]
fn an_entry_with_secret_references_is_encoded_as_given() {
    let raw = json!({"model": "模型-🤖", "channels": {"telegram": {"enabled": true, "token": "${TG_TOKEN_SUPPORT}"}}});
    let bytes = entry("support", &raw).unwrap();
    assert_eq!(serde_json::from_slice::<Value>(&bytes).unwrap(), raw);
}

#[test]
fn a_bad_id_or_an_unknown_key_is_refused() {
    assert!(entry("a.b", &json!({})).unwrap_err().contains("bot id"));
    assert!(
        entry("a", &json!({"nope": 1}))
            .unwrap_err()
            .contains("not a valid bot entry")
    );
    assert!(entry("a", &json!("x")).unwrap_err().contains("JSON object"));
}

#[test]
fn resolving_reads_references_from_the_environment_and_names_a_missing_one() {
    let raw = json!({"workspace": "/w/客服", "channels": {"telegram": {"token": "${TG}"}}});
    let env = HashMap::from([("TG".to_string(), "9:秘密".to_string())]);
    let bot = resolve("support", &raw, &env).unwrap();
    assert_eq!(bot.channels["telegram"]["token"], "9:秘密");
    assert_eq!(bot.workspace.as_deref(), Some("/w/客服"));
    let err = resolve("support", &raw, &HashMap::new()).unwrap_err();
    assert!(err.contains("TG"), "{err}");
}

#[test]
fn applying_a_put_adds_the_bot_and_a_removal_takes_it_out() {
    let cfg = Config::default();
    let put = Change::Put("b".into(), json!({"model": "m"}));
    let added = apply(&cfg, &put, &HashMap::new()).unwrap();
    assert_eq!(added.bots["b"].model.as_deref(), Some("m"));
    let removed = apply(&added, &Change::Removed("b".into()), &HashMap::new()).unwrap();
    assert!(removed.bots.is_empty());
    assert_eq!(only(&added, "zzz").bots.len(), 0);
}

#[test]
fn raw_bots_keep_references_unresolved() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(
        &path,
        r#"{"bots":{"a":{"channels":{"telegram":{"token":"${TG_A}"}}}}}"#,
    )
    .unwrap();
    let bots = raw_bots(&path).unwrap();
    assert_eq!(bots["a"]["channels"]["telegram"]["token"], "${TG_A}");
    assert!(raw_bots(&dir.path().join("none.json")).unwrap().is_empty());
}
