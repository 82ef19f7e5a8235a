//! What an event is on the wire: its id ([`EventId`]), its type ([`EventType`]) and the JSON body a
//! subscriber receives ([`Envelope`]).
//!
//! This module validates and formats; it does not store events or decide who receives them.

use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// Longest event id or event type accepted, in bytes (both are ASCII).
const MAX_LEN: usize = 255;

/// A unique event id: 1 to 255 visible ASCII characters, no whitespace. UUIDv7 when kurir makes one.
///
/// Serialises as a plain JSON string; deserialising validates like [`EventId::parse`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EventId(String);

/// Why a string is not an [`EventId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidEventId {
    /// The id is the empty string.
    #[error("event id is empty")]
    Empty,
    /// The id is longer than 255 bytes.
    #[error("event id is {len} bytes long, at most {MAX_LEN} are allowed")]
    TooLong {
        /// Length of the rejected id in bytes.
        len: usize,
    },
    /// The id contains whitespace, a control character or a non-ASCII character.
    #[error("event id contains {ch:?} at byte {index}; only visible ASCII is allowed")]
    InvalidChar {
        /// The offending character.
        ch: char,
        /// Its byte offset in the id.
        index: usize,
    },
}

impl EventId {
    /// A fresh, time-ordered UUIDv7 id.
    pub fn new_v7() -> EventId {
        EventId(uuid::Uuid::now_v7().to_string())
    }

    /// Validates `s` as an event id.
    pub fn parse(s: &str) -> Result<EventId, InvalidEventId> {
        if s.is_empty() {
            return Err(InvalidEventId::Empty);
        }
        if s.len() > MAX_LEN {
            return Err(InvalidEventId::TooLong { len: s.len() });
        }
        match s.char_indices().find(|(_, ch)| !ch.is_ascii_graphic()) {
            Some((index, ch)) => Err(InvalidEventId::InvalidChar { ch, index }),
            None => Ok(EventId(s.to_owned())),
        }
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// An event type such as `order.paid`: dot-separated segments of `[a-z0-9_-]+`, 1 to 255 bytes.
///
/// Serialises as a plain JSON string; deserialising validates like [`EventType::parse`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct EventType(String);

/// Why a string is not an [`EventType`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidEventType {
    /// The type is the empty string.
    #[error("event type is empty")]
    Empty,
    /// The type is longer than 255 bytes.
    #[error("event type is {len} bytes long, at most {MAX_LEN} are allowed")]
    TooLong {
        /// Length of the rejected type in bytes.
        len: usize,
    },
    /// Two dots in a row, or a dot at the start or the end.
    #[error("event type has an empty segment (segments are separated by single dots)")]
    EmptySegment,
    /// A character outside lowercase ASCII letters, digits, `_`, `-` and the separating `.`.
    #[error(
        "event type contains {ch:?} at byte {index}; only a-z, 0-9, '_', '-' and '.' are allowed"
    )]
    InvalidChar {
        /// The offending character.
        ch: char,
        /// Its byte offset in the type.
        index: usize,
    },
}

impl EventType {
    /// Validates `s` as an event type.
    pub fn parse(s: &str) -> Result<EventType, InvalidEventType> {
        if s.is_empty() {
            return Err(InvalidEventType::Empty);
        }
        if s.len() > MAX_LEN {
            return Err(InvalidEventType::TooLong { len: s.len() });
        }
        let allowed = |ch: char| matches!(ch, 'a'..='z' | '0'..='9' | '_' | '-' | '.');
        if let Some((index, ch)) = s.char_indices().find(|&(_, ch)| !allowed(ch)) {
            return Err(InvalidEventType::InvalidChar { ch, index });
        }
        if s.split('.').any(str::is_empty) {
            return Err(InvalidEventType::EmptySegment);
        }
        Ok(EventType(s.to_owned()))
    }

    /// The type as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Display, `AsRef<str>`, `FromStr` and the `String` conversions serde uses, for both newtypes.
macro_rules! string_newtype {
    ($name:ident, $error:ident) => {
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl FromStr for $name {
            type Err = $error;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::parse(s)
            }
        }

        impl TryFrom<String> for $name {
            type Error = $error;

            fn try_from(s: String) -> Result<Self, Self::Error> {
                Self::parse(&s)
            }
        }

        impl From<$name> for String {
            fn from(value: $name) -> String {
                value.0
            }
        }
    };
}

string_newtype!(EventId, InvalidEventId);
string_newtype!(EventType, InvalidEventType);

/// The body a subscriber receives. `data` is the stored JSON payload embedded byte-for-byte.
///
/// ```
/// use chrono::{TimeZone, Utc};
/// use kurir_core::Envelope;
/// use serde_json::value::RawValue;
///
/// let data = RawValue::from_string(r#"{"order_id":"98765"}"#.to_owned()).unwrap();
/// let envelope = Envelope {
///     event_id: "evt_1",
///     event_type: "order.paid",
///     version: 1,
///     occurred_at: Utc.with_ymd_and_hms(2026, 6, 11, 8, 15, 30).unwrap(),
///     delivery_attempt: 3,
///     data: &data,
/// };
/// assert_eq!(
///     String::from_utf8(envelope.to_json()).unwrap(),
///     r#"{"event_id":"evt_1","event_type":"order.paid","version":1,"occurred_at":"2026-06-11T08:15:30Z","delivery_attempt":3,"data":{"order_id":"98765"}}"#,
/// );
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Envelope<'a> {
    /// The event's id, also sent as `webhook-id` and `X-Webhook-Event-Id`.
    pub event_id: &'a str,
    /// The event's type, e.g. `order.paid`.
    pub event_type: &'a str,
    /// Version of the payload's schema, chosen by the producer.
    pub version: i32,
    /// When the business change happened.
    pub occurred_at: DateTime<Utc>,
    /// Which attempt at delivering to this endpoint this body belongs to, starting at 1.
    pub delivery_attempt: u32,
    /// The stored payload, embedded without being parsed or re-serialised.
    pub data: &'a RawValue,
}

impl Envelope<'_> {
    /// `{"event_id":…,"event_type":…,"version":…,"occurred_at":"2026-06-11T08:15:30Z","delivery_attempt":3,"data":<raw>}`
    ///
    /// Fields come in exactly this order. `occurred_at` is RFC 3339 UTC with `Z`, with fractional
    /// seconds only when they are non-zero. `data` is copied verbatim, so its whitespace and key order
    /// are whatever was stored.
    pub fn to_json(&self) -> Vec<u8> {
        let occurred_at = self
            .occurred_at
            .to_rfc3339_opts(SecondsFormat::AutoSi, true);
        let mut out = Vec::with_capacity(128 + self.data.get().len());
        out.extend_from_slice(b"{\"event_id\":");
        push_json_string(&mut out, self.event_id);
        out.extend_from_slice(b",\"event_type\":");
        push_json_string(&mut out, self.event_type);
        out.extend_from_slice(format!(",\"version\":{},\"occurred_at\":", self.version).as_bytes());
        push_json_string(&mut out, &occurred_at);
        out.extend_from_slice(
            format!(",\"delivery_attempt\":{}", self.delivery_attempt).as_bytes(),
        );
        out.extend_from_slice(b",\"data\":");
        out.extend_from_slice(self.data.get().as_bytes());
        out.push(b'}');
        out
    }
}

/// Appends `s` as a JSON string literal, escaped by serde_json.
fn push_json_string(out: &mut Vec<u8>, s: &str) {
    serde_json::to_writer(out, s).expect("writing a str into a Vec cannot fail");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_id_accepts_visible_ascii_up_to_255_bytes() {
        assert!(EventId::parse("evt_01HZX3K8Q4M2N5P7R9T1V3W5Y7").is_ok());
        assert!(EventId::parse(&"a".repeat(255)).is_ok());
        assert_eq!(
            EventId::parse(&"a".repeat(256)),
            Err(InvalidEventId::TooLong { len: 256 })
        );
        assert_eq!(EventId::parse(""), Err(InvalidEventId::Empty));
        assert_eq!(
            EventId::parse("evt 1"),
            Err(InvalidEventId::InvalidChar { ch: ' ', index: 3 })
        );
        assert!(matches!(
            EventId::parse("évt"),
            Err(InvalidEventId::InvalidChar { ch: 'é', index: 0 })
        ));
    }

    #[test]
    fn new_v7_ids_are_valid_and_distinct() {
        let (a, b) = (EventId::new_v7(), EventId::new_v7());
        assert_ne!(a, b);
        assert_eq!(EventId::parse(a.as_str()), Ok(a.clone()));
        assert_eq!(
            uuid::Uuid::parse_str(a.as_str()).unwrap().get_version_num(),
            7
        );
    }

    #[test]
    fn event_type_is_dot_separated_lowercase_segments() {
        for ok in [
            "order.paid",
            "payment_intent.succeeded",
            "a",
            "v2.order-item.created",
        ] {
            assert_eq!(EventType::parse(ok).unwrap().as_str(), ok);
        }
        assert_eq!(EventType::parse(""), Err(InvalidEventType::Empty));
        assert_eq!(
            EventType::parse("order..paid"),
            Err(InvalidEventType::EmptySegment)
        );
        assert_eq!(
            EventType::parse(".order"),
            Err(InvalidEventType::EmptySegment)
        );
        assert_eq!(
            EventType::parse("order."),
            Err(InvalidEventType::EmptySegment)
        );
        assert_eq!(
            EventType::parse("Order.paid"),
            Err(InvalidEventType::InvalidChar { ch: 'O', index: 0 })
        );
        assert_eq!(
            EventType::parse(&"a".repeat(256)),
            Err(InvalidEventType::TooLong { len: 256 })
        );
    }

    #[test]
    fn newtypes_serialise_as_plain_strings_and_validate_on_the_way_in() {
        let id: EventId = serde_json::from_str(r#""evt_1""#).unwrap();
        assert_eq!(serde_json::to_string(&id).unwrap(), r#""evt_1""#);
        assert!(serde_json::from_str::<EventId>(r#""evt 1""#).is_err());
        let ty: EventType = "order.paid".parse().unwrap();
        assert_eq!(serde_json::to_string(&ty).unwrap(), r#""order.paid""#);
        assert!(serde_json::from_str::<EventType>(r#""Order""#).is_err());
    }
}
