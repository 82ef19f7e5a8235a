//! What operators read of the inbox gateway's `kurir_inbox` rows: one source's events, newest
//! first, paged by a keyset on row ids, one event by its id, and how many events each source
//! has per status.
//! (Receiving, claiming and retrying are kurir-receiver's, through [`Store::inbox`].)
//!
//! kurir-receiver owns `kurir_inbox`: its migrations create the table, and its statements and row
//! type read it ([`kurir_receiver::Inbox::list`], `find`, `counts`), so a change to the table is
//! made in one crate. This module only shapes what they return for the API and the dashboard.
//! Reads only; no locks.

use chrono::{DateTime, Utc};
use kurir_receiver::InboxStatus;

use super::{Result, Store};

/// Filters of the inbox listing; every `None` matches all (kurir-receiver's).
pub use kurir_receiver::ListQuery as InboxQuery;

/// Events of one source in one status (kurir-receiver's).
pub use kurir_receiver::SourceCount as InboxCount;

/// One received event as the listing shows it (never its payload or headers).
#[derive(Clone, Debug, PartialEq)]
pub struct InboxListItem {
    /// Row id (the listing's order).
    pub id: i64,
    /// The sender's event id.
    pub event_id: String,
    /// Its type, when the scheme carries one.
    pub event_type: Option<String>,
    /// Where forwarding stands.
    pub status: InboxStatus,
    /// Attempts started so far.
    pub attempts: u32,
    /// When the next attempt is due (`None` while processing, once completed, and after the last
    /// attempt failed).
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// When the last attempt started.
    pub last_attempt_at: Option<DateTime<Utc>>,
    /// What the last failed attempt reported.
    pub last_error: Option<String>,
    /// When it was received.
    pub created_at: DateTime<Utc>,
}

impl Store {
    /// One source's events matching `query`, newest first.
    pub async fn list_inbox_events(&self, q: &InboxQuery) -> Result<Vec<InboxListItem>> {
        let rows = self.inbox().list(q).await?;
        Ok(rows.into_iter().map(InboxListItem::from).collect())
    }

    /// `source`'s event `event_id`, as the listing shows it. One probe of the unique key; no
    /// locks.
    pub async fn get_inbox_event(
        &self,
        source: &str,
        event_id: &str,
    ) -> Result<Option<InboxListItem>> {
        let row = self.inbox().find(source, event_id).await?;
        Ok(row.map(InboxListItem::from))
    }

    /// Per source and status: how many events, and when the oldest was received. A read over
    /// every inbox row, for the stats and the dashboard's inbox page.
    pub async fn inbox_counts(&self) -> Result<Vec<InboxCount>> {
        Ok(self.inbox().counts().await?)
    }
}

impl From<kurir_receiver::Listed> for InboxListItem {
    fn from(listed: kurir_receiver::Listed) -> Self {
        let r = listed.record;
        InboxListItem {
            id: listed.id,
            event_id: r.event_id,
            event_type: r.event_type,
            status: r.status,
            attempts: r.attempts,
            next_attempt_at: r.next_attempt_at,
            last_attempt_at: r.last_attempt_at,
            last_error: r.last_error,
            created_at: r.created_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};

    use crate::store::rows::Ts;

    /// Receiver migration 1002: inbox pruning finds the completed rows past the cutoff through
    /// `kurir_inbox_status_updated`, not by reading the table.
    #[tokio::test]
    async fn inbox_pruning_reads_the_status_and_time_index() {
        let Some((url, admin, name)) = super::super::postgres::tests::fresh_database().await else {
            return;
        };
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        for sql in [
            "INSERT INTO kurir_inbox (source, event_id, status, payload, updated_at) \
             SELECT 's', 'e' || i, CASE WHEN i % 10 = 0 THEN 'pending' ELSE 'completed' END, \
                 '\\x00', now() - i * interval '1 second' FROM generate_series(1, 50000) i",
            "ANALYZE kurir_inbox",
        ] {
            sqlx::query(sql).execute(&pool).await.unwrap();
        }
        let plan: serde_json::Value = sqlx::query_scalar(&format!(
            "EXPLAIN (FORMAT JSON) {}",
            super::super::retention::DELETE_INBOX.postgres
        ))
        .bind(Ts(now_cutoff()))
        .bind(500_i64)
        .fetch_one(&pool)
        .await
        .unwrap();
        pool.close().await;
        super::super::postgres::tests::drop_database(&admin, &name).await;
        let plan = plan.to_string();
        assert!(
            plan.contains("kurir_inbox_status_updated") && !plan.contains("Seq Scan"),
            "{plan}"
        );
    }

    fn now_cutoff() -> DateTime<Utc> {
        Utc::now() - chrono::Duration::days(30)
    }
}
