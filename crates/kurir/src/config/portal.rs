//! The subscriber portal's settings ([`PortalConfig`]): where links point, how long a session
//! lasts, which sites may frame it, and its branding. Each is checked here, so a bad colour or
//! origin stops `kurir serve` with a message naming the variable, instead of a page that breaks.

use std::time::Duration;

use super::raw::RawConfig;
use super::ConfigError;
use crate::limits;

/// The portal's settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortalConfig {
    /// Where browsers reach this kurir (`https://hooks.example.com`), without a trailing `/`:
    /// portal links start with it. `None`: the listen address.
    pub public_url: Option<String>,
    /// How long a session lasts after its link is opened.
    pub session_ttl: Duration,
    /// Origins allowed to show the portal in a frame (`frame-ancestors`); empty: none.
    pub frame_ancestors: Vec<String>,
    /// The title in the portal's header and tab.
    pub title: String,
    /// An image shown beside the title.
    pub logo_url: Option<String>,
    /// The accent colour: `#` and 3 or 6 hex digits.
    pub accent_color: String,
}

impl Default for PortalConfig {
    fn default() -> Self {
        Self {
            public_url: None,
            session_ttl: Duration::from_secs(8 * 3600),
            frame_ancestors: Vec::new(),
            title: "Webhooks".to_owned(),
            logo_url: None,
            accent_color: "#1f4f99".to_owned(),
        }
    }
}

impl PortalConfig {
    pub(super) fn from_raw(raw: &RawConfig) -> Result<Self, ConfigError> {
        Ok(Self {
            public_url: raw.parse(
                "public_url",
                "an http(s) URL without a query, such as https://hooks.example.com",
                |s| public_url(s).map(|u| u.trim_end_matches('/').to_owned()),
            )?,
            session_ttl: raw.duration_in("portal_session_ttl", &limits::PORTAL_SESSION_TTL)?,
            frame_ancestors: raw
                .parse(
                    "portal_frame_ancestors",
                    "origins separated by spaces or commas, such as https://app.example.com \
                     https://*.example.org",
                    frame_ancestors,
                )?
                .unwrap_or_default(),
            title: raw.required("portal_title", "a title of 1 to 80 characters", |s| {
                let ok =
                    !s.is_empty() && s.chars().count() <= 80 && !s.chars().any(char::is_control);
                ok.then(|| s.to_owned())
            })?,
            logo_url: raw.parse("portal_logo_url", "an https URL of an image", |s| {
                public_url(s)
                    .filter(|u| u.starts_with("https://") || u.starts_with("http://"))
                    .map(str::to_owned)
            })?,
            accent_color: raw.required(
                "portal_accent_color",
                "a colour as # and 3 or 6 hex digits, such as #1f4f99",
                |s| valid_color(s).then(|| s.to_ascii_lowercase()),
            )?,
        })
    }
}

/// `s` if it is an absolute http(s) URL with a host and no query, fragment or credentials.
fn public_url(s: &str) -> Option<&str> {
    let url = url::Url::parse(s).ok()?;
    let ok = matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some()
        && url.query().is_none()
        && url.fragment().is_none()
        && url.username().is_empty()
        && url.password().is_none();
    ok.then_some(s)
}

/// `#rgb` or `#rrggbb`.
pub fn valid_color(s: &str) -> bool {
    s.strip_prefix('#')
        .is_some_and(|hex| matches!(hex.len(), 3 | 6) && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The origins of a `frame-ancestors` list: `scheme://host[:port]`, the host's first label
/// possibly `*` (as CSP allows). Anything else, a path or a quote, would change the policy's
/// meaning, so it is refused.
fn frame_ancestors(s: &str) -> Option<Vec<String>> {
    s.split([' ', ','])
        .filter(|o| !o.is_empty())
        .map(|o| {
            let (scheme, rest) = o.split_once("://")?;
            let rest = rest.strip_suffix('/').unwrap_or(rest);
            let (host, port) = match rest.rsplit_once(':') {
                Some((h, p)) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                    (h, Some(p))
                }
                _ => (rest, None),
            };
            let host_ok = {
                let labels = host.strip_prefix("*.").unwrap_or(host);
                !labels.is_empty()
                    && labels.bytes().all(|b| {
                        b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'[' | b']' | b':')
                    })
            };
            let ok =
                matches!(scheme, "http" | "https") && host_ok && port.is_none_or(|p| p.len() <= 5);
            ok.then(|| match port {
                Some(p) => format!("{scheme}://{host}:{p}"),
                None => format!("{scheme}://{host}"),
            })
        })
        .collect::<Option<Vec<_>>>()
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_colours_and_urls_are_checked() {
        assert_eq!(
            frame_ancestors(
                "https://app.example.com, http://localhost:3000 https://*.example.org/"
            ),
            Some(vec![
                "https://app.example.com".to_owned(),
                "http://localhost:3000".to_owned(),
                "https://*.example.org".to_owned(),
            ])
        );
        for bad in [
            "app.example.com",
            "https://a.example/path",
            "'self'",
            "https://a;b",
            "javascript://x",
            "",
        ] {
            assert_eq!(frame_ancestors(bad), None, "{bad}");
        }
        assert!(valid_color("#1f4f99") && valid_color("#FFF"));
        for bad in ["1f4f99", "#12345", "#ggg", "red", "#1f4f99;x"] {
            assert!(!valid_color(bad), "{bad}");
        }
        assert!(public_url("https://hooks.example.com").is_some());
        assert!(public_url("https://hooks.example.com/kurir").is_some());
        for bad in [
            "hooks.example.com",
            "ftp://x",
            "https://u:p@x",
            "https://x/?a=1",
        ] {
            assert!(public_url(bad).is_none(), "{bad}");
        }
    }
}
