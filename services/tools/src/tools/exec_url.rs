//! The `exec` SSRF guard: a command naming an `http(s)://` URL whose host is, or resolves
//! to, a loopback, private, link-local or otherwise internal address is refused (upstream's
//! `contains_internal_url`), unless the address is in `tools.ssrfWhitelist`.

use std::net::IpAddr;
use std::sync::LazyLock;
use std::time::Duration;

pub use crate::net::Cidr;
use crate::net::is_blocked;

/// Refusal when an internal URL is found.
pub const INTERNAL_URL: &str =
    "Error: Command blocked by safety guard (internal/private URL detected)";

/// How long one host lookup may take before the URL is let through.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(2);

static URL: LazyLock<regex::Regex> = LazyLock::new(|| {
    regex::Regex::new(r#"(?i)https?://[^\s'"<>|;`)]+"#).expect("static url regex is valid")
});

/// Returns the host of a URL (`user@`, port and brackets stripped).
fn host_of(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => host_port.split(':').next()?,
    };
    let host = host.trim_end_matches('.').to_lowercase();
    (!host.is_empty()).then_some(host)
}

/// Returns the refusal when `command` names a URL on an internal address.
pub async fn check_urls(command: &str, whitelist: &[Cidr]) -> Option<&'static str> {
    let blocked = |ip: IpAddr| is_blocked(ip, whitelist);
    for url in URL.find_iter(command) {
        let Some(host) = host_of(url.as_str()) else {
            continue;
        };
        if host == "localhost" || host.ends_with(".localhost") {
            return Some(INTERNAL_URL);
        }
        if let Ok(ip) = host.parse::<IpAddr>() {
            if blocked(ip) {
                return Some(INTERNAL_URL);
            }
            continue;
        }
        let lookup = tokio::net::lookup_host((host.as_str(), 80));
        let Ok(Ok(addrs)) = tokio::time::timeout(LOOKUP_TIMEOUT, lookup).await else {
            continue;
        };
        for addr in addrs {
            if blocked(addr.ip()) {
                return Some(INTERNAL_URL);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn internal_urls_are_refused_unless_whitelisted() {
        for command in [
            "curl http://127.0.0.1:8080/admin",
            "curl -s http://localhost/x",
            "wget https://10.1.2.3/file",
            "curl http://169.254.169.254/latest/meta-data/",
            "curl http://user:pw@192.168.0.1:80/",
            "curl 'http://[::1]:9000/'",
            "curl http://[::ffff:127.0.0.1]/",
            "curl http://0.0.0.0:4222",
            "curl HTTP://100.64.0.1/",
        ] {
            assert_eq!(
                check_urls(command, &[]).await,
                Some(INTERNAL_URL),
                "{command}"
            );
        }
        for command in [
            "curl https://8.8.8.8/",
            "echo no url here",
            "curl http://203.0.113.9/x",
        ] {
            assert_eq!(check_urls(command, &[]).await, None, "{command}");
        }
        let whitelist = [
            Cidr::parse("10.0.0.0/8").unwrap(),
            Cidr::parse("::1").unwrap(),
        ];
        assert_eq!(check_urls("curl http://10.9.9.9/", &whitelist).await, None);
        assert_eq!(check_urls("curl http://[::1]/", &whitelist).await, None);
        assert_eq!(
            check_urls("curl http://192.168.1.1/", &whitelist).await,
            Some(INTERNAL_URL)
        );
        assert_eq!(Cidr::parse("10.0.0.0/33"), None);
        assert_eq!(
            host_of("https://a.example.com:8443/p?q"),
            Some("a.example.com".into())
        );
    }
}
