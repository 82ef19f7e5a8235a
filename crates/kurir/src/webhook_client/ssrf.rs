//! The SSRF guard: endpoints may not reach loopback, private, link-local, unique-local,
//! site-local, CGNAT, cloud-metadata or other special-purpose addresses unless an operator allows
//! the network. An IPv6 address that carries an IPv4 address (IPv4-mapped, -translated or
//! -compatible, NAT64, 6to4, Teredo) is judged by the IPv4 address it carries.
//!
//! The check runs on the addresses a name resolves to, inside the HTTP client's resolver, so the
//! address checked is the address connected to: a DNS answer that changes between a check and
//! the connect (rebinding) gains nothing. IP-literal URLs never reach a resolver and are checked
//! before the request.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;

/// Why an address is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restricted {
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// 10/8, 172.16/12, 192.168/16.
    Private,
    /// 169.254/16, fe80::/10.
    LinkLocal,
    /// fc00::/7.
    UniqueLocal,
    /// fec0::/10 (deprecated site-local).
    SiteLocal,
    /// 100.64/10 (carrier-grade NAT).
    Cgnat,
    /// Cloud instance metadata (169.254.169.254, 100.100.100.200, fd00:ec2::254).
    Metadata,
    /// 0.0.0.0/8, ::, multicast, broadcast, reserved and documentation ranges.
    SpecialPurpose,
}

impl fmt::Display for Restricted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Loopback => "loopback",
            Self::Private => "private",
            Self::LinkLocal => "link-local",
            Self::UniqueLocal => "unique-local",
            Self::SiteLocal => "site-local",
            Self::Cgnat => "CGNAT",
            Self::Metadata => "cloud metadata",
            Self::SpecialPurpose => "special-purpose",
        })
    }
}

/// Classifies an address; `None` means it is an ordinary public address.
pub fn classify(ip: IpAddr) -> Option<Restricted> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn classify_v4(ip: Ipv4Addr) -> Option<Restricted> {
    let [a, b, c, d] = ip.octets();
    if ip == Ipv4Addr::new(169, 254, 169, 254) || ip == Ipv4Addr::new(100, 100, 100, 200) {
        return Some(Restricted::Metadata);
    }
    match (a, b) {
        (127, _) => Some(Restricted::Loopback),
        (10, _) | (192, 168) => Some(Restricted::Private),
        (172, 16..=31) => Some(Restricted::Private),
        (169, 254) => Some(Restricted::LinkLocal),
        (100, 64..=127) => Some(Restricted::Cgnat),
        (0, _) | (224..=255, _) => Some(Restricted::SpecialPurpose),
        (192, 0) if c == 0 || c == 2 => Some(Restricted::SpecialPurpose),
        (198, 18..=19) => Some(Restricted::SpecialPurpose),
        (198, 51) if c == 100 => Some(Restricted::SpecialPurpose),
        (203, 0) if c == 113 => Some(Restricted::SpecialPurpose),
        _ => {
            let _ = d;
            None
        }
    }
}

fn classify_v6(ip: Ipv6Addr) -> Option<Restricted> {
    if ip.is_loopback() {
        return Some(Restricted::Loopback);
    }
    if ip.is_unspecified() {
        return Some(Restricted::SpecialPurpose);
    }
    if ip == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) {
        return Some(Restricted::Metadata);
    }
    if let Some(embedded) = embedded_ipv4(ip) {
        return embedded.into_iter().flatten().find_map(classify_v4);
    }
    let seg = ip.segments();
    match seg[0] {
        0xfe80..=0xfebf => Some(Restricted::LinkLocal),
        0xfec0..=0xfeff => Some(Restricted::SiteLocal),
        0xfc00..=0xfdff => Some(Restricted::UniqueLocal),
        0xff00..=0xffff => Some(Restricted::SpecialPurpose),
        0x2001 if seg[1] == 0xdb8 => Some(Restricted::SpecialPurpose),
        _ => None,
    }
}

/// The IPv4 addresses an IPv6 address carries under a translation or tunnelling scheme, which a
/// connection to it may end up reaching: such an address is judged by them, never as an ordinary
/// IPv6 address (`[::ffff:0:7f00:1]` is loopback in disguise). `None` for any other address.
///
/// - IPv4-mapped `::ffff:a.b.c.d` and IPv4-translated `::ffff:0:a.b.c.d` (RFC 2765), and the
///   deprecated IPv4-compatible `::a.b.c.d`: the last 32 bits.
/// - NAT64, the well-known `64:ff9b::/96` and the local-use `64:ff9b:1::/48` (RFC 8215, read in
///   the same /96 form): the last 32 bits.
/// - 6to4 `2002::/16`: bits 16 to 47.
/// - Teredo `2001::/32`: the server in bits 32 to 63, and the client, whose address is the last
///   32 bits inverted.
fn embedded_ipv4(ip: Ipv6Addr) -> Option<[Option<Ipv4Addr>; 2]> {
    let seg = ip.segments();
    let o = ip.octets();
    let last = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    let one = |v4| Some([Some(v4), None]);
    match seg {
        [0, 0, 0, 0, 0, 0xffff, ..] | [0, 0, 0, 0, 0xffff, 0, ..] | [0, 0, 0, 0, 0, 0, ..] => {
            one(last)
        }
        [0x64, 0xff9b, 0, 0, 0, 0, ..] | [0x64, 0xff9b, 1, ..] => one(last),
        [0x2002, ..] => one(Ipv4Addr::new(o[2], o[3], o[4], o[5])),
        [0x2001, 0, ..] => {
            let server = Ipv4Addr::new(o[4], o[5], o[6], o[7]);
            let client = Ipv4Addr::from(!u32::from(last));
            Some([Some(server), Some(client)])
        }
        _ => None,
    }
}

/// A refused destination, with the reason a user can act on.
#[derive(Clone, Debug, thiserror::Error)]
#[error("refused by the SSRF guard: {host} resolves to {ip} ({kind}); allow it with KURIR_ALLOWED_NETWORKS")]
pub struct Refused {
    /// The host name or literal.
    pub host: String,
    /// The first refused address.
    pub ip: IpAddr,
    /// Why.
    pub kind: Restricted,
}

/// Decides which addresses endpoints may reach.
#[derive(Clone, Debug, Default)]
pub struct Guard {
    allowed: Vec<IpNet>,
}

impl Guard {
    /// A guard that refuses restricted addresses outside `allowed`.
    pub fn new(allowed: Vec<IpNet>) -> Self {
        Self { allowed }
    }

    /// `Ok` when `ip` may be connected to.
    pub fn check(&self, host: &str, ip: IpAddr) -> Result<(), Refused> {
        match classify(ip) {
            Some(kind) if !self.allowed.iter().any(|n| n.contains(&ip)) => Err(Refused {
                host: host.to_owned(),
                ip,
                kind,
            }),
            _ => Ok(()),
        }
    }

    /// Checks a URL whose host is an IP literal (these never reach the resolver).
    pub fn check_url(&self, url: &reqwest::Url) -> Result<(), Refused> {
        match url.host() {
            Some(url::Host::Ipv4(v4)) => self.check(&v4.to_string(), IpAddr::V4(v4)),
            Some(url::Host::Ipv6(v6)) => self.check(&v6.to_string(), IpAddr::V6(v6)),
            _ => Ok(()),
        }
    }
}

/// The HTTP client's resolver: resolves with the system resolver, keeps only allowed addresses,
/// and fails with [`Refused`] when none is left.
#[derive(Clone, Debug)]
pub struct GuardedResolver {
    guard: Arc<Guard>,
}

impl GuardedResolver {
    /// A resolver enforcing `guard`.
    pub fn new(guard: Arc<Guard>) -> Self {
        Self { guard }
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.guard.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let resolved: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let mut first_refusal = None;
            let allowed: Vec<SocketAddr> = resolved
                .into_iter()
                .filter(|addr| match guard.check(&host, addr.ip()) {
                    Ok(()) => true,
                    Err(refused) => {
                        first_refusal.get_or_insert(refused);
                        false
                    }
                })
                .collect();
            match (allowed.is_empty(), first_refusal) {
                (true, Some(refused)) => Err(Box::new(refused) as _),
                _ => Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(s: &str) -> Option<Restricted> {
        classify(s.parse().unwrap())
    }

    #[test]
    fn restricted_ranges_are_classified() {
        assert_eq!(kind("127.0.0.1"), Some(Restricted::Loopback));
        assert_eq!(kind("::1"), Some(Restricted::Loopback));
        assert_eq!(kind("10.1.2.3"), Some(Restricted::Private));
        assert_eq!(kind("172.31.255.1"), Some(Restricted::Private));
        assert_eq!(kind("192.168.0.10"), Some(Restricted::Private));
        assert_eq!(kind("169.254.169.254"), Some(Restricted::Metadata));
        assert_eq!(kind("169.254.1.1"), Some(Restricted::LinkLocal));
        assert_eq!(kind("fe80::1"), Some(Restricted::LinkLocal));
        assert_eq!(kind("fd12::1"), Some(Restricted::UniqueLocal));
        assert_eq!(kind("fd00:ec2::254"), Some(Restricted::Metadata));
        assert_eq!(kind("100.64.0.1"), Some(Restricted::Cgnat));
        assert_eq!(kind("0.0.0.0"), Some(Restricted::SpecialPurpose));
        assert_eq!(kind("::ffff:127.0.0.1"), Some(Restricted::Loopback));
        assert_eq!(kind("64:ff9b::a00:1"), Some(Restricted::Private));
    }

    #[test]
    fn ipv4_compatible_addresses_are_judged_by_the_ipv4_they_embed() {
        assert_eq!(kind("::7f00:1"), Some(Restricted::Loopback));
        assert_eq!(kind("::127.0.0.1"), Some(Restricted::Loopback));
        assert_eq!(kind("::10.0.0.1"), Some(Restricted::Private));
        assert_eq!(kind("::93.184.216.34"), None);
    }

    #[test]
    fn ipv4_translated_addresses_are_judged_by_the_ipv4_they_embed() {
        assert_eq!(kind("::ffff:0:7f00:1"), Some(Restricted::Loopback));
        assert_eq!(kind("::ffff:0:169.254.169.254"), Some(Restricted::Metadata));
        assert_eq!(kind("::ffff:0:93.184.216.34"), None);
    }

    #[test]
    fn six_to_four_addresses_are_judged_by_the_ipv4_they_embed() {
        assert_eq!(kind("2002:7f00:1::1"), Some(Restricted::Loopback));
        assert_eq!(kind("2002:c0a8:101::1"), Some(Restricted::Private));
        assert_eq!(kind("2002:5db8:d822::1"), None);
    }

    #[test]
    fn nat64_addresses_are_judged_by_the_ipv4_they_embed() {
        assert_eq!(kind("64:ff9b::7f00:1"), Some(Restricted::Loopback));
        assert_eq!(kind("64:ff9b::5db8:d822"), None);
        // The local-use prefix of RFC 8215, in the /96 form of the well-known one.
        assert_eq!(kind("64:ff9b:1::7f00:1"), Some(Restricted::Loopback));
        assert_eq!(kind("64:ff9b:1::a9fe:a9fe"), Some(Restricted::Metadata));
        assert_eq!(kind("64:ff9b:1::5db8:d822"), None);
    }

    #[test]
    fn teredo_addresses_are_judged_by_their_server_and_client_ipv4() {
        // Server 127.0.0.1 in bits 32-63.
        assert_eq!(kind("2001:0:7f00:1::1"), Some(Restricted::Loopback));
        // Public server, client 10.0.0.1 stored inverted in the last 32 bits.
        assert_eq!(
            kind("2001:0:5db8:d822:0:0:f5ff:fffe"),
            Some(Restricted::Private)
        );
        // Public server and client (93.184.216.34, inverted: a247:27dd).
        assert_eq!(kind("2001:0:5db8:d822:0:0:a247:27dd"), None);
    }

    #[test]
    fn site_local_addresses_are_refused() {
        assert_eq!(kind("fec0::1"), Some(Restricted::SiteLocal));
        assert_eq!(kind("feff:1::1"), Some(Restricted::SiteLocal));
    }

    #[test]
    fn public_addresses_pass() {
        assert_eq!(kind("93.184.216.34"), None);
        assert_eq!(kind("172.32.0.1"), None);
        assert_eq!(kind("2606:4700::1111"), None);
    }

    #[test]
    fn allowed_networks_lift_the_restriction() {
        let guard = Guard::new(vec!["127.0.0.0/8".parse().unwrap()]);
        assert!(guard
            .check("localhost", "127.0.0.1".parse().unwrap())
            .is_ok());
        let refused = guard.check("x", "::1".parse().unwrap()).unwrap_err();
        assert!(refused.to_string().contains("(loopback)"), "{refused}");
    }
}
