//! The SSRF guard for outbound fetches: a URL must be http(s) with a host whose every
//! address passes the [`net`](crate::net) policy; the vetted addresses are pinned so the
//! connection goes to exactly what was checked (no second lookup an attacker's DNS could
//! answer differently).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::net::{Cidr, is_blocked};

/// How long one host lookup may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Checks URLs against the address policy and pins what it vetted.
#[derive(Debug, Clone, Default)]
pub struct Guard {
    whitelist: Vec<Cidr>,
}

/// A URL that passed the guard.
#[derive(Debug, Clone, PartialEq)]
pub struct Vetted {
    /// The parsed URL.
    pub url: Url,
    /// Whether any address is internal (reachable only through `tools.ssrfWhitelist`).
    pub internal: bool,
}

impl Guard {
    /// Returns a guard letting `whitelist` through.
    pub fn new(whitelist: Vec<Cidr>) -> Self {
        Self { whitelist }
    }

    /// Parses and vets `text`; on success the host's vetted addresses are recorded in `pins`.
    /// `Err` holds upstream's reason (`Only http/https allowed, got 'ftp'`, `Blocked: {host}
    /// resolves to private/internal address {addr}`, ...).
    pub async fn vet(&self, text: &str, pins: &Pins) -> Result<Vetted, String> {
        let url = parse(text)?;
        self.vet_url(url, pins).await
    }

    /// Vets an already parsed URL (a redirect target).
    pub async fn vet_url(&self, url: Url, pins: &Pins) -> Result<Vetted, String> {
        check_scheme(&url)?;
        let port = url.port_or_known_default().unwrap_or(80);
        let (host, addrs) = match url.host() {
            None => return Err("Missing domain".into()),
            Some(url::Host::Ipv4(ip)) => (ip.to_string(), vec![IpAddr::V4(ip)]),
            Some(url::Host::Ipv6(ip)) => (ip.to_string(), vec![IpAddr::V6(ip)]),
            Some(url::Host::Domain(name)) => (name.to_string(), lookup(name, port).await?),
        };
        let mut internal = false;
        for ip in &addrs {
            if is_blocked(*ip, &self.whitelist) {
                return Err(format!(
                    "Blocked: {host} resolves to private/internal address {ip}"
                ));
            }
            internal |= crate::net::is_internal(*ip);
        }
        if let Some(url::Host::Domain(name)) = url.host() {
            let sockets = addrs.iter().map(|ip| SocketAddr::new(*ip, port)).collect();
            pins.pin(name, sockets);
        }
        Ok(Vetted { url, internal })
    }
}

/// Parses a URL the way upstream reports problems with it.
fn parse(text: &str) -> Result<Url, String> {
    match Url::parse(text) {
        Ok(url) => Ok(url),
        Err(url::ParseError::RelativeUrlWithoutBase) => {
            Err("Only http/https allowed, got 'none'".into())
        }
        Err(url::ParseError::EmptyHost) => Err("Missing domain".into()),
        Err(e) => Err(format!("Invalid URL: {e}")),
    }
}

fn check_scheme(url: &Url) -> Result<(), String> {
    match url.scheme() {
        "http" | "https" => Ok(()),
        other => Err(format!("Only http/https allowed, got '{other}'")),
    }
}

async fn lookup(host: &str, port: u16) -> Result<Vec<IpAddr>, String> {
    let unresolvable = || format!("Cannot resolve hostname: {host}");
    let found = tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((host, port)))
        .await
        .map_err(|_| unresolvable())?
        .map_err(|_| unresolvable())?;
    let mut addrs: Vec<IpAddr> = found.map(|a| a.ip()).collect();
    addrs.dedup();
    if addrs.is_empty() {
        return Err(unresolvable());
    }
    Ok(addrs)
}

/// The addresses vetted per host during one fetch; the HTTP client resolves through it and
/// refuses any host that was not vetted (fails closed).
#[derive(Debug, Clone, Default)]
pub struct Pins(Arc<Mutex<HashMap<String, Vec<SocketAddr>>>>);

impl Pins {
    fn pin(&self, host: &str, addrs: Vec<SocketAddr>) {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.insert(host.to_ascii_lowercase(), addrs);
    }

    fn get(&self, host: &str) -> Option<Vec<SocketAddr>> {
        let map = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        map.get(&host.to_ascii_lowercase()).cloned()
    }
}

/// A host the client tried to reach without vetting it first.
#[derive(Debug, thiserror::Error)]
#[error("host {host} was not vetted by the SSRF guard")]
struct NotVetted {
    host: String,
}

impl Resolve for Pins {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        let pinned = self.get(&host);
        Box::pin(async move {
            match pinned {
                Some(addrs) => Ok(Box::new(addrs.into_iter()) as Addrs),
                None => {
                    Err(Box::new(NotVetted { host }) as Box<dyn std::error::Error + Send + Sync>)
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn refuses_bad_schemes_and_internal_targets_with_upstream_reasons() {
        let guard = Guard::default();
        let pins = Pins::default();
        let reason = |text: &'static str| {
            let guard = guard.clone();
            let pins = pins.clone();
            async move { guard.vet(text, &pins).await.unwrap_err() }
        };
        assert_eq!(
            reason("ftp://example.com/x").await,
            "Only http/https allowed, got 'ftp'"
        );
        assert_eq!(
            reason("file:///etc/passwd").await,
            "Only http/https allowed, got 'file'"
        );
        assert_eq!(
            reason("example.com").await,
            "Only http/https allowed, got 'none'"
        );
        assert_eq!(reason("http://").await, "Missing domain");
        assert_eq!(
            reason("http://127.0.0.1:8080/admin").await,
            "Blocked: 127.0.0.1 resolves to private/internal address 127.0.0.1"
        );
        for (url, addr) in [
            ("http://[::1]/", "::1"),
            ("http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1"),
            (
                "http://169.254.169.254/latest/meta-data/",
                "169.254.169.254",
            ),
            ("http://10.0.0.5/", "10.0.0.5"),
            ("http://172.16.3.4/", "172.16.3.4"),
            ("http://192.168.1.1/", "192.168.1.1"),
            ("http://100.64.0.1/", "100.64.0.1"),
            ("http://0.0.0.0:4222/", "0.0.0.0"),
            ("http://[fd00::1]/", "fd00::1"),
            ("http://[fe80::1]/", "fe80::1"),
        ] {
            let got = reason(url).await;
            assert!(
                got.ends_with(&format!("private/internal address {addr}")),
                "{url}: {got}"
            );
        }
        // A hostname is judged by what it resolves to.
        let localhost = reason("http://localhost:9/").await;
        assert!(
            localhost.starts_with("Blocked: localhost resolves to private/internal address"),
            "{localhost}"
        );
        assert_eq!(
            reason("http://no-such-host.invalid/").await,
            "Cannot resolve hostname: no-such-host.invalid"
        );
        assert!(
            pins.get("localhost").is_none(),
            "refused hosts are never pinned"
        );
    }

    #[tokio::test]
    async fn whitelisted_addresses_pass_and_names_are_pinned() {
        let guard = Guard::new(vec![
            Cidr::parse("127.0.0.0/8").unwrap(),
            Cidr::parse("::1/128").unwrap(),
        ]);
        let pins = Pins::default();
        let vetted = guard.vet("http://localhost:8123/a", &pins).await.unwrap();
        assert!(vetted.internal);
        let pinned = pins.get("LOCALHOST").unwrap();
        assert!(
            pinned
                .iter()
                .all(|a| a.port() == 8123 && a.ip().is_loopback())
        );
        let literal = guard.vet("http://127.0.0.1/", &pins).await.unwrap();
        assert_eq!(literal.url.as_str(), "http://127.0.0.1/");
        let unvetted = pins.resolve("example.com".parse().unwrap()).await;
        assert!(unvetted.is_err(), "an unvetted host never resolves");
    }
}
