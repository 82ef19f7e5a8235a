//! Who may do what: the roles of operator tokens, the [`Action`] a request asks for, the
//! [`Actor`] a request acts as, and where an action came from ([`Via`], for the audit).
//!
//! The environment's token (`KURIR_ADMIN_TOKEN` or the generated file) is the bootstrap admin.
//! Named tokens are rows of `kurir_tokens` ([`crate::store::tokens`]), created and revoked through
//! `/v1/tokens`, each with one [`Role`]. Authentication (the bearer header, the dashboard's
//! session) lives in `api::auth` and `ui::session`; what an actor may do is decided here, once,
//! for both, by [`Actor::may`]. A token scoped to one subscriber (issue 29) is one more kind of
//! actor: its scope is checked in [`Actor::may`] too, and nowhere else.

use std::fmt;
use std::str::FromStr;

use axum::http::{self, Method};

/// What a token's holder may do.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Read only: the API's GETs and the dashboard without its controls.
    Viewer,
    /// Everything but managing tokens.
    Operator,
    /// Everything.
    Admin,
}

impl Role {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    /// Whether this role allows `action`: reading is every role's, changing anything needs
    /// `operator`, tokens are the admin's alone.
    pub fn allows(self, action: Action) -> bool {
        match action {
            Action::Read | Action::ReadOwn => true,
            Action::Change | Action::ChangeOwn | Action::ManageSubscriberTokens => {
                self >= Role::Operator
            }
            Action::ManageTokens => self == Role::Admin,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A role name that is not one of kurir's.
#[derive(Debug, thiserror::Error)]
#[error("unknown role '{0}': use admin, operator or viewer")]
pub struct UnknownRole(pub String);

impl FromStr for Role {
    type Err = UnknownRole;

    fn from_str(s: &str) -> Result<Self, UnknownRole> {
        match s {
            "viewer" => Ok(Role::Viewer),
            "operator" => Ok(Role::Operator),
            "admin" => Ok(Role::Admin),
            other => Err(UnknownRole(other.to_owned())),
        }
    }
}

/// What a request asks to do, in the terms access is decided in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Reading anything but the tokens, on a route a subscriber token may not use.
    Read,
    /// Changing endpoints, events, deliveries or inbox sources (publishing, replaying, retrying
    /// too): everything but access itself, on a route a subscriber token may not use.
    Change,
    /// Creating, listing or revoking tokens. Their list counts: it names who can act.
    ManageTokens,
    /// Creating, listing or revoking one subscriber's tokens (`/subscribers/{id}/tokens`):
    /// operators and admins; never a subscriber token, which may not mint or see its peers.
    ManageSubscriberTokens,
    /// Reading on a route of [`SUBSCRIBER_ROUTES`]: what a subscriber token may use too, its
    /// handler showing such a token only its own subscriber's rows ([`Actor::reaches`]).
    ReadOwn,
    /// Changing on a route of [`SUBSCRIBER_ROUTES`] (as [`Action::ReadOwn`]).
    ChangeOwn,
}

/// The routes below `/v1` a subscriber token may use, by method and path pattern (`{…}` is one
/// segment): its endpoints, events, deliveries, replays and test sends, the event catalog
/// (read only: it describes what every subscriber receives), its own subscriber, and who it is.
/// Deny by default: a route added later is not here, so a subscriber token is refused it (403)
/// until someone adds it and makes its handler show only the subscriber's own rows.
pub const SUBSCRIBER_ROUTES: &[(Method, &str)] = &[
    (Method::GET, "/endpoints"),
    (Method::POST, "/endpoints"),
    (Method::GET, "/endpoints/{id}"),
    (Method::PATCH, "/endpoints/{id}"),
    (Method::DELETE, "/endpoints/{id}"),
    (Method::POST, "/endpoints/{id}/rotate-secret"),
    (Method::POST, "/endpoints/{id}/test"),
    (Method::POST, "/endpoints/{id}/circuit"),
    (Method::GET, "/endpoints/{id}/circuit/actions"),
    (Method::GET, "/events"),
    (Method::GET, "/events/{event_id}"),
    (Method::POST, "/events/{event_id}/replay"),
    (Method::GET, "/events/{event_id}/replay/preview"),
    (Method::GET, "/deliveries"),
    (Method::GET, "/replays"),
    (Method::POST, "/replays"),
    (Method::GET, "/replays/preview"),
    (Method::GET, "/event-types"),
    (Method::GET, "/event-types/openapi.json"),
    (Method::GET, "/event-types/{event_type}/versions/{version}"),
    (Method::GET, "/subscribers/{id}"),
    (Method::GET, "/whoami"),
];

/// Whether `path` has the shape of `pattern`: as many segments, each equal or a `{…}`.
fn matches_pattern(pattern: &str, path: &str) -> bool {
    let (mut pattern, mut path) = (pattern.split('/'), path.split('/'));
    loop {
        match (pattern.next(), path.next()) {
            (None, None) => return true,
            (Some(p), Some(s)) if p == s || (p.starts_with('{') && !s.is_empty()) => {}
            _ => return false,
        }
    }
}

impl Action {
    /// The action of an admin API request with `method` to `path` (below `/v1`, or `/metrics`).
    /// Any method but GET and HEAD changes something, so a route added later is refused to a
    /// viewer until someone decides otherwise here; and a route not in [`SUBSCRIBER_ROUTES`]
    /// is [`Action::Read`] or [`Action::Change`], which a subscriber token is refused.
    pub fn of_api_request(method: &Method, path: &str) -> Self {
        if path == "/tokens" || path.starts_with("/tokens/") {
            return Action::ManageTokens;
        }
        if matches_pattern("/subscribers/{id}/tokens", path)
            || matches_pattern("/subscribers/{id}/tokens/{token_id}", path)
        {
            return Action::ManageSubscriberTokens;
        }
        let reads = matches!(*method, Method::GET | Method::HEAD);
        // HEAD is answered by the GET route.
        let as_routed = if *method == Method::HEAD {
            &Method::GET
        } else {
            method
        };
        let own = SUBSCRIBER_ROUTES
            .iter()
            .any(|(m, pattern)| m == as_routed && matches_pattern(pattern, path));
        match (reads, own) {
            (true, true) => Action::ReadOwn,
            (true, false) => Action::Read,
            (false, true) => Action::ChangeOwn,
            (false, false) => Action::Change,
        }
    }
}

/// Where an action came from, as the audit records it.
///
/// Stored as its [`Via::as_str`] in a text column without a check constraint, so a surface added
/// later is one more variant here and no migration; a reader that meets a value it does not know
/// shows it as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// The HTTP API, called by anything but kurir's own CLI.
    Api,
    /// `kurir` commands (they say so in [`CLIENT_HEADER`]).
    Cli,
    /// The dashboard's forms.
    Dashboard,
    /// The subscriber portal's forms (issue 31): a portal session acts for one subscriber.
    Portal,
}

/// The header kurir's CLI sends so the audit can say an action came from it. It is a label, not
/// a credential: a client that sends it only changes what the audit calls its origin, never
/// what it may do.
pub const CLIENT_HEADER: &str = "x-kurir-client";

/// The value of [`CLIENT_HEADER`] that the CLI sends.
pub const CLI_CLIENT: &str = "cli";

impl Via {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Via::Api => "api",
            Via::Cli => "cli",
            Via::Dashboard => "dashboard",
            Via::Portal => "portal",
        }
    }

    /// Where an API request came from, by its [`CLIENT_HEADER`].
    pub fn of_api_request(headers: &http::HeaderMap) -> Self {
        match headers.get(CLIENT_HEADER).and_then(|v| v.to_str().ok()) {
            Some(CLI_CLIENT) => Via::Cli,
            _ => Via::Api,
        }
    }
}

impl fmt::Display for Via {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an actor's rows are: everything (operator tokens, the dashboard), or one subscriber's
/// (a subscriber token, or a portal session).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every row: the operator's endpoints and every subscriber's.
    All,
    /// Only this subscriber's endpoints, events, deliveries and replays, and only on
    /// [`SUBSCRIBER_ROUTES`].
    Subscriber(String),
}

/// Which subscriber a listing is confined to, as [`Actor::listing`] decides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Listing {
    /// No confinement: every row the other filters let through.
    Everyone,
    /// Only this subscriber's rows.
    Subscriber(String),
    /// Nothing can match: a subscriber-scoped actor asked for another subscriber's rows. An
    /// empty page, as for a subscriber that does not exist, so ids cannot be probed.
    Nothing,
}

/// Who made an authenticated request: the token's name and role, which rows it reaches, and
/// where it came from.
#[derive(Clone, Debug)]
pub struct Actor {
    /// The named token's id; `None` for the environment's token.
    pub token_id: Option<String>,
    /// The token's name (`admin` for the environment's token): what the audit records.
    pub name: String,
    /// What it may do.
    pub role: Role,
    /// Whose rows it reaches.
    pub scope: Scope,
    /// Where the request came from.
    pub via: Via,
}

impl Actor {
    /// The environment's token, acting through `via`.
    pub fn bootstrap(name: &str, via: Via) -> Self {
        Self {
            token_id: None,
            name: name.to_owned(),
            role: Role::Admin,
            scope: Scope::All,
            via,
        }
    }

    /// Whether this actor may do `action`. The one place that decides: the API's middleware,
    /// the dashboard's forms and what the dashboard shows all ask here. A subscriber-scoped
    /// actor may only do [`Action::ReadOwn`] and [`Action::ChangeOwn`] (its role permitting):
    /// everything else (publishing, inbox sources, tokens, stats, `/metrics`, the dashboard,
    /// any route added later) is refused to it.
    pub fn may(&self, action: Action) -> bool {
        let in_scope = match self.scope {
            Scope::All => true,
            Scope::Subscriber(_) => matches!(action, Action::ReadOwn | Action::ChangeOwn),
        };
        in_scope && self.role.allows(action)
    }

    /// The subscriber this actor is confined to, if any.
    pub fn subscriber(&self) -> Option<&str> {
        match &self.scope {
            Scope::All => None,
            Scope::Subscriber(id) => Some(id),
        }
    }

    /// Whether this actor reaches a row owned by `owner` (`None`: the operator's own). A row
    /// it does not reach must be answered exactly as a missing one (404, same body).
    pub fn reaches(&self, owner: Option<&str>) -> bool {
        match &self.scope {
            Scope::All => true,
            Scope::Subscriber(id) => owner == Some(id.as_str()),
        }
    }

    /// Which subscriber a listing shows, given the `subscriber_id` the request asked for: that
    /// one for an unscoped actor; always its own for a subscriber-scoped one (asking for
    /// another matches nothing).
    pub fn listing(&self, requested: Option<&str>) -> Listing {
        match (&self.scope, requested) {
            (Scope::All, None) => Listing::Everyone,
            (Scope::All, Some(id)) => Listing::Subscriber(id.to_owned()),
            (Scope::Subscriber(own), Some(asked)) if asked != own => Listing::Nothing,
            (Scope::Subscriber(own), _) => Listing::Subscriber(own.clone()),
        }
    }

    /// Why this actor may not do `action`, for a 403 answer.
    pub fn refusal(&self, action: Action) -> String {
        if let Scope::Subscriber(id) = &self.scope {
            if !matches!(action, Action::ReadOwn | Action::ChangeOwn) {
                return format!(
                    "the token '{}' is a subscriber token (subscriber '{id}'): it may use only \
                     its subscriber's endpoints, events, deliveries and replays, not this route",
                    self.name
                );
            }
        }
        let what = match action {
            Action::Read | Action::ReadOwn => "read this",
            Action::Change | Action::ChangeOwn => "change anything (the viewer role only reads)",
            Action::ManageTokens => "manage tokens (only the admin role may)",
            Action::ManageSubscriberTokens => {
                "manage subscriber tokens (the operator and admin roles may)"
            }
        };
        format!(
            "the token '{}' has the role {}, which may not {what}",
            self.name, self.role
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn actor(role: Role) -> Actor {
        Actor {
            token_id: Some("tok_1".into()),
            name: "someone".into(),
            role,
            scope: Scope::All,
            via: Via::Api,
        }
    }

    #[test]
    fn viewers_read_operators_change_and_only_admins_manage_tokens() {
        let action = Action::of_api_request;
        let (get, post, delete) = (Method::GET, Method::POST, Method::DELETE);
        let (viewer, operator, admin) = (
            actor(Role::Viewer),
            actor(Role::Operator),
            actor(Role::Admin),
        );
        assert!(viewer.may(action(&get, "/events")));
        assert!(!viewer.may(action(&post, "/events")));
        assert!(!viewer.may(action(&post, "/replays")));
        assert!(!viewer.may(action(&Method::PUT, "/a-route-added-later")));
        assert!(operator.may(action(&post, "/replays")));
        assert!(operator.may(action(&delete, "/endpoints/ep_1")));
        for path in ["/tokens", "/tokens/tok_1"] {
            assert!(!viewer.may(action(&get, path)), "{path}");
            assert!(!operator.may(action(&get, path)), "{path}");
            assert!(!operator.may(action(&post, path)), "{path}");
            assert!(admin.may(action(&delete, path)), "{path}");
        }
        assert_eq!(action(&get, "/tokensmith"), Action::Read, "only /tokens");
        assert!(Actor::bootstrap("admin", Via::Cli).may(Action::ManageTokens));
        assert_eq!("operator".parse::<Role>().unwrap(), Role::Operator);
        let unknown = "root".parse::<Role>().unwrap_err().to_string();
        assert!(unknown.contains("admin, operator or viewer"), "{unknown}");
    }

    #[test]
    fn a_subscriber_token_may_use_only_the_listed_routes_and_reaches_only_its_rows() {
        let action = Action::of_api_request;
        let (get, post) = (Method::GET, Method::POST);
        let scoped = |role| Actor {
            scope: Scope::Subscriber("cus_a".into()),
            ..actor(role)
        };
        let (sub, reader) = (scoped(Role::Operator), scoped(Role::Viewer));
        for (method, path) in [
            (&get, "/endpoints"),
            (&post, "/endpoints"),
            (&Method::PATCH, "/endpoints/ep_1"),
            (&post, "/endpoints/ep_1/rotate-secret"),
            (&get, "/events/evt_1"),
            (&post, "/events/evt_1/replay"),
            (&post, "/replays"),
            (&Method::HEAD, "/deliveries"),
        ] {
            assert!(sub.may(action(method, path)), "{method} {path}");
        }
        assert!(reader.may(action(&get, "/endpoints/ep_1")));
        assert!(!reader.may(action(&post, "/replays")), "a read-only scope");
        for (method, path) in [
            (&post, "/events"),
            (&post, "/events/batch"),
            (&post, "/events/recheck"),
            (&get, "/stats"),
            (&get, "/metrics"),
            (&get, "/inbox/sources"),
            (&get, "/tokens"),
            (&get, "/subscribers"),
            (&get, "/subscribers/cus_a/tokens"),
            (&post, "/subscribers/cus_a/tokens"),
            (&Method::PATCH, "/subscribers/cus_a"),
            (&get, "/endpoints/ep_1/secret-added-later"),
            (&get, "/endpoints/"),
            (&get, "/a-route-added-later"),
        ] {
            assert!(!sub.may(action(method, path)), "{method} {path}");
            assert!(sub
                .refusal(action(method, path))
                .contains("subscriber token"));
        }
        assert!(
            !sub.may(Action::Read),
            "the dashboard asks for Read: refused"
        );
        let operator = actor(Role::Operator);
        assert!(operator.may(action(&post, "/subscribers/cus_a/tokens")));
        assert!(!actor(Role::Viewer).may(action(&get, "/subscribers/cus_a/tokens")));
        assert!(sub.reaches(Some("cus_a")));
        assert!(!sub.reaches(Some("cus_b")) && !sub.reaches(None));
        assert!(operator.reaches(Some("cus_b")) && operator.reaches(None));
        assert_eq!(sub.listing(None), Listing::Subscriber("cus_a".into()));
        assert_eq!(sub.listing(Some("cus_b")), Listing::Nothing);
        assert_eq!(operator.listing(None), Listing::Everyone);
        assert_eq!(
            operator.listing(Some("cus_b")),
            Listing::Subscriber("cus_b".into())
        );
    }

    #[test]
    fn only_the_cli_header_marks_a_request_as_the_clis() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(Via::of_api_request(&headers), Via::Api);
        headers.insert(CLIENT_HEADER, CLI_CLIENT.parse().unwrap());
        assert_eq!(Via::of_api_request(&headers), Via::Cli);
        headers.insert(CLIENT_HEADER, "dashboard".parse().unwrap());
        assert_eq!(Via::of_api_request(&headers), Via::Api, "no other label");
    }
}
