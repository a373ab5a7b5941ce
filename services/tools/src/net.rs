//! The address policy shared by every tool that reaches the network (`exec`'s URL guard,
//! `web_fetch`, MCP over HTTP): loopback, private, link-local, unique-local, carrier-grade
//! NAT and unspecified addresses are internal, IPv4-mapped IPv6 addresses count as their
//! IPv4 form, and `tools.ssrfWhitelist` CIDRs are let through.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use nanobot_runtime::config::Cidr;

/// Returns an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) as its IPv4 form; others as is.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// Returns whether an address is internal (never reachable from a tool without a
/// whitelist entry).
pub fn is_internal(ip: IpAddr) -> bool {
    match canonical(ip) {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => is_internal_v6(v6),
    }
}

/// Returns whether a tool must not connect to `ip`: internal and not whitelisted.
pub fn is_blocked(ip: IpAddr, whitelist: &[Cidr]) -> bool {
    let ip = canonical(ip);
    is_internal(ip) && !whitelist.iter().any(|c| c.contains(ip))
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 198 && (b == 18 || b == 19))
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    let first = ip.segments()[0];
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || (first & 0xfe00) == 0xfc00
        || (first & 0xffc0) == 0xfe80
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn internal_ranges_and_mapped_addresses_are_blocked_unless_whitelisted() {
        for internal in [
            "127.0.0.1",
            "127.0.0.2",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "169.254.169.254",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "::",
            "fd00::1",
            "fe80::1",
        ] {
            assert!(is_blocked(ip(internal), &[]), "{internal}");
        }
        for public in ["8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111"] {
            assert!(!is_blocked(ip(public), &[]), "{public}");
        }
        let whitelist = [Cidr::parse("127.0.0.1/32").unwrap()];
        assert!(!is_blocked(ip("127.0.0.1"), &whitelist));
        assert!(!is_blocked(ip("::ffff:127.0.0.1"), &whitelist));
        assert!(is_blocked(ip("127.0.0.2"), &whitelist));
    }
}
