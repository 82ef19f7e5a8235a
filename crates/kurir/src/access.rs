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
            Action::Read => true,
            Action::Change => self >= Role::Operator,
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
    /// Reading anything but the tokens.
    Read,
    /// Changing endpoints, events, deliveries or inbox sources (publishing, replaying, retrying
    /// too): everything but access itself.
    Change,
    /// Creating, listing or revoking tokens. Their list counts: it names who can act.
    ManageTokens,
}

impl Action {
    /// The action of an admin API request with `method` to `path` (below `/v1`, or `/metrics`).
    /// Any method but GET and HEAD changes something, so a route added later is refused to a
    /// viewer until someone decides otherwise here.
    pub fn of_api_request(method: &Method, path: &str) -> Self {
        if path == "/tokens" || path.starts_with("/tokens/") {
            return Action::ManageTokens;
        }
        match *method {
            Method::GET | Method::HEAD => Action::Read,
            _ => Action::Change,
        }
    }
}

/// Where an action came from, as the audit records it.
///
/// Stored as its [`Via::as_str`] in a text column without a check constraint, so a surface added
/// later (the subscriber portal, `portal`) is one more variant here and no migration; a reader
/// that meets a value it does not know shows it as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Via {
    /// The HTTP API, called by anything but kurir's own CLI.
    Api,
    /// `kurir` commands (they say so in [`CLIENT_HEADER`]).
    Cli,
    /// The dashboard's forms.
    Dashboard,
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

/// Who made an authenticated request: the token's name and role, and where it came from.
#[derive(Clone, Debug)]
pub struct Actor {
    /// The named token's id; `None` for the environment's token.
    pub token_id: Option<String>,
    /// The token's name (`admin` for the environment's token): what the audit records.
    pub name: String,
    /// What it may do.
    pub role: Role,
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
            via,
        }
    }

    /// Whether this actor may do `action`. The one place that decides: the API's middleware,
    /// the dashboard's forms and what the dashboard shows all ask here.
    pub fn may(&self, action: Action) -> bool {
        self.role.allows(action)
    }

    /// Why this actor may not do `action`, for a 403 answer.
    pub fn refusal(&self, action: Action) -> String {
        let what = match action {
            Action::Read => "read this",
            Action::Change => "change anything (the viewer role only reads)",
            Action::ManageTokens => "manage tokens (only the admin role may)",
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
    fn only_the_cli_header_marks_a_request_as_the_clis() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(Via::of_api_request(&headers), Via::Api);
        headers.insert(CLIENT_HEADER, CLI_CLIENT.parse().unwrap());
        assert_eq!(Via::of_api_request(&headers), Via::Cli);
        headers.insert(CLIENT_HEADER, "dashboard".parse().unwrap());
        assert_eq!(Via::of_api_request(&headers), Via::Api, "no other label");
    }
}
