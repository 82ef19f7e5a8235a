//! Keeping secrets out of `Debug` output, where anything may end up (a log line, a panic
//! message): [`Sensitive`], a string that shows itself as `***`, and [`url_without_password`]
//! for URLs whose host may be shown but not the credentials.
//!
//! Validated signing secrets are [`kurir_core::secret::Secret`]s, which redact themselves too;
//! `Sensitive` is for secrets as they arrive (request bodies, flags), before a scheme says how to
//! read them, and for tokens kurir shows once.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A secret string, kept as given: `Debug` prints `***`, and it has no `Display`;
/// [`Sensitive::expose`] is the one way to read it. Serialises as the plain string, for the one
/// answer that shows a secret.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Sensitive(String);

impl Sensitive {
    /// The secret itself.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The secret itself, owned.
    pub fn into_inner(self) -> String {
        self.0
    }
}

impl fmt::Debug for Sensitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl From<String> for Sensitive {
    fn from(s: String) -> Self {
        Self(s)
    }
}

impl From<&str> for Sensitive {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}

/// For command-line flags.
impl FromStr for Sensitive {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Self(s.to_owned()))
    }
}

/// `scheme://user:password@host/…` → `scheme://***@host/…`; anything else unchanged.
pub fn url_without_password(value: &str) -> String {
    match (value.find("://"), value.rfind('@')) {
        (Some(scheme_end), Some(at)) if at > scheme_end => {
            format!("{}://***{}", &value[..scheme_end], &value[at..])
        }
        _ => value.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sensitive_strings_show_stars_and_serialise_plainly() {
        let s = Sensitive::from("hunter2-secret");
        assert_eq!(format!("{s:?} {:?}", Some(&s)), "*** Some(***)");
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"hunter2-secret\"");
        assert_eq!(s.expose(), "hunter2-secret");
    }

    #[test]
    fn url_credentials_are_hidden_and_the_rest_kept() {
        assert_eq!(
            url_without_password("postgres://kurir:pw@db:5432/kurir"),
            "postgres://***@db:5432/kurir"
        );
        assert_eq!(
            url_without_password("sqlite://./kurir.db"),
            "sqlite://./kurir.db"
        );
    }
}
