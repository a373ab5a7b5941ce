//! Real mail servers on loopback for the email channel's tests, started once per test binary
//! ([`MailServers::shared`]): Debian's dovecot as the IMAP server (its own config in a temporary
//! directory: any user logs in with [`PASSWORD`], maildirs in that directory, plain IMAP on
//! 127.0.0.1) and an aiosmtpd SMTP server (`mail_servers/smtp_sink.py`) that writes every mail
//! it accepts to a directory. `scripts/deps.sh email` (`make deps-test`) installs both; a
//! missing one fails the test with that hint.
//!
//! Each server runs under a `sh` that kills it when its standard input closes, which happens
//! when the test process exits (a static is never dropped).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use nanobot_tests::mail_servers::MailServers;
//! let servers = MailServers::shared().await?;
//! servers.deliver("bot@fleet.test", b"From: a@b\r\nSubject: hi\r\n\r\nhello\r\n").await?;
//! let sent = servers.sent_to("a@b");
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::OnceCell;

use nanobot_runtime::testsuite::{find_server_binary, free_port, wait_until};

/// The password of every mailbox and of SMTP AUTH.
pub const PASSWORD: &str = "mail-test-secret";

/// The running servers.
#[derive(Debug)]
pub struct MailServers {
    dir: tempfile::TempDir,
    imap_port: u16,
    smtp_port: u16,
    /// The servers' wrappers; their stdin closes when the process exits.
    _procs: Mutex<Vec<(Child, ChildStdin)>>,
}

/// A mail the SMTP server accepted.
#[derive(Debug, Clone)]
pub struct SentMail {
    /// The raw bytes as received.
    pub raw: Vec<u8>,
    /// `To` address (lower case).
    pub to: String,
    /// `From` address (lower case).
    pub from: String,
    /// Subject.
    pub subject: String,
    /// `In-Reply-To` as written (with angle brackets).
    pub in_reply_to: String,
    /// `References` as written.
    pub references: String,
    /// `Message-ID` as written.
    pub message_id: String,
    /// The text body.
    pub body: String,
}

static SHARED: OnceCell<MailServers> = OnceCell::const_new();

impl MailServers {
    /// Returns the servers of this test binary, starting them on first use.
    pub async fn shared() -> anyhow::Result<&'static MailServers> {
        SHARED.get_or_try_init(Self::start).await
    }

    async fn start() -> anyhow::Result<Self> {
        let dovecot = find_server_binary("dovecot", "DOVECOT")?;
        let aiosmtpd = find_server_binary("aiosmtpd", "AIOSMTPD")?;
        // The venv's python runs the sink (aiosmtpd's console script sits next to it).
        let python = std::fs::canonicalize(&aiosmtpd)?
            .parent()
            .context("aiosmtpd has no directory")?
            .join("python");
        let dir = tempfile::Builder::new().prefix("mail-servers-").tempdir()?;
        // Dovecot's unprivileged processes walk through it to the maildirs and sockets.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )?;
        let (imap_port, smtp_port) = (free_port()?, free_port()?);
        let mail = dir.path().join("mail");
        let sent = dir.path().join("sent");
        std::fs::create_dir_all(&mail)?;
        std::fs::create_dir_all(&sent)?;
        std::fs::create_dir_all(dir.path().join("run"))?;
        let (uid, gid) = mail_owner(&mail)?;
        let conf = dir.path().join("dovecot.conf");
        std::fs::write(&conf, dovecot_conf(dir.path(), imap_port, uid, gid))?;
        let sink = dir.path().join("smtp_sink.py");
        std::fs::write(&sink, include_str!("mail_servers/smtp_sink.py"))?;
        let procs = vec![
            supervised(
                &dovecot,
                &["-F".into(), "-c".into(), conf.display().to_string()],
                &dir.path().join("dovecot.out"),
                None,
            )?,
            supervised(
                &python,
                &[
                    sink.display().to_string(),
                    sent.display().to_string(),
                    smtp_port.to_string(),
                    PASSWORD.into(),
                ],
                &dir.path().join("smtp.out"),
                // The directory outlives the static (never dropped): the last wrapper removes it.
                Some(dir.path()),
            )?,
        ];
        let servers = Self {
            dir,
            imap_port,
            smtp_port,
            _procs: Mutex::new(procs),
        };
        for port in [imap_port, smtp_port] {
            let ready = wait_until(
                || async move {
                    tokio::net::TcpStream::connect(("127.0.0.1", port))
                        .await
                        .is_ok()
                },
                Duration::from_secs(15),
            )
            .await;
            if ready.is_err() {
                anyhow::bail!(
                    "mail server on port {port} not ready; dovecot: {} smtp: {}",
                    servers.log("dovecot.out"),
                    servers.log("smtp.out")
                );
            }
        }
        Ok(servers)
    }

    fn log(&self, name: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default()
    }

    /// Returns the IMAP port (plain IMAP on 127.0.0.1).
    pub fn imap_port(&self) -> u16 {
        self.imap_port
    }

    /// Returns the SMTP port (plain SMTP with AUTH on 127.0.0.1).
    pub fn smtp_port(&self) -> u16 {
        self.smtp_port
    }

    /// Logs in to `user`'s mailbox.
    async fn session(
        &self,
        user: &str,
    ) -> anyhow::Result<async_imap::Session<tokio::net::TcpStream>> {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", self.imap_port)).await?;
        let mut client = async_imap::Client::new(tcp);
        client.read_response().await?.context("no IMAP greeting")?;
        client
            .login(user, PASSWORD)
            .await
            .map_err(|(e, _)| anyhow::anyhow!("IMAP login of {user}: {e}"))
    }

    /// Delivers `raw` into `user`'s INBOX, unseen (IMAP APPEND).
    pub async fn deliver(&self, user: &str, raw: &[u8]) -> anyhow::Result<()> {
        let mut session = self.session(user).await?;
        session.append("INBOX", None, None, raw).await?;
        session.logout().await?;
        Ok(())
    }

    /// Creates the mailbox `mailbox` of `user` (empty).
    pub async fn create_mailbox(&self, user: &str, mailbox: &str) -> anyhow::Result<()> {
        let mut session = self.session(user).await?;
        session.create(mailbox).await?;
        session.logout().await?;
        Ok(())
    }

    /// Delivers `raw` into `user`'s `mailbox`, unseen (IMAP APPEND).
    pub async fn deliver_to(&self, user: &str, mailbox: &str, raw: &[u8]) -> anyhow::Result<()> {
        let mut session = self.session(user).await?;
        session.append(mailbox, None, None, raw).await?;
        session.logout().await?;
        Ok(())
    }

    /// Replaces `user`'s `mailbox` by a new one (a new UIDVALIDITY) holding `mails`, unseen:
    /// they are appended to a fresh mailbox which then takes the old one's name in one RENAME,
    /// so a client never sees the name empty.
    pub async fn recreate_mailbox(
        &self,
        user: &str,
        mailbox: &str,
        mails: &[&[u8]],
    ) -> anyhow::Result<()> {
        let mut session = self.session(user).await?;
        let fresh = format!("{mailbox}-recreated");
        session.create(&fresh).await?;
        for raw in mails {
            session.append(&fresh, None, None, raw).await?;
        }
        session.delete(mailbox).await?;
        session.rename(&fresh, mailbox).await?;
        session.logout().await?;
        Ok(())
    }

    /// Returns the UIDVALIDITY of `user`'s `mailbox`.
    pub async fn uid_validity(&self, user: &str, mailbox: &str) -> anyhow::Result<u32> {
        let mut session = self.session(user).await?;
        let selected = session.select(mailbox).await?;
        let _ = session.logout().await;
        selected.uid_validity.context("no UIDVALIDITY")
    }

    /// Returns the UIDs of `user`'s INBOX mail that is still unseen.
    pub async fn unseen(&self, user: &str) -> anyhow::Result<Vec<u32>> {
        let mut session = self.session(user).await?;
        session.select("INBOX").await?;
        let mut uids: Vec<u32> = session.uid_search("UNSEEN").await?.into_iter().collect();
        uids.sort_unstable();
        let _ = session.logout().await;
        Ok(uids)
    }

    /// Returns every mail the SMTP server accepted for `to`, in arrival order.
    pub fn sent_to(&self, to: &str) -> Vec<SentMail> {
        let to = to.to_lowercase();
        self.sent().into_iter().filter(|m| m.to == to).collect()
    }

    /// Returns every mail the SMTP server accepted, in arrival order.
    pub fn sent(&self) -> Vec<SentMail> {
        let Ok(entries) = std::fs::read_dir(self.dir.path().join("sent")) else {
            return Vec::new();
        };
        let mut paths: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "eml"))
            .collect();
        paths.sort_by_key(|p| {
            let name = p.file_name().unwrap_or_default().to_string_lossy();
            name.split('-')
                .next()
                .unwrap_or("0")
                .parse::<u128>()
                .unwrap_or(0)
        });
        paths
            .iter()
            .filter_map(|p| std::fs::read(p).ok())
            .filter_map(parse_sent)
            .collect()
    }
}

fn parse_sent(raw: Vec<u8>) -> Option<SentMail> {
    let msg = mail_parser::MessageParser::default().parse(&raw)?;
    let address = |a: Option<&mail_parser::Address<'_>>| {
        a.and_then(|a| a.first())
            .and_then(|a| a.address())
            .unwrap_or_default()
            .to_lowercase()
    };
    let raw_header = |name: &str| {
        let root = msg.parts.first()?;
        let h = root
            .headers
            .iter()
            .find(|h| h.name.as_str().eq_ignore_ascii_case(name))?;
        let bytes = msg
            .raw_message
            .get(h.offset_start as usize..h.offset_end as usize)?;
        Some(String::from_utf8_lossy(bytes).trim().to_string())
    };
    let mail = SentMail {
        to: address(msg.to()),
        from: address(msg.from()),
        subject: msg.subject().unwrap_or_default().to_string(),
        in_reply_to: raw_header("In-Reply-To").unwrap_or_default(),
        references: raw_header("References").unwrap_or_default(),
        message_id: raw_header("Message-ID").unwrap_or_default(),
        body: msg.body_text(0).unwrap_or_default().into_owned(),
        raw: Vec::new(),
    };
    Some(SentMail { raw, ..mail })
}

/// Returns who owns the maildirs: the current user, or `nobody` when that is root (dovecot
/// never runs mail processes as root); the directory is handed to that user.
fn mail_owner(mail: &Path) -> anyhow::Result<(u32, u32)> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = std::fs::metadata(mail)?;
    if meta.uid() != 0 {
        return Ok((meta.uid(), meta.gid()));
    }
    let (uid, gid) = (65534, 65534);
    std::os::unix::fs::chown(mail, Some(uid), Some(gid)).context("chown the maildir root")?;
    Ok((uid, gid))
}

fn dovecot_conf(dir: &Path, port: u16, uid: u32, gid: u32) -> String {
    let dir = dir.display();
    // As root, dovecot drops its login and internal processes to the packaged users; as
    // another user it runs everything as that user.
    let users = if uid == 65534 {
        String::new()
    } else {
        let user = std::env::var("USER").unwrap_or_else(|_| "nobody".into());
        format!("default_login_user = {user}\ndefault_internal_user = {user}\n")
    };
    format!(
        "base_dir = {dir}/run
state_dir = {dir}/run
log_path = {dir}/dovecot.log
{users}protocols = imap
listen = 127.0.0.1
ssl = no
disable_plaintext_auth = no
auth_mechanisms = plain login
mail_location = maildir:{dir}/mail/%u
first_valid_uid = 1
passdb {{
  driver = static
  args = password={PASSWORD}
}}
userdb {{
  driver = static
  args = uid={uid} gid={gid} home={dir}/mail/%u
}}
service imap-login {{
  chroot =
  inet_listener imap {{
    address = 127.0.0.1
    port = {port}
  }}
  inet_listener imaps {{
    port = 0
  }}
}}
service anvil {{
  chroot =
}}
"
    )
}

/// Spawns `program args` under a `sh` that kills it once the `sh`'s stdin (kept by this
/// process) closes, then removes `cleanup`.
pub(crate) fn supervised(
    program: &Path,
    args: &[String],
    log: &Path,
    cleanup: Option<&Path>,
) -> anyhow::Result<(Child, ChildStdin)> {
    let out = std::fs::File::create(log)?;
    let cleanup = cleanup.map(|d| d.display().to_string()).unwrap_or_default();
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(r#""$@" </dev/null & pid=$!; read _; kill "$pid"; wait "$pid"; [ -z "$CLEANUP" ] || rm -rf "$CLEANUP""#)
        .arg("sh")
        .arg(program)
        .args(args)
        .env("CLEANUP", cleanup)
        .stdin(Stdio::piped())
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()
        .with_context(|| format!("spawn {}", program.display()))?;
    let stdin = child.stdin.take().context("no stdin")?;
    Ok((child, stdin))
}
