//! The IMAP connection: implicit TLS (`imapUseSsl`, rustls with the web PKI roots) or plain
//! TCP, then LOGIN and SELECT, as upstream's `imaplib.IMAP4_SSL` / `IMAP4`; between polls IDLE
//! (RFC 2177) when the server offers it.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_imap::Session;
use futures::TryStreamExt as _;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::{self, pki_types::ServerName};

use nanobot_runtime::config::EmailConfig;

/// Bytes of a mail over the size limit that are read (its headers and text).
pub(super) const HEAD_ROOM: u32 = 1_000_000;

/// A fetched mail.
#[derive(Debug)]
pub(super) struct Fetched {
    /// The raw mail, or its first [`HEAD_ROOM`] bytes.
    pub raw: Vec<u8>,
    /// The mail's size when it was over the limit and only its beginning was read.
    pub cut: Option<u32>,
}

/// Longest a connect, login or command may take.
pub(super) const TIMEOUT: Duration = Duration::from_secs(30);

/// Why a connection or command failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum ImapError {
    /// The server refused the credentials: an operator must fix the config.
    #[error("login refused: {0}")]
    LoginRefused(String),
    /// Anything else (network, TLS, a command's NO/BAD): worth retrying.
    #[error("{0}")]
    Failed(String),
}

impl From<async_imap::error::Error> for ImapError {
    fn from(e: async_imap::error::Error) -> Self {
        Self::Failed(e.to_string())
    }
}

impl From<std::io::Error> for ImapError {
    fn from(e: std::io::Error) -> Self {
        Self::Failed(e.to_string())
    }
}

/// The byte stream under the IMAP session.
#[derive(Debug)]
pub(super) enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

/// A logged-in session with its mailbox selected.
pub(super) struct Mailbox {
    pub(super) session: Session<Stream>,
    /// The mailbox's UIDVALIDITY (0 when the server sends none).
    pub(super) validity: u32,
    /// The mailbox's UIDNEXT at SELECT, when the server sent it.
    uid_next: Option<u32>,
    /// Whether the server offers IDLE.
    pub(super) idle: bool,
}

/// Connects, logs in and selects `cfg.imap_mailbox`.
pub(super) async fn open(cfg: &EmailConfig) -> Result<Mailbox, ImapError> {
    let connect = async {
        let tcp = TcpStream::connect((cfg.imap_host.as_str(), cfg.imap_port)).await?;
        let stream = if cfg.imap_use_ssl {
            Stream::Tls(Box::new(tls(&cfg.imap_host, tcp).await?))
        } else {
            Stream::Plain(tcp)
        };
        let mut client = async_imap::Client::new(stream);
        client
            .read_response()
            .await?
            .ok_or_else(|| ImapError::Failed("connection closed before the greeting".into()))?;
        let mut session = client
            .login(&cfg.imap_username, &cfg.imap_password)
            .await
            .map_err(|(e, _)| match e {
                async_imap::error::Error::No(text) => ImapError::LoginRefused(text),
                other => ImapError::Failed(other.to_string()),
            })?;
        let idle = session.capabilities().await?.has_str("IDLE");
        let selected = session.select(&cfg.imap_mailbox).await?;
        Ok(Mailbox {
            session,
            validity: selected.uid_validity.unwrap_or(0),
            uid_next: selected.uid_next,
            idle,
        })
    };
    tokio::time::timeout(TIMEOUT, connect)
        .await
        .map_err(|_| ImapError::Failed("timed out".into()))?
}

impl Mailbox {
    /// Returns the UIDs above `last` of the unseen mail, ascending (all unseen when `last` is 0).
    pub(super) async fn unseen_after(&mut self, last: u32) -> Result<Vec<u32>, ImapError> {
        let query = match last {
            0 => "UNSEEN".to_string(),
            n => format!("UID {}:* UNSEEN", n.saturating_add(1)),
        };
        let found = timed(self.session.uid_search(&query)).await?;
        // `n:*` always matches the highest UID, even below n.
        let mut uids: Vec<u32> = found.into_iter().filter(|uid| *uid > last).collect();
        uids.sort_unstable();
        Ok(uids)
    }

    /// Returns the highest UID in the mailbox (0 when it is empty): UIDNEXT − 1 from SELECT,
    /// else the largest of `UID SEARCH ALL`.
    pub(super) async fn highest_uid(&mut self) -> Result<u32, ImapError> {
        if let Some(next) = self.uid_next {
            return Ok(next.saturating_sub(1));
        }
        let all = timed(self.session.uid_search("ALL")).await?;
        Ok(all.into_iter().max().unwrap_or(0))
    }

    /// Waits in IDLE until the server reports a change of the mailbox (new mail) or `max`
    /// passed, then ends the IDLE; the session is handed back for the next poll.
    pub(super) async fn idle(self, max: Duration) -> Result<Self, ImapError> {
        let Self {
            session,
            validity,
            uid_next,
            idle,
        } = self;
        let mut handle = session.idle();
        timed(handle.init()).await?;
        let (wait, _stop) = handle.wait_with_timeout(max);
        wait.await?;
        let session = timed(handle.done()).await?;
        Ok(Self {
            session,
            validity,
            uid_next,
            idle,
        })
    }

    /// Returns the raw mail of `uid` without marking it seen; `None` when it is gone. A mail
    /// over `max` bytes (its `RFC822.SIZE`) is not loaded: only its first [`HEAD_ROOM`] bytes
    /// are (headers and text), with its size as [`Fetched::cut`].
    pub(super) async fn fetch(&mut self, uid: u32, max: u32) -> Result<Option<Fetched>, ImapError> {
        let size = self.attribute(uid, "(UID RFC822.SIZE)", |f| f.size).await?;
        let Some(size) = size else { return Ok(None) };
        let (query, cut) = match size > max {
            true => (format!("(UID BODY.PEEK[]<0.{HEAD_ROOM}>)"), Some(size)),
            false => ("(UID BODY.PEEK[])".to_string(), None),
        };
        let raw = self
            .attribute(uid, &query, |f| f.body().map(<[u8]>::to_vec))
            .await?;
        Ok(raw.map(|raw| Fetched { raw, cut }))
    }

    /// Fetches `query` for `uid` and reads one attribute of the answer.
    async fn attribute<T>(
        &mut self,
        uid: u32,
        query: &str,
        read: impl Fn(&async_imap::types::Fetch) -> Option<T>,
    ) -> Result<Option<T>, ImapError> {
        let fetched = async {
            let stream = self.session.uid_fetch(uid.to_string(), query).await?;
            stream.try_collect::<Vec<_>>().await
        };
        let fetched = timed(fetched).await?;
        Ok(fetched.iter().find(|f| f.uid == Some(uid)).and_then(read))
    }

    /// Marks `uid` `\Seen`.
    pub(super) async fn mark_seen(&mut self, uid: u32) -> Result<(), ImapError> {
        let stored = async {
            let stream = self
                .session
                .uid_store(uid.to_string(), "+FLAGS (\\Seen)")
                .await?;
            stream.try_collect::<Vec<_>>().await
        };
        timed(stored).await?;
        Ok(())
    }

    /// Checks the connection (and lets the server report new mail).
    pub(super) async fn noop(&mut self) -> Result<(), ImapError> {
        timed(self.session.noop()).await
    }

    /// Logs out (best effort).
    pub(super) async fn logout(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.session.logout()).await;
    }
}

async fn timed<T>(
    fut: impl Future<Output = Result<T, async_imap::error::Error>>,
) -> Result<T, ImapError> {
    match tokio::time::timeout(TIMEOUT, fut).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(ImapError::Failed("timed out".into())),
    }
}

async fn tls(host: &str, tcp: TcpStream) -> Result<TlsStream<TcpStream>, ImapError> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ImapError::Failed(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let name = ServerName::try_from(host.to_string())
        .map_err(|_| ImapError::Failed(format!("{host:?} is not a valid TLS server name")))?;
    Ok(TlsConnector::from(Arc::new(config))
        .connect(name, tcp)
        .await?)
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_flush(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Self::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}
