//! What became of events' deliveries, for the events list: per event, how many of its
//! deliveries are in each status. One statement, one probe of `kurir_deliveries_event` per
//! event of the page; reads only, no locks.

use super::sql::{query_as_on, Sql};
use super::{Result, Store};

/// The ids are bound as one JSON array, read by each dialect's JSON table function, so a page
/// of any size is one statement.
const OUTCOMES: Sql = Sql {
    postgres: "SELECT event_id, status, count(*) FROM kurir_deliveries \
        WHERE event_id IN (SELECT json_array_elements_text($1::json)) \
        GROUP BY event_id, status",
    sqlite: "SELECT event_id, status, count(*) FROM kurir_deliveries \
        WHERE event_id IN (SELECT value FROM json_each(?1)) GROUP BY event_id, status",
    mysql: "SELECT CAST(event_id AS CHAR), CAST(status AS CHAR), count(*) FROM kurir_deliveries \
        WHERE event_id IN (SELECT j.id FROM JSON_TABLE($1, '$[*]' COLUMNS ( \
            id VARCHAR(256) COLLATE utf8mb4_bin PATH '$')) AS j) \
        GROUP BY event_id, status",
};

impl Store {
    /// For each of `event_ids` that has deliveries: `(event_id, status, count)`.
    pub async fn delivery_outcomes(
        &self,
        event_ids: &[String],
    ) -> Result<Vec<(String, String, i64)>> {
        if event_ids.is_empty() {
            return Ok(Vec::new());
        }
        let ids = serde_json::to_string(event_ids).unwrap_or_else(|_| "[]".into());
        Ok(query_as_on!(self, OUTCOMES, fetch_all, ids.as_str())?)
    }
}
