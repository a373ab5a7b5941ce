//! `channels.email` (and `bots.<id>.channels.email`): upstream's email schema (IMAP polling in,
//! SMTP replies out) plus the fleet's `leaseSecs`, and its resolution per bot, as
//! [`super::telegram`]: a single-bot fleet serves `channels.email` as bot `default`; with
//! `bots`, a bot's own section is laid over the shared one.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::channel_rules::Rules;
use super::schema::Config;

/// `channels.email`: upstream's keys and defaults plus `leaseSecs`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", default)]
pub struct EmailConfig {
    /// Serve this channel. Default false.
    pub enabled: bool,
    /// The mailbox owner agreed that the bot reads and answers it; without it the channel
    /// neither polls nor sends (upstream). Default false.
    #[serde(alias = "consent_granted")]
    pub consent_granted: bool,
    /// IMAP server host.
    #[serde(alias = "imap_host")]
    pub imap_host: String,
    /// IMAP port. Default 993.
    #[serde(alias = "imap_port")]
    pub imap_port: u16,
    /// IMAP login.
    #[serde(alias = "imap_username")]
    pub imap_username: String,
    /// IMAP password (secret; never logged).
    #[serde(alias = "imap_password")]
    pub imap_password: String,
    /// Mailbox polled. Default `INBOX`.
    #[serde(alias = "imap_mailbox")]
    pub imap_mailbox: String,
    /// IMAP over TLS (implicit, port 993); false: plain IMAP. Default true.
    #[serde(alias = "imap_use_ssl")]
    pub imap_use_ssl: bool,
    /// SMTP server host.
    #[serde(alias = "smtp_host")]
    pub smtp_host: String,
    /// SMTP port. Default 587.
    #[serde(alias = "smtp_port")]
    pub smtp_port: u16,
    /// SMTP login (empty: no authentication).
    #[serde(alias = "smtp_username")]
    pub smtp_username: String,
    /// SMTP password (secret; never logged).
    #[serde(alias = "smtp_password")]
    pub smtp_password: String,
    /// STARTTLS on the SMTP connection. Default true.
    #[serde(alias = "smtp_use_tls")]
    pub smtp_use_tls: bool,
    /// Implicit TLS (port 465); wins over `smtpUseTls`. Default false.
    #[serde(alias = "smtp_use_ssl")]
    pub smtp_use_ssl: bool,
    /// `From` of replies (empty: `smtpUsername`, then `imapUsername`).
    #[serde(alias = "from_address")]
    pub from_address: String,
    /// Answer incoming mail; false sends only proactive mail (cron, the message tool to an
    /// address that never wrote). Default true.
    #[serde(alias = "auto_reply_enabled")]
    pub auto_reply_enabled: bool,
    /// Seconds between mailbox polls (at least 1; upstream raises values below 5 to 5).
    /// Default 30.
    #[serde(alias = "poll_interval_seconds")]
    pub poll_interval_seconds: u64,
    /// Mark handled mail `\Seen`. Default true.
    #[serde(alias = "mark_seen")]
    pub mark_seen: bool,
    /// Longest body kept, in characters. Default 12000.
    #[serde(alias = "max_body_chars")]
    pub max_body_chars: usize,
    /// Prefix of a reply's subject (unless it starts with `Re:`). Default `Re: `.
    #[serde(alias = "subject_prefix")]
    pub subject_prefix: String,
    /// Sender addresses allowed (case-insensitive) or `"*"`. Empty denies everyone.
    #[serde(alias = "allow_from")]
    pub allow_from: Vec<String>,
    /// Require `dkim=pass` in `Authentication-Results` (anti-spoofing). Default true.
    #[serde(alias = "verify_dkim")]
    pub verify_dkim: bool,
    /// Require `spf=pass` in `Authentication-Results` (anti-spoofing). Default true.
    #[serde(alias = "verify_spf")]
    pub verify_spf: bool,
    /// The `authserv-id` (RFC 8601) the receiving mail server writes first in its own
    /// `Authentication-Results`, e.g. `mx.example.com`: only the headers at the top of a mail
    /// carrying it are believed for `verifyDkim`/`verifySpf` (a sender can write the header
    /// too). Empty (the default): only the topmost header is believed.
    #[serde(alias = "authserv_id")]
    pub authserv_id: String,
    /// MIME types of attachments saved (`application/pdf`, `image/*`, `*`); empty saves none.
    #[serde(alias = "allowed_attachment_types")]
    pub allowed_attachment_types: Vec<String>,
    /// Largest attachment saved or sent, in bytes. Default 2000000.
    #[serde(alias = "max_attachment_size")]
    pub max_attachment_size: u64,
    /// Most attachments saved per mail or sent per reply. Default 5.
    #[serde(alias = "max_attachments_per_email")]
    pub max_attachments_per_email: usize,
    /// Seconds a poller's lease lasts: another replica takes over within this time after the
    /// poller dies. Default 10.
    #[serde(alias = "lease_secs")]
    pub lease_secs: f64,
    /// Upstream keys the fleet accepts without using (`postAction`, `postActionMoveMailbox`,
    /// `postActionExpunge`, `postActionIgnoreSkipped`, `sendProgress`, `sendToolHints`).
    #[serde(flatten)]
    pub extra: BTreeMap<String, Value>,
}

impl Default for EmailConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            consent_granted: false,
            imap_host: String::new(),
            imap_port: 993,
            imap_username: String::new(),
            imap_password: String::new(),
            imap_mailbox: "INBOX".into(),
            imap_use_ssl: true,
            smtp_host: String::new(),
            smtp_port: 587,
            smtp_username: String::new(),
            smtp_password: String::new(),
            smtp_use_tls: true,
            smtp_use_ssl: false,
            from_address: String::new(),
            auto_reply_enabled: true,
            poll_interval_seconds: 30,
            mark_seen: true,
            max_body_chars: 12000,
            subject_prefix: "Re: ".into(),
            allow_from: Vec::new(),
            verify_dkim: true,
            verify_spf: true,
            authserv_id: String::new(),
            allowed_attachment_types: Vec::new(),
            max_attachment_size: 2_000_000,
            max_attachments_per_email: 5,
            lease_secs: 10.0,
            extra: BTreeMap::new(),
        }
    }
}

/// Upstream email keys accepted but not interpreted by the fleet (email is never sent
/// progress or tool hints, as upstream).
const EMAIL_EXTRAS: &[&str] = &[
    "postAction",
    "postActionMoveMailbox",
    "postActionExpunge",
    "postActionIgnoreSkipped",
    "sendProgress",
    "sendToolHints",
];

/// One bot's email settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct EmailBot {
    /// Bot id of the fleet.
    pub bot: String,
    /// Workspace of that bot (attachments are saved under it).
    pub workspace: std::path::PathBuf,
    /// The settings.
    pub config: EmailConfig,
}

impl Config {
    /// Returns every bot with email enabled and its resolved settings (problems are reported
    /// by config validation; here a bot whose section does not parse is skipped).
    pub fn email_bots(&self) -> Vec<EmailBot> {
        resolve(self, &mut Vec::new())
    }
}

fn resolve(config: &Config, problems: &mut Vec<String>) -> Vec<EmailBot> {
    let global = config.channels.email.clone();
    super::sections::resolve(config, "email", global, |c| c.enabled, problems)
        .into_iter()
        .map(|s| EmailBot {
            bot: s.bot,
            workspace: s.workspace,
            config: s.config,
        })
        .collect()
}

/// Reports every problem of the email sections and lists their unknown keys in `unknown`.
pub(crate) fn validate(config: &Config, problems: &mut Vec<String>, unknown: &mut Vec<String>) {
    let bots = resolve(config, problems);
    let global = config.channels.email.as_ref().map(|g| &g.extra);
    let mut rules = Rules::new(config, "email", EMAIL_EXTRAS, global, problems, unknown);
    let mut mailboxes: BTreeMap<String, &str> = BTreeMap::new();
    for email in &bots {
        let c = &email.config;
        rules.bot(&email.bot, &c.extra);
        // Upstream's required keys; without consent nothing connects, so nothing is needed.
        let required = [
            ("imapHost", &c.imap_host),
            ("imapUsername", &c.imap_username),
            ("imapPassword", &c.imap_password),
            ("smtpHost", &c.smtp_host),
            ("smtpUsername", &c.smtp_username),
            ("smtpPassword", &c.smtp_password),
        ];
        for (key, value) in required {
            if c.consent_granted {
                rules.required(key, value);
            }
        }
        for (key, port) in [("imapPort", c.imap_port), ("smtpPort", c.smtp_port)] {
            if port == 0 {
                rules.problem(key, "must be between 1 and 65535");
            }
        }
        rules.at_least("pollIntervalSeconds", c.poll_interval_seconds as f64, 1.0);
        rules.at_least("maxBodyChars", c.max_body_chars as f64, 1.0);
        rules.lease_secs(c.lease_secs);
        let mailbox = format!(
            "{}:{}/{}",
            c.imap_host.to_lowercase(),
            c.imap_username.to_lowercase(),
            c.imap_mailbox
        );
        if c.consent_granted
            && let Some(other) = mailboxes.insert(mailbox, email.bot.as_str())
        {
            rules.problem(
                "imapMailbox",
                format_args!("bot {other} polls the same mailbox (mail would cross bots)"),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::channel_rules::parse_strict as parse;

    #[test]
    fn upstream_email_keys_load_with_upstream_defaults_and_passwords_stay_secret() {
        let c = parse(
            r#"{"channels":{"email":{"enabled":true,"consentGranted":true,
                "imapHost":"imap.x","imapUsername":"bot@x","imapPassword":"imap-s3cret",
                "smtp_host":"smtp.x","smtpUsername":"bot@x","smtpPassword":"smtp-s3cret",
                "allowFrom":["Alice@X"],"postAction":null}}}"#,
        )
        .unwrap();
        let bots = c.email_bots();
        assert_eq!(bots.len(), 1);
        let e = &bots[0].config;
        assert_eq!(bots[0].bot, "default");
        assert_eq!((e.imap_port, e.smtp_port), (993, 587));
        assert_eq!(e.imap_mailbox, "INBOX");
        assert!(e.imap_use_ssl && e.smtp_use_tls && !e.smtp_use_ssl);
        assert!(e.auto_reply_enabled && e.mark_seen && e.verify_dkim && e.verify_spf);
        assert_eq!(e.poll_interval_seconds, 30);
        assert_eq!(e.max_body_chars, 12000);
        assert_eq!(e.subject_prefix, "Re: ");
        assert_eq!(e.max_attachment_size, 2_000_000);
        assert_eq!(e.max_attachments_per_email, 5);
        let dump = c.dump_redacted();
        assert!(!dump.contains("imap-s3cret") && !dump.contains("smtp-s3cret"));
        let off = parse(r#"{"channels":{"email":{"imapHost":"x"}}}"#).unwrap();
        assert!(off.email_bots().is_empty(), "disabled by default");
    }

    #[test]
    fn every_email_problem_is_reported_at_once() {
        let err = parse(
            r#"{"channels":{"email":{"enabled":true,"consentGranted":true,"imapHots":"x",
                "imapPort":0,"pollIntervalSeconds":0,"leaseSecs":0.5}}}"#,
        )
        .unwrap_err()
        .to_string();
        for needle in [
            "channels.email.imapHots: unknown key",
            "channels.email.imapHost: required",
            "channels.email.smtpPassword: required",
            "channels.email.imapPort",
            "channels.email.pollIntervalSeconds",
            "channels.email.leaseSecs",
        ] {
            assert!(err.contains(needle), "missing {needle:?} in:\n{err}");
        }
        let shared = parse(
            r#"{"bots":{"a":{"channels":{"email":{"enabled":true,"consentGranted":true,
                    "imapHost":"h","imapUsername":"u","imapPassword":"p","smtpHost":"h",
                    "smtpUsername":"u","smtpPassword":"p"}}},
                "b":{"channels":{"email":{"enabled":true,"consentGranted":true,
                    "imapHost":"H","imapUsername":"U","imapPassword":"p","smtpHost":"h",
                    "smtpUsername":"u","smtpPassword":"p"}}}}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(shared.contains("polls the same mailbox"), "{shared}");
        let no_consent = parse(r#"{"channels":{"email":{"enabled":true}}}"#);
        assert!(no_consent.is_ok(), "without consent nothing connects");
    }
}
