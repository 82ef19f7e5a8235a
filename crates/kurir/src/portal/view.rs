//! What every portal page carries ([`Chrome`]): the sender's branding, the navigation, whose
//! portal it is, whether the session may change anything, and the CSRF token of its forms.

use super::error::PortalError;
use super::session::Visitor;
use crate::api::state::AppState;

/// The layout's data.
#[derive(Clone, Debug)]
pub struct Chrome {
    /// The page's title.
    pub title: String,
    /// `endpoints`, `deliveries`, `event-types` or `verify`: the section to highlight.
    pub section: &'static str,
    /// The portal's title (`KURIR_PORTAL_TITLE`).
    pub brand: String,
    /// Its logo (`KURIR_PORTAL_LOGO_URL`).
    pub logo_url: Option<String>,
    /// Its accent colour (`KURIR_PORTAL_ACCENT_COLOR`, checked at start-up).
    pub accent: String,
    /// Text on the accent colour: black or white, whichever reads better.
    pub accent_text: &'static str,
    /// The subscriber's name (its id when it has none).
    pub subscriber: String,
    /// Where "back" goes: the sender's page that made the link.
    pub return_url: Option<String>,
    /// The session's CSRF token.
    pub csrf: String,
    /// Whether the session may change anything: the pages show their controls only then (the
    /// server refuses them all the same, [`Visitor::check`]).
    pub can_change: bool,
}

impl Chrome {
    /// The chrome of a page in `section`, with the subscriber's name read through the API's
    /// handler as the visitor.
    pub async fn new(
        state: &AppState,
        visitor: &Visitor,
        section: &'static str,
        title: impl Into<String>,
    ) -> Result<Self, PortalError> {
        let actor = axum::Extension(visitor.actor().clone());
        let id = crate::api::extract::ApiPath(visitor.subscriber_id().to_owned());
        let subscriber =
            crate::api::subscribers::show(axum::extract::State(state.clone()), actor, id)
                .await?
                .0;
        let portal = &state.portal;
        Ok(Self {
            title: title.into(),
            section,
            brand: portal.title.clone(),
            logo_url: portal.logo_url.clone(),
            accent_text: text_on(&portal.accent_color),
            accent: portal.accent_color.clone(),
            subscriber: match subscriber.name.is_empty() {
                true => subscriber.id,
                false => subscriber.name,
            },
            return_url: visitor.session().return_url.clone(),
            csrf: visitor.csrf().to_owned(),
            can_change: visitor.can_change(),
        })
    }

    /// Whether `section` is this page's.
    pub fn current(&self, section: &str) -> bool {
        self.section == section
    }

    /// The navigation: `(section, label, href)`.
    pub fn links(&self) -> [(&'static str, &'static str, &'static str); 4] {
        [
            ("endpoints", "Endpoints", "/portal/endpoints"),
            ("deliveries", "Deliveries", "/portal/deliveries"),
            ("event-types", "Event types", "/portal/event-types"),
            ("verify", "Verify", "/portal/verify"),
        ]
    }
}

/// Black or white, whichever contrasts more with `color` (`#rgb` or `#rrggbb`), by WCAG
/// relative luminance.
pub fn text_on(color: &str) -> &'static str {
    let hex = color.trim_start_matches('#');
    let channel = |i: usize| -> f64 {
        let v = match hex.len() {
            3 => u8::from_str_radix(&hex[i..=i], 16).map(|v| v * 17),
            _ => u8::from_str_radix(hex.get(2 * i..2 * i + 2).unwrap_or("00"), 16),
        };
        let c = f64::from(v.unwrap_or(0)) / 255.0;
        if c <= 0.03928 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    };
    let l = 0.2126 * channel(0) + 0.7152 * channel(1) + 0.0722 * channel(2);
    // Contrast with white is 1.05 / (l + 0.05), with black (l + 0.05) / 0.05.
    match 1.05 / (l + 0.05) >= (l + 0.05) / 0.05 {
        true => "#ffffff",
        false => "#111111",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_on_the_accent_is_whichever_reads() {
        assert_eq!(text_on("#1f4f99"), "#ffffff");
        assert_eq!(text_on("#000"), "#ffffff");
        assert_eq!(text_on("#ffd400"), "#111111");
        assert_eq!(text_on("#FFF"), "#111111");
    }
}
