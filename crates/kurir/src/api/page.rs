//! Pagination of the admin API's listings: newest first, `limit` rows a page, and an opaque
//! `next_cursor` to pass back as `cursor` for the next page.
//!
//! A cursor is the base64url form of `<listing>:<row id>`; rows below that id come next, so
//! rows written meanwhile never shift a page. A cursor from another listing, or anything that
//! does not decode, is refused with 400 naming `cursor`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde::Serialize;
use utoipa::ToSchema;

use super::error::ApiError;

/// Rows per page when `limit` is not given.
pub const DEFAULT_LIMIT: u32 = 50;
/// Most rows per page.
pub const MAX_LIMIT: u32 = 200;

/// One page of a listing.
#[derive(Debug, Serialize, ToSchema)]
pub struct Page<T> {
    /// The rows, newest first.
    pub data: Vec<T>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A listing's position, decoded from `cursor` and `limit`.
#[derive(Clone, Copy, Debug)]
pub struct PageRequest {
    listing: &'static str,
    /// Only rows with an id below this.
    pub before_id: Option<i64>,
    /// Rows wanted.
    pub limit: u32,
}

impl PageRequest {
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
        let before_id = cursor.map(|c| decode(listing, c)).transpose()?;
        Ok(Self {
            listing,
            before_id,
            limit,
        })
    }

    /// How many rows to fetch: one more than wanted, to learn whether another page exists.
    pub fn fetch(&self) -> u32 {
        self.limit + 1
    }

    /// The page of `rows` (fetched with [`PageRequest::fetch`]), each mapped by `view`.
    pub fn page<R, T>(
        &self,
        mut rows: Vec<R>,
        id: impl Fn(&R) -> i64,
        view: impl Fn(R) -> T,
    ) -> Page<T> {
        let more = rows.len() > self.limit as usize;
        rows.truncate(self.limit as usize);
        let next_cursor = more
            .then(|| rows.last().map(|r| encode(self.listing, id(r))))
            .flatten();
        Page {
            data: rows.into_iter().map(view).collect(),
            next_cursor,
        }
    }
}

fn encode(listing: &str, id: i64) -> String {
    URL_SAFE_NO_PAD.encode(format!("{listing}:{id}"))
}

fn decode(listing: &str, cursor: &str) -> Result<i64, ApiError> {
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
        .and_then(|id| id.parse::<i64>().ok())
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
                .before_id,
            Some(8)
        );
        assert!(PageRequest::new("deliveries", Some(&cursor), None).is_err());
        assert!(PageRequest::new("events", Some("!!"), None).is_err());
        assert!(PageRequest::new("events", None, Some(0)).is_err());
        assert!(req.page(vec![1_i64], |r| *r, |r| r).next_cursor.is_none());
    }
}
