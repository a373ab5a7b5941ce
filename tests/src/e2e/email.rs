//! The email channel end to end: the fleet's processes against a real IMAP server (dovecot)
//! and SMTP server (aiosmtpd) on loopback ([`MailServers`]) and the scripted LLM. Each test has
//! its own bot mailbox and correspondents, so the shared servers keep tests apart.

use serde_json::{Value, json};

use nanobot_proto::{OutboundKind, keys};

use super::{TURN, outbound_messages};
use crate::harness::{Fleet, wait_until};
use crate::mail_servers::{MailServers, PASSWORD, SentMail};
use crate::scripted_llm::Reply;

/// Log line of the replica that took a mailbox's poller lease.
const LEASE_TAKEN: &str = "email poller lease taken";

/// A mailbox of its own for one test: `<name>-<random>@fleet.test`.
pub(crate) fn bot_address(name: &str) -> String {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    format!("{name}-{}@fleet.test", &tag[..8])
}

/// A correspondent of one test: `<name>-<random>@example.test`.
pub(crate) fn person(name: &str) -> String {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    format!("{name}-{}@example.test", &tag[..8])
}

/// The `channels.email` section for `bot` on the shared servers, with `extra` laid over it.
fn section(servers: &MailServers, bot: &str, extra: Value) -> Value {
    let mut section = json!({
        "enabled": true,
        "consentGranted": true,
        "imapHost": "127.0.0.1",
        "imapPort": servers.imap_port(),
        "imapUsername": bot,
        "imapPassword": PASSWORD,
        "imapUseSsl": false,
        "smtpHost": "127.0.0.1",
        "smtpPort": servers.smtp_port(),
        "smtpUsername": bot,
        "smtpPassword": PASSWORD,
        "smtpUseTls": false,
        "fromAddress": bot,
        "pollIntervalSeconds": 1,
        "leaseSecs": 2,
    });
    if let (Value::Object(base), Value::Object(extra)) = (&mut section, extra) {
        base.extend(extra);
    }
    section
}

/// Starts a fleet (gateway, agent, tools) whose `channels.email` serves `bot`.
pub(crate) async fn email_fleet(servers: &MailServers, bot: &str, extra: Value) -> Fleet {
    email_fleet_from(Fleet::builder(), servers, bot, extra).await
}

/// [`email_fleet`] from a builder with more settings (telemetry, ...).
pub(crate) async fn email_fleet_from(
    builder: crate::harness::FleetBuilder,
    servers: &MailServers,
    bot: &str,
    extra: Value,
) -> Fleet {
    let mut fleet = builder
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"channels": {"email": section(servers, bot, extra)}}))
        .start()
        .await
        .expect("fleet");
    wait_log(&mut fleet, LEASE_TAKEN).await;
    fleet
}

/// Waits until the (first) gateway logged `needle`.
async fn wait_log(fleet: &mut Fleet, needle: &str) {
    let found = wait_until(
        || {
            let found = fleet.service("gateway").logs().contains(needle);
            async move { found }
        },
        TURN,
    )
    .await;
    if let Err(e) = found {
        panic!(
            "{e}: {needle:?}; gateway log:\n{}",
            fleet.service("gateway").log_tail(30)
        );
    }
}

/// A person's mail to the bot, with the headers a receiving MTA adds (SPF and DKIM passed).
pub(crate) fn mail(
    from: &str,
    to: &str,
    message_id: &str,
    subject: &str,
    extra: &str,
    body: &str,
) -> Vec<u8> {
    format!(
        "Authentication-Results: mx.fleet.test; spf=pass smtp.mailfrom={from}; dkim=pass header.d=example.test\r\n\
         From: {from}\r\nTo: {to}\r\nSubject: {subject}\r\nMessage-ID: {message_id}\r\n\
         Date: Wed, 25 Nov 2026 07:00:00 +0000\r\n{extra}MIME-Version: 1.0\r\n\
         Content-Type: text/plain; charset=utf-8\r\n\r\n{body}\r\n"
    )
    .into_bytes()
}

/// Waits until the SMTP server holds `n` mails to `to`, and returns them.
pub(crate) async fn wait_sent(servers: &MailServers, to: &str, n: usize) -> Vec<SentMail> {
    wait_until(|| async { servers.sent_to(to).len() >= n }, TURN)
        .await
        .unwrap_or_else(|e| panic!("{e}: {n} mails to {to}; sent: {:#?}", servers.sent()));
    servers.sent_to(to)
}

#[tokio::test]
async fn a_mail_from_an_allowed_sender_gets_one_threaded_reply_with_its_attachment_saved() {
    let servers = MailServers::shared().await.expect("mail servers");
    let bot = bot_address("bot");
    let alice = person("alice");
    let fleet = email_fleet(
        servers,
        &bot,
        json!({"allowFrom": [alice.to_uppercase()], "allowedAttachmentTypes": ["application/pdf"]}),
    )
    .await;
    fleet
        .llm
        .when_last_user_contains("Trip plans", Reply::text("Here is the plan."));
    fleet
        .llm
        .when_last_user_contains("Second thought", Reply::text("Noted."));
    let first = format!(
        "Authentication-Results: mx.fleet.test; spf=pass; dkim=pass\r\n\
         From: Alice <{alice}>\r\nTo: {bot}\r\nSubject: Trip plans\r\nMessage-ID: <trip-1@example.test>\r\n\
         References: <older@example.test>\r\nDate: Wed, 25 Nov 2026 07:00:00 +0000\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\n\
         Where do we go?\r\n--b\r\nContent-Type: application/pdf\r\n\
         Content-Disposition: attachment; filename=\"map.pdf\"\r\nContent-Transfer-Encoding: base64\r\n\r\n\
         JVBERi0xLjQ=\r\n--b--\r\n"
    );
    servers.deliver(&bot, first.as_bytes()).await.unwrap();

    let sent = wait_sent(servers, &alice, 1).await;
    let reply = &sent[0];
    assert_eq!(reply.from, bot);
    assert_eq!(reply.subject, "Re: Trip plans");
    assert_eq!(reply.in_reply_to, "<trip-1@example.test>");
    assert_eq!(
        reply.references,
        "<older@example.test> <trip-1@example.test>"
    );
    assert!(reply.body.contains("Here is the plan."), "{reply:#?}");
    let asked = fleet.llm.requests()[0].body.to_string();
    assert!(
        asked.contains(&format!(
            "[EMAIL-CONTEXT] Email received.\\nFrom: {alice}\\nSubject: Trip plans\\nDate: Wed, 25 Nov 2026 07:00:00 +0000\\n\\nWhere do we go?"
        )),
        "{asked}"
    );
    let saved = fleet.workspace().join(".nanobot/media/email");
    let files: Vec<_> = std::fs::read_dir(&saved)
        .expect("media dir")
        .filter_map(|e| e.ok())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(std::fs::read(files[0].path()).unwrap(), b"%PDF-1.4");
    assert!(asked.contains("[attachment: "), "{asked}");
    assert!(asked.contains("map.pdf"), "{asked}");

    // A second mail of the same correspondent: its reply threads to it, and the first reply
    // was sent once.
    let second = mail(
        &alice,
        &bot,
        "<trip-2@example.test>",
        "Re: Second thought",
        "",
        "Or the sea?",
    );
    servers.deliver(&bot, &second).await.unwrap();
    let sent = wait_sent(servers, &alice, 2).await;
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!(sent[1].in_reply_to, "<trip-2@example.test>");
    assert_eq!(sent[1].subject, "Re: Second thought", "no second Re:");
    assert_eq!(fleet.llm.request_count(), 2);
    wait_until(
        || async { servers.unseen(&bot).await.is_ok_and(|u| u.is_empty()) },
        TURN,
    )
    .await
    .expect("handled mail is marked seen");
}

#[tokio::test]
async fn a_mail_from_a_sender_not_in_allow_from_gets_no_answer() {
    let servers = MailServers::shared().await.expect("mail servers");
    let bot = bot_address("bot");
    let alice = person("alice");
    let stranger = person("stranger");
    let fleet = email_fleet(servers, &bot, json!({"allowFrom": [alice]})).await;
    fleet.llm.set_fallback(Reply::text("answered"));
    servers
        .deliver(
            &bot,
            &mail(&stranger, &bot, "<s-1@example.test>", "Hello", "", "hi"),
        )
        .await
        .unwrap();
    // Mail is handled in UID order: once the marker is answered, the stranger's was handled.
    servers
        .deliver(
            &bot,
            &mail(&alice, &bot, "<a-1@example.test>", "Marker", "", "hi"),
        )
        .await
        .unwrap();
    wait_sent(servers, &alice, 1).await;
    assert!(
        servers.sent_to(&stranger).is_empty(),
        "{:#?}",
        servers.sent()
    );
    assert_eq!(
        fleet.llm.request_count(),
        1,
        "only the allowed mail ran a turn"
    );
}

#[tokio::test]
async fn the_bots_own_mail_auto_replies_bounces_and_list_mail_get_no_answer_even_with_allow_from_star()
 {
    let servers = MailServers::shared().await.expect("mail servers");
    let bot = bot_address("bot");
    let alice = person("alice");
    let fleet = email_fleet(servers, &bot, json!({"allowFrom": ["*"]})).await;
    fleet.llm.set_fallback(Reply::text("answered"));
    // Upstream issue #3215: the bot's own reply landing in its mailbox was answered, forever.
    let own = format!("Bot <{}>", bot.to_uppercase());
    let machine = [
        mail(
            &own,
            &alice,
            "<own@fleet.test>",
            "Re: Loop",
            "",
            "my own reply",
        ),
        mail(
            &alice,
            &bot,
            "<ooo@example.test>",
            "Out of office",
            "Auto-Submitted: auto-replied\r\n",
            "away",
        ),
        mail(
            &alice,
            &bot,
            "<bulk@example.test>",
            "News",
            "Precedence: bulk\r\n",
            "news",
        ),
        mail(
            &alice,
            &bot,
            "<ar@example.test>",
            "Away",
            "X-Autoreply: yes\r\n",
            "away",
        ),
        mail(
            &alice,
            &bot,
            "<list@example.test>",
            "List",
            "List-Id: <l.example.test>\r\n",
            "list",
        ),
    ];
    let daemon = format!("mailer-daemon@{}", alice.split('@').nth(1).unwrap());
    let bounce = mail(
        &daemon,
        &bot,
        "<bounce@example.test>",
        "Undelivered",
        "",
        "failed",
    );
    for raw in machine.iter().chain([&bounce]) {
        servers.deliver(&bot, raw).await.unwrap();
    }
    servers
        .deliver(
            &bot,
            &mail(&alice, &bot, "<a-1@example.test>", "Marker", "", "hi"),
        )
        .await
        .unwrap();
    let sent = wait_sent(servers, &alice, 1).await;
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert_eq!(sent[0].in_reply_to, "<a-1@example.test>");
    assert!(servers.sent_to(&bot).is_empty() && servers.sent_to(&daemon).is_empty());
    assert_eq!(
        fleet.llm.request_count(),
        1,
        "only the person's mail ran a turn"
    );
    wait_until(
        || async { servers.unseen(&bot).await.is_ok_and(|u| u.is_empty()) },
        TURN,
    )
    .await
    .expect("skipped machine mail is marked seen, as upstream");
}

#[tokio::test]
async fn two_gateway_replicas_answer_each_mail_once_even_when_the_poller_is_sigkilled() {
    let servers = MailServers::shared().await.expect("mail servers");
    let bot = bot_address("bot");
    let mut fleet = email_fleet(servers, &bot, json!({"allowFrom": ["*"]})).await;
    fleet.add_replica("gateway").await.unwrap();
    fleet.llm.set_fallback(Reply::text("answered"));
    let people: Vec<String> = (0..6).map(|i| person(&format!("p{i}"))).collect();
    for (i, p) in people[..3].iter().enumerate() {
        let id = format!("<before-{i}@example.test>");
        servers
            .deliver(&bot, &mail(p, &bot, &id, "Before", "", "hi"))
            .await
            .unwrap();
    }
    for p in &people[..3] {
        wait_sent(servers, p, 1).await;
    }
    let holder = fleet
        .replicas("gateway")
        .iter()
        .position(|p| p.logs().contains(LEASE_TAKEN))
        .expect("a replica polls");
    fleet.service_at("gateway", holder).sigkill().unwrap();
    for (i, p) in people[3..].iter().enumerate() {
        let id = format!("<after-{i}@example.test>");
        servers
            .deliver(&bot, &mail(p, &bot, &id, "After", "", "hi"))
            .await
            .unwrap();
    }
    for p in &people[3..] {
        wait_sent(servers, p, 1).await;
    }
    assert!(
        fleet
            .service_at("gateway", 1 - holder)
            .logs()
            .contains(LEASE_TAKEN),
        "the other replica took the mailbox over"
    );
    // Mail is read in UID order: once a later marker is answered, a mail the survivor read
    // again has been published again (and dropped) before it.
    let marker = person("marker");
    let raw = mail(&marker, &bot, "<marker@example.test>", "Marker", "", "hi");
    servers.deliver(&bot, &raw).await.unwrap();
    wait_sent(servers, &marker, 1).await;
    for p in &people {
        let sent = servers.sent_to(p);
        assert_eq!(sent.len(), 1, "one reply to {p}: {sent:#?}");
    }
    assert_eq!(fleet.llm.request_count(), 7, "no mail ran twice");
}

#[tokio::test]
async fn bad_imap_credentials_are_a_clear_error_and_the_gateway_still_answers_its_api() {
    let servers = MailServers::shared().await.expect("mail servers");
    let bot = bot_address("bot");
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"channels": {"email": section(servers, &bot, json!({
            "imapPassword": "wrong-imap-secret", "allowFrom": ["*"]}))}}))
        .start()
        .await
        .expect("fleet");
    wait_log(
        &mut fleet,
        "email IMAP login refused; check channels.email.imapUsername and imapPassword",
    )
    .await;
    assert!(
        !fleet
            .service("gateway")
            .logs()
            .contains("wrong-imap-secret")
    );
    fleet.llm.push(Reply::text("still here"));
    let response: Value = reqwest::Client::new()
        .post(format!("{}/v1/chat/completions", fleet.api_base()))
        .json(&json!({"model": "test-model", "messages": [{"role": "user", "content": "ping"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(response["choices"][0]["message"]["content"], "still here");
}

#[tokio::test]
async fn with_auto_reply_disabled_a_mail_runs_its_turn_but_no_reply_is_mailed() {
    let servers = MailServers::shared().await.expect("mail servers");
    let bot = bot_address("bot");
    let alice = person("alice");
    let fleet = email_fleet(
        servers,
        &bot,
        json!({"allowFrom": [alice], "autoReplyEnabled": false}),
    )
    .await;
    fleet.llm.set_fallback(Reply::text("answered"));
    let raw = mail(&alice, &bot, "<quiet@example.test>", "Quiet", "", "hi");
    servers.deliver(&bot, &raw).await.unwrap();
    // The turn's final reply reaches the channel, which skips it; the delivery is then
    // recorded as done, so nothing can still be on its way.
    let final_id = || async {
        outbound_messages(&fleet)
            .await
            .into_iter()
            .find(|m| m.chat_id == alice && m.kind == OutboundKind::Final as i32)
            .map(|m| m.id)
    };
    wait_until(|| async { final_id().await.is_some() }, TURN)
        .await
        .expect("the mail's turn ran");
    let key = keys::outbound_delivered("default", &final_id().await.unwrap());
    let redis = fleet.redis_conn().await.unwrap();
    wait_until(
        || {
            let mut redis = redis.clone();
            let key = key.clone();
            async move {
                let record: Option<String> = redis::AsyncCommands::get(&mut redis, &key)
                    .await
                    .unwrap_or_default();
                record.as_deref() == Some("done")
            }
        },
        TURN,
    )
    .await
    .expect("the reply's delivery is recorded");
    assert!(servers.sent_to(&alice).is_empty(), "{:#?}", servers.sent());
}

#[tokio::test]
async fn progress_and_tool_hints_are_never_mailed_only_the_final_reply() {
    let servers = MailServers::shared().await.expect("mail servers");
    let bot = bot_address("bot");
    let alice = person("alice");
    let fleet = email_fleet(
        servers,
        &bot,
        json!({"allowFrom": [alice], "sendProgress": true, "sendToolHints": true}),
    )
    .await;
    fleet.llm.push(
        Reply::tool_calls([("list_dir", json!({"path": "."}))]).with_text("Let me look around."),
    );
    fleet.llm.push(Reply::text("Done looking."));
    let raw = mail(&alice, &bot, "<look@example.test>", "Look", "", "look");
    servers.deliver(&bot, &raw).await.unwrap();
    // A chat's outbound messages are delivered in order: progress would arrive first.
    let sent = wait_sent(servers, &alice, 1).await;
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert!(sent[0].body.contains("Done looking."), "{sent:#?}");
    assert_eq!(fleet.llm.request_count(), 2, "the tool call ran");
}

#[tokio::test]
async fn new_mail_is_answered_at_once_through_imap_idle_even_with_a_ten_minute_poll_interval() {
    let servers = MailServers::shared().await.expect("mail servers");
    let bot = bot_address("bot");
    let alice = person("alice");
    let fleet = email_fleet(
        servers,
        &bot,
        json!({"allowFrom": [alice], "pollIntervalSeconds": 600}),
    )
    .await;
    fleet.llm.set_fallback(Reply::text("answered"));
    // Each mail arrives while the poller waits: without IDLE it would be read in ten minutes.
    for (n, subject) in [(1, "First"), (2, "Second")] {
        let id = format!("<idle-{n}@example.test>");
        servers
            .deliver(&bot, &mail(&alice, &bot, &id, subject, "", "hello"))
            .await
            .unwrap();
        let sent = wait_sent(servers, &alice, n).await;
        assert_eq!(sent[n - 1].subject, format!("Re: {subject}"));
    }
}

#[tokio::test]
async fn a_recreated_mailbox_is_not_answered_again_only_mail_arriving_after_it() {
    let servers = MailServers::shared().await.expect("mail servers");
    let bot = bot_address("bot");
    let alice = person("alice");
    servers.create_mailbox(&bot, "Bot").await.unwrap();
    // markSeen off: mail answered before stays unseen, as on a server that keeps no flags.
    let mut fleet = email_fleet(
        servers,
        &bot,
        json!({"allowFrom": [alice], "imapMailbox": "Bot", "markSeen": false}),
    )
    .await;
    fleet.llm.set_fallback(Reply::text("answered"));
    // No Message-ID: nothing but the mailbox position tells this mail apart.
    let old = format!(
        "Authentication-Results: mx.fleet.test; spf=pass; dkim=pass\r\n\
         From: {alice}\r\nTo: {bot}\r\nSubject: Old question\r\n\
         Date: Wed, 25 Nov 2026 07:00:00 +0000\r\nContent-Type: text/plain\r\n\r\nold\r\n"
    );
    servers
        .deliver_to(&bot, "Bot", old.as_bytes())
        .await
        .unwrap();
    wait_sent(servers, &alice, 1).await;
    let before = servers.uid_validity(&bot, "Bot").await.unwrap();
    // The mailbox is recreated with the old mail in it (a restore, a migration): new UIDs.
    servers
        .recreate_mailbox(&bot, "Bot", &[old.as_bytes()])
        .await
        .unwrap();
    assert_ne!(servers.uid_validity(&bot, "Bot").await.unwrap(), before);
    wait_log(&mut fleet, "email mailbox UIDVALIDITY changed").await;
    let new = mail(
        &alice,
        &bot,
        "<new-1@example.test>",
        "New question",
        "",
        "new",
    );
    servers.deliver_to(&bot, "Bot", &new).await.unwrap();
    // One session: had the old mail been read again, its reply would come first.
    let sent = wait_sent(servers, &alice, 2).await;
    assert_eq!(sent.len(), 2, "{sent:#?}");
    assert_eq!(sent[0].subject, "Re: Old question");
    assert_eq!(sent[1].subject, "Re: New question", "{sent:#?}");
    assert_eq!(fleet.llm.request_count(), 2);
}

/// Issue 30 item 3: a sender writes `Authentication-Results` too; only the receiving server's
/// own (its `authservId`, at the top) are believed.
#[tokio::test]
async fn a_sender_written_authentication_results_header_never_passes_the_dkim_spf_gate() {
    let servers = MailServers::shared().await.expect("mail servers");
    let bot = bot_address("bot");
    let alice = person("alice");
    let mut fleet = email_fleet(
        servers,
        &bot,
        json!({"allowFrom": [alice], "authservId": "mx.fleet.test"}),
    )
    .await;
    fleet.llm.set_fallback(Reply::text("answered"));
    let raw = |results: &str, id: &str, subject: &str| {
        format!(
            "{results}From: {alice}\r\nTo: {bot}\r\nSubject: {subject}\r\nMessage-ID: <{id}@example.test>\r\n\
             Date: Wed, 25 Nov 2026 07:00:00 +0000\r\nContent-Type: text/plain; charset=utf-8\r\n\r\nhi 👋\r\n"
        )
    };
    let forged = [
        // The server's verdict on top, the sender's own claim below it.
        "Authentication-Results: mx.fleet.test; spf=fail smtp.mailfrom=x; dkim=none\r\n\
         Authentication-Results: mx.fleet.test; spf=pass; dkim=pass\r\n",
        // The server wrote none; the sender's claim names another server.
        "Authentication-Results: evil.example; spf=pass; dkim=pass\r\n",
        // The server's id below someone else's header.
        "Authentication-Results: relay.evil.example; spf=pass; dkim=pass\r\n\
         Authentication-Results: mx.fleet.test; spf=pass; dkim=pass\r\n",
    ];
    for (i, results) in forged.iter().enumerate() {
        let mail = raw(results, &format!("forged-{i}"), &format!("Forged {i} 伪造"));
        servers.deliver(&bot, mail.as_bytes()).await.unwrap();
    }
    // The server's own pass on top (a forged fail below it changes nothing): answered.
    let genuine = raw(
        "Authentication-Results: MX.fleet.test 1 (dovecot); spf=pass smtp.mailfrom=a;\r\n\tdkim=pass header.d=example.test\r\n\
         Authentication-Results: mx.fleet.test; spf=fail; dkim=fail\r\n",
        "genuine",
        "Genuine 真",
    );
    servers.deliver(&bot, genuine.as_bytes()).await.unwrap();
    let sent = wait_sent(servers, &alice, 1).await;
    assert_eq!(sent[0].subject, "Re: Genuine 真");
    let asked: Vec<String> = fleet
        .llm
        .requests()
        .iter()
        .filter_map(|r| r.last_user_text())
        .collect();
    assert_eq!(
        asked.len(),
        1,
        "only the genuine mail ran a turn: {asked:#?}"
    );
    assert!(asked[0].contains("Subject: Genuine 真"), "{asked:?}");
    let log = fleet.service("gateway").logs();
    assert_eq!(
        log.matches("mail rejected: SPF verification failed")
            .count(),
        forged.len(),
        "{log}"
    );
}

/// Issue 30 items 5 and 6: attachment names are never paths, and a mail's attachments past the
/// per-message caps are skipped with a note.
#[tokio::test]
async fn attachment_names_stay_in_the_media_folder_and_attachments_past_the_caps_are_noted() {
    let servers = MailServers::shared().await.expect("mail servers");
    let bot = bot_address("bot");
    let alice = person("alice");
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(
            json!({"channels": {"maxAttachments": 3, "email": section(servers, &bot, json!({
            "allowFrom": [alice], "allowedAttachmentTypes": ["*"]}))}}),
        )
        .start()
        .await
        .expect("fleet");
    wait_log(&mut fleet, LEASE_TAKEN).await;
    fleet.llm.set_fallback(Reply::text("got them"));
    let part = |disposition: &str, body: &str| {
        format!(
            "--b\r\nContent-Type: text/plain\r\nContent-Disposition: attachment; {disposition}\r\n\r\n{body}\r\n"
        )
    };
    let parts = [
        part("filename=\"../../escaped.txt\"", "one"),
        part("filename=\"/etc/evil.txt\"", "two"),
        part("filename*=utf-8''%E5%AD%A3%E5%BA%A6%00..%2Fx.txt", "three"),
        part("filename=\"fourth.txt\"", "four"),
    ];
    let mail = format!(
        "Authentication-Results: mx.fleet.test; spf=pass; dkim=pass\r\n\
         From: {alice}\r\nTo: {bot}\r\nSubject: Files 📎\r\nMessage-ID: <files@example.test>\r\n\
         Date: Wed, 25 Nov 2026 07:00:00 +0000\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\n\
         see attached\r\n{}--b--\r\n",
        parts.concat()
    );
    servers.deliver(&bot, mail.as_bytes()).await.unwrap();
    wait_sent(servers, &alice, 1).await;
    let asked = fleet.llm.requests()[0].last_user_text().unwrap();
    let media = fleet.workspace().join(".nanobot/media/email");
    let mut saved: Vec<_> = std::fs::read_dir(&media)
        .expect("media dir")
        .map(|e| e.unwrap().path())
        .collect();
    saved.sort();
    assert_eq!(saved.len(), 3, "{saved:?}");
    for path in &saved {
        assert_eq!(path.parent(), Some(media.as_path()));
        assert!(asked.contains(&path.display().to_string()), "{asked}");
    }
    assert!(!fleet.workspace().join("escaped.txt").exists());
    assert!(!fleet.workspace().join(".nanobot/escaped.txt").exists());
    assert!(
        asked
            .contains("[attachment: fourth.txt - skipped: more than 3 attachments in one message]"),
        "{asked}"
    );
}

/// Issue 30 item 6: a mail larger than the attachment bytes allowed is never loaded whole:
/// its text is read, its attachments are noted as not saved.
#[tokio::test]
async fn a_mail_over_the_attachment_bytes_is_read_for_its_text_only_and_says_so() {
    let servers = MailServers::shared().await.expect("mail servers");
    let bot = bot_address("bot");
    let alice = person("alice");
    let mut fleet = Fleet::builder()
        .roles(&["gateway", "agent", "tools"])
        .config(json!({"channels": {"maxAttachmentBytes": 100_000, "email": section(servers, &bot, json!({
            "allowFrom": [alice], "allowedAttachmentTypes": ["*"],
            "maxAttachmentSize": 10_000_000}))}}))
        .start()
        .await
        .expect("fleet");
    wait_log(&mut fleet, LEASE_TAKEN).await;
    fleet.llm.set_fallback(Reply::text("read it"));
    // 2 MB of attachment, base64 in lines of 76.
    let payload = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        vec![7u8; 2_000_000],
    );
    let lines: Vec<&str> = payload
        .as_bytes()
        .chunks(76)
        .map(|c| std::str::from_utf8(c).unwrap())
        .collect();
    let mail = format!(
        "Authentication-Results: mx.fleet.test; spf=pass; dkim=pass\r\n\
         From: {alice}\r\nTo: {bot}\r\nSubject: Big 大\r\nMessage-ID: <big@example.test>\r\n\
         Date: Wed, 25 Nov 2026 07:00:00 +0000\r\nMIME-Version: 1.0\r\n\
         Content-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n\
         the text comes first 📄\r\n--b\r\nContent-Type: application/octet-stream\r\n\
         Content-Disposition: attachment; filename=\"big.bin\"\r\nContent-Transfer-Encoding: base64\r\n\r\n\
         {}\r\n--b--\r\n",
        lines.join("\r\n")
    );
    servers.deliver(&bot, mail.as_bytes()).await.unwrap();
    wait_sent(servers, &alice, 1).await;
    let asked = fleet.llm.requests()[0].last_user_text().unwrap();
    assert!(asked.contains("the text comes first 📄"), "{asked:.500}");
    assert!(
        asked.contains("[attachments not saved: the mail is ")
            && asked.contains(" bytes, over the 1100000 allowed]"),
        "{asked:.500}"
    );
    let media = fleet.workspace().join(".nanobot/media/email");
    let saved = std::fs::read_dir(&media).map_or(0, |d| d.count());
    assert_eq!(saved, 0, "nothing of the big mail was saved");
}
