//! Pagination of the admin API's listings: `limit` rows a page, and an opaque `next_cursor` to
//! pass back as `cursor` for the next page.
//!
//! A cursor is the base64url form of `<listing>:<key>`, the key being the last row's of the
//! page: a row id for the listings that are newest first (rows below it come next; a token id
//! for the tokens), an endpoint id for the endpoints, oldest first (ids above it come next).
//! Either way rows written meanwhile never shift a page. A cursor from another listing, or anything that does not
//! decode, is refused with 400 naming `cursor`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Serialize;
use utoipa::ToSchema;

use super::error::ApiError;
use crate::endpoint::EndpointId;
use crate::store::tokens::TokenId;

/// Rows per page when `limit` is not given.
pub const DEFAULT_LIMIT: u32 = 50;
/// Most rows per page.
pub const MAX_LIMIT: u32 = 200;

/// One page of a listing.
#[derive(Debug, Serialize, ToSchema)]
pub struct Page<T> {
    /// The rows, in the listing's order: newest first, endpoints oldest first.
    pub data: Vec<T>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    /// A page with no rows and no next page: what a listing answers when nothing can match.
    pub fn empty() -> Self {
        Self {
            data: Vec::new(),
            next_cursor: None,
        }
    }
}

/// What a listing's cursor holds: the key its rows are ordered by.
pub trait CursorKey: Sized {
    /// The key as the cursor writes it.
    fn to_text(&self) -> String;
    /// The key from a cursor's text; `None` when it is not one.
    fn from_text(text: &str) -> Option<Self>;
}

impl CursorKey for i64 {
    fn to_text(&self) -> String {
        self.to_string()
    }

    fn from_text(text: &str) -> Option<Self> {
        text.parse().ok()
    }
}

impl CursorKey for EndpointId {
    fn to_text(&self) -> String {
        self.as_str().to_owned()
    }

    fn from_text(text: &str) -> Option<Self> {
        EndpointId::parse(text).ok()
    }
}

impl CursorKey for TokenId {
    fn to_text(&self) -> String {
        self.as_str().to_owned()
    }

    fn from_text(text: &str) -> Option<Self> {
        TokenId::parse(text)
    }
}

/// Subscriber ids (the sender's own, see [`crate::store::subscribers::valid_id`]).
impl CursorKey for String {
    fn to_text(&self) -> String {
        self.clone()
    }

    fn from_text(text: &str) -> Option<Self> {
        crate::store::subscribers::valid_id(text).then(|| text.to_owned())
    }
}

/// A listing's position, decoded from `cursor` and `limit`.
#[derive(Clone, Debug)]
pub struct PageRequest<K = i64> {
    listing: &'static str,
    /// The key of the previous page's last row: the page holds the rows past it in the
    /// listing's order (for a newest-first listing, ids below it; for the endpoints, above).
    pub past: Option<K>,
    /// Rows wanted.
    pub limit: u32,
}

impl<K: CursorKey> PageRequest<K> {
    /// Validates `cursor` (made by the same `listing`) and `limit`.
    pub fn new(
        listing: &'static str,
        cursor: Option<&str>,
        limit: Option<u32>,
    ) -> Result<Self, ApiError> {
        let limit = limit.unwrap_or(DEFAULT_LIMIT);
        if !(1..=MAX_LIMIT).contains(&limit) {
            return Err(ApiError::field(
                "limit",
                format!("must be between 1 and {MAX_LIMIT}"),
            ));
        }
        let past = cursor.map(|c| decode(listing, c)).transpose()?;
        Ok(Self {
            listing,
            past,
            limit,
        })
    }

    /// How many rows to fetch: one more than wanted, to learn whether another page exists.
    pub fn fetch(&self) -> u32 {
        self.limit + 1
    }

    /// The page of `rows` (fetched with [`PageRequest::fetch`]), each mapped by `view`.
    pub fn page<R, T>(&self, rows: Vec<R>, id: impl Fn(&R) -> K, view: impl Fn(R) -> T) -> Page<T> {
        let (rows, next_cursor) = self.split(rows, id);
        Page {
            data: rows.into_iter().map(view).collect(),
            next_cursor,
        }
    }

    /// The page's rows of `rows` (fetched with [`PageRequest::fetch`]) and the cursor of the
    /// next page, when there is one: for a caller that reads more for the page's rows before
    /// making their views.
    pub fn split<R>(&self, mut rows: Vec<R>, id: impl Fn(&R) -> K) -> (Vec<R>, Option<String>) {
        let more = rows.len() > self.limit as usize;
        rows.truncate(self.limit as usize);
        let next_cursor = more
            .then(|| rows.last().map(|r| encode(self.listing, &id(r))))
            .flatten();
        (rows, next_cursor)
    }
}

fn encode<K: CursorKey>(listing: &str, key: &K) -> String {
    URL_SAFE_NO_PAD.encode(format!("{listing}:{}", key.to_text()))
}

fn decode<K: CursorKey>(listing: &str, cursor: &str) -> Result<K, ApiError> {
    let bad = || {
        ApiError::field(
            "cursor",
            format!(
                "'{cursor}' is not a cursor of this listing; pass next_cursor from a previous page"
            ),
        )
    };
    let text = URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(bad)?;
    text.strip_prefix(listing)
        .and_then(|rest| rest.strip_prefix(':'))
        .and_then(K::from_text)
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_belong_to_one_listing() {
        let req = PageRequest::new("events", None, Some(2)).unwrap();
        let page = req.page(vec![9_i64, 8, 7], |r| *r, |r| r);
        assert_eq!(page.data, vec![9, 8]);
        let cursor = page.next_cursor.unwrap();
        assert_eq!(
            PageRequest::new("events", Some(&cursor), None)
                .unwrap()
                .past,
            Some(8)
        );
        assert!(PageRequest::<i64>::new("deliveries", Some(&cursor), None).is_err());
        assert!(PageRequest::<i64>::new("events", Some("!!"), None).is_err());
        assert!(PageRequest::<i64>::new("events", None, Some(0)).is_err());
        assert!(req.page(vec![1_i64], |r| *r, |r| r).next_cursor.is_none());
    }

    #[test]
    fn endpoint_cursors_carry_an_endpoint_id_and_refuse_anything_else() {
        let id = EndpointId::generate();
        let req = PageRequest::<EndpointId>::new("endpoints", None, Some(1)).unwrap();
        let (rows, cursor) = req.split(vec![id.clone(), EndpointId::generate()], Clone::clone);
        assert_eq!(rows, std::slice::from_ref(&id));
        let next = PageRequest::<EndpointId>::new("endpoints", cursor.as_deref(), None).unwrap();
        assert_eq!(next.past, Some(id));
        let not_a_uuid = URL_SAFE_NO_PAD.encode("endpoints:' OR 1=1 --");
        assert!(PageRequest::<EndpointId>::new("endpoints", Some(&not_a_uuid), None).is_err());
        let of_events = URL_SAFE_NO_PAD.encode("events:12");
        assert!(PageRequest::<EndpointId>::new("endpoints", Some(&of_events), None).is_err());
    }
}
