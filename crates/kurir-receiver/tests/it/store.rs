//! The inbox store's conformance: every operation on both backends, without HTTP.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use kurir_receiver::{Completion, Fence, InboxStatus, Receipt, RetryNow};
use tokio::sync::Barrier;

use kurir_receiver::{Scheme, WebhookSource};

use crate::support::{verified_event, verified_event_of, Deadline, SECRET};

const HOUR: Duration = Duration::from_secs(3600);

both_backends! {
    async fn receiving_twice_stores_one_row_and_reports_the_duplicate(db) {
        let event = verified_event("evt_twice");
        let Receipt::New(first) = db.inbox.receive(&event).await.unwrap() else {
            panic!("first receipt must be new");
        };
        assert_eq!(first.status, InboxStatus::Pending);
        assert_eq!(first.attempts, 0);
        assert!(first.next_attempt_at.is_some());
        assert_eq!(first.idempotency_key, None);

        let again = db.inbox.receive(&event).await.unwrap();
        assert_eq!(again, Receipt::Duplicate(first));
        assert_eq!(db.count_rows("billing", "evt_twice").await, 1);
    }
}

both_backends! {
    async fn concurrent_receipts_of_one_event_store_one_row(db) {
        let barrier = Arc::new(Barrier::new(20));
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let (inbox, barrier) = (db.inbox.clone(), Arc::clone(&barrier));
                tokio::spawn(async move {
                    let event = verified_event("evt_race");
                    barrier.wait().await;
                    inbox.receive(&event).await.unwrap()
                })
            })
            .collect();
        let mut new = 0;
        for task in tasks {
            if matches!(task.await.unwrap(), Receipt::New(_)) {
                new += 1;
            }
        }
        assert_eq!(new, 1, "{}", db.backend());
        assert_eq!(db.count_rows("billing", "evt_race").await, 1);
    }
}

both_backends! {
    async fn concurrent_claims_take_disjoint_events(db) {
        for i in 0..10 {
            db.inbox.receive(&verified_event(&format!("evt_{i}"))).await.unwrap();
        }
        let claim = |owner: &'static str| {
            let inbox = db.inbox.clone();
            tokio::spawn(async move { inbox.claim_due(owner, HOUR, 10, None).await.unwrap() })
        };
        let (a, b) = (claim("worker-a"), claim("worker-b"));
        let (a, b) = (a.await.unwrap(), b.await.unwrap());
        let ids: HashSet<_> = a.iter().chain(&b).map(|c| c.event.event_id.clone()).collect();
        assert_eq!(a.len() + b.len(), 10, "{}", db.backend());
        assert_eq!(ids.len(), 10, "an event was claimed twice");
        assert!(a.iter().chain(&b).all(|c| c.event.attempt == 1));
        assert!(db.inbox.claim_due("worker-c", HOUR, 10, None).await.unwrap().is_empty());
        let record = db.inbox.status("billing", "evt_0").await.unwrap().unwrap();
        assert_eq!(record.status, InboxStatus::Processing);
        assert_eq!(record.attempts, 1);
        assert!(record.last_attempt_at.is_some());
        assert_eq!(record.next_attempt_at, None);
    }
}

both_backends! {
    async fn claimed_event_carries_what_was_received(db) {
        let sent = verified_event("evt_content");
        db.inbox.receive(&sent).await.unwrap();
        let claimed = db.inbox.claim_due("w", HOUR, 1, None).await.unwrap();
        let event = &claimed[0].event;
        assert_eq!(event.source, "billing");
        assert_eq!(event.event_id, "evt_content");
        assert_eq!(event.event_type.as_deref(), Some("invoice.paid"));
        assert_eq!(event.payload, sent.payload);
        assert_eq!(event.headers["x-webhook-event-id"], "evt_content");
        assert_eq!(event.headers["x-webhook-signature"], sent.headers["x-webhook-signature"]);
        assert_eq!(event.attempt, 1);
    }
}

both_backends! {
    async fn source_filter_claims_only_that_source(db) {
        db.inbox.receive(&verified_event("evt_billing")).await.unwrap();
        assert!(db.inbox.claim_due("w", HOUR, 10, Some("shipping")).await.unwrap().is_empty());
        assert_eq!(db.inbox.claim_due("w", HOUR, 10, Some("billing")).await.unwrap().len(), 1);
    }
}

both_backends! {
    async fn the_event_type_has_a_column_of_its_own(db) {
        db.inbox.receive(&verified_event("evt_typed")).await.unwrap();
        let (event_type, headers) = db.stored_type_and_headers("evt_typed").await;
        assert_eq!(event_type.as_deref(), Some("invoice.paid"));
        assert!(!headers.contains("event-type\":\"invoice.paid"), "{headers}");
        let record = db.inbox.status("billing", "evt_typed").await.unwrap().unwrap();
        assert_eq!(record.event_type.as_deref(), Some("invoice.paid"));
    }
}

both_backends! {
    async fn claims_among_sources_take_only_theirs(db) {
        let source = |name| WebhookSource::new(name, Scheme::Kurir, [SECRET]).unwrap();
        for name in ["billing", "shipping", "github"] {
            db.inbox.receive(&verified_event_of(&source(name), &format!("evt_{name}"))).await.unwrap();
        }
        assert!(db.inbox.claim_due_among("w", HOUR, 10, &[]).await.unwrap().is_empty());
        let wanted = ["billing".to_owned(), "github".to_owned(), "unknown".to_owned()];
        let claimed = db.inbox.claim_due_among("w", HOUR, 10, &wanted).await.unwrap();
        let mut sources: Vec<_> = claimed.iter().map(|c| c.event.source.as_str()).collect();
        sources.sort_unstable();
        assert_eq!(sources, ["billing", "github"], "{}", db.backend());
        assert_eq!(db.inbox.claim_due("w", HOUR, 10, None).await.unwrap().len(), 1);
    }
}

both_backends! {
    async fn expired_lease_is_claimed_again_and_fences_out_the_first_worker(db) {
        db.inbox.receive(&verified_event("evt_lease")).await.unwrap();
        // A lease long enough that the claim below runs inside it even on a loaded machine; it
        // is judged only if it did (a claim after the lease ran out may rightly take the event).
        let lease = Duration::from_millis(500);
        let claimed_at = std::time::Instant::now();
        let first = db.inbox.claim_due("slow", lease, 1, None).await.unwrap();
        assert_eq!(first.len(), 1);
        let during = db.inbox.claim_due("other", HOUR, 1, None).await.unwrap();
        if claimed_at.elapsed() < lease {
            assert!(during.is_empty(), "claimed again while the first lease held");
        }

        let deadline = Deadline::start();
        let mut second = during;
        while second.is_empty() {
            deadline.tick("the first lease to expire").await;
            second = db.inbox.claim_due("other", HOUR, 1, None).await.unwrap();
        }
        assert_eq!(second[0].event.attempt, 2);

        let late = db.inbox.complete(&first[0], &Completion::Completed).await.unwrap();
        assert_eq!(late, Fence::LeaseLost, "{}", db.backend());
        let current = db.inbox.complete(&second[0], &Completion::Completed).await.unwrap();
        assert_eq!(current, Fence::Recorded);
        let record = db.inbox.status("billing", "evt_lease").await.unwrap().unwrap();
        assert_eq!((record.status, record.attempts), (InboxStatus::Completed, 2));
    }
}

both_backends! {
    async fn failed_event_is_due_again_at_its_retry_time(db) {
        db.inbox.receive(&verified_event("evt_retry")).await.unwrap();
        let claimed = db.inbox.claim_due("w", HOUR, 1, None).await.unwrap();
        let at = Utc::now() + chrono::Duration::hours(1);
        let at = chrono::DateTime::from_timestamp_millis(at.timestamp_millis()).unwrap();
        let retry = Completion::Retry { at, error: "boom".into() };
        assert_eq!(db.inbox.complete(&claimed[0], &retry).await.unwrap(), Fence::Recorded);

        let record = db.inbox.status("billing", "evt_retry").await.unwrap().unwrap();
        assert_eq!(record.status, InboxStatus::Failed);
        assert_eq!(record.next_attempt_at, Some(at));
        assert_eq!(record.last_error.as_deref(), Some("boom"));
        assert!(db.inbox.claim_due("w", HOUR, 1, None).await.unwrap().is_empty());

        // Completing twice with the same lease does nothing the second time.
        assert_eq!(db.inbox.complete(&claimed[0], &Completion::Completed).await.unwrap(), Fence::LeaseLost);
    }
}

both_backends! {
    async fn given_up_event_waits_for_retry_now(db) {
        db.inbox.receive(&verified_event("evt_dead")).await.unwrap();
        let claimed = db.inbox.claim_due("w", HOUR, 1, None).await.unwrap();
        let give_up = Completion::GiveUp { error: "still broken".into() };
        db.inbox.complete(&claimed[0], &give_up).await.unwrap();

        let record = db.inbox.status("billing", "evt_dead").await.unwrap().unwrap();
        assert_eq!((record.status, record.next_attempt_at), (InboxStatus::Failed, None));
        assert!(db.inbox.claim_due("w", HOUR, 1, None).await.unwrap().is_empty());

        assert_eq!(db.inbox.retry_now("billing", "evt_dead").await.unwrap(), RetryNow::Scheduled);
        let record = db.inbox.status("billing", "evt_dead").await.unwrap().unwrap();
        assert_eq!((record.status, record.attempts), (InboxStatus::Pending, 0));
        assert_eq!(record.last_error.as_deref(), Some("still broken"));
        let again = db.inbox.claim_due("w", HOUR, 1, None).await.unwrap();
        assert_eq!(again[0].event.attempt, 1);

        assert_eq!(
            db.inbox.retry_now("billing", "evt_dead").await.unwrap(),
            RetryNow::NotFailed(InboxStatus::Processing)
        );
        assert_eq!(db.inbox.retry_now("billing", "nope").await.unwrap(), RetryNow::NotFound);
    }
}

both_backends! {
    async fn migrations_are_idempotent(db) {
        db.inbox.migrate().await.unwrap();
        db.inbox.receive(&verified_event("evt_after_migrate")).await.unwrap();
        db.inbox.migrate().await.unwrap();
        assert_eq!(db.total_rows().await, 1);
    }
}

both_backends! {
    /// kurir's migrator and ours share `_sqlx_migrations`; in either order, each must tolerate the
    /// other's versions (`ignore_missing`), and the table is created once.
    empty async fn inbox_migrations_coexist_with_kurirs_schema(db) {
        let kurir_migrator = || async {
            let dir = match db.backend() {
                "postgres" => concat!(env!("CARGO_MANIFEST_DIR"), "/../kurir/migrations/postgres"),
                "mysql" => concat!(env!("CARGO_MANIFEST_DIR"), "/../kurir/migrations/mysql"),
                _ => concat!(env!("CARGO_MANIFEST_DIR"), "/../kurir/migrations/sqlite"),
            };
            let mut migrator = sqlx::migrate::Migrator::new(std::path::Path::new(dir)).await.unwrap();
            migrator.set_ignore_missing(true);
            migrator
        };
        let run_kurir = || async {
            let migrator = kurir_migrator().await;
            match &db.inbox {
                kurir_receiver::Inbox::Postgres(pool) => migrator.run(pool).await.unwrap(),
                kurir_receiver::Inbox::Sqlite(pool) => migrator.run(pool).await.unwrap(),
                kurir_receiver::Inbox::Mysql(pool) => migrator.run(pool).await.unwrap(),
            }
        };
        db.inbox.migrate().await.unwrap();
        run_kurir().await;
        db.inbox.migrate().await.unwrap();
        run_kurir().await;
        db.inbox.receive(&verified_event("evt_shared")).await.unwrap();
        assert_eq!(db.total_rows().await, 1);
    }
}

both_backends! {
    async fn events_are_listed_newest_first_by_filter_and_counted_per_status(db) {
        for id in ["evt_l1", "evt_l2", "evt_l3"] {
            db.inbox.receive(&verified_event(id)).await.unwrap();
        }
        let claimed = db.inbox.claim_due("w", HOUR, 1, None).await.unwrap();
        let give_up = Completion::GiveUp { error: "no".into() };
        db.inbox.complete(&claimed[0], &give_up).await.unwrap();
        let failed = claimed[0].event.event_id.clone();

        let query = |status: Option<InboxStatus>, before_id: Option<i64>, limit: u32| {
            kurir_receiver::ListQuery {
                source: "billing".into(),
                status,
                before_id,
                limit,
                ..kurir_receiver::ListQuery::default()
            }
        };
        let all = db.inbox.list(&query(None, None, 10)).await.unwrap();
        let ids: Vec<&str> = all.iter().map(|l| l.record.event_id.as_str()).collect();
        assert_eq!(ids, ["evt_l3", "evt_l2", "evt_l1"]);
        let next = db.inbox.list(&query(None, Some(all[0].id), 1)).await.unwrap();
        assert_eq!(next[0].record.event_id, "evt_l2");
        assert_eq!(next.len(), 1);
        // A filter's value is used twice in the statement (`IS NULL OR =`), bound once.
        let only_failed = db.inbox.list(&query(Some(InboxStatus::Failed), None, 10)).await.unwrap();
        assert_eq!(only_failed.len(), 1);
        assert_eq!(only_failed[0].record.event_id, failed);
        assert_eq!(only_failed[0].record.next_attempt_at, None);
        let later = kurir_receiver::ListQuery {
            since: Some(Utc::now() + chrono::Duration::hours(1)),
            ..query(None, None, 10)
        };
        assert!(db.inbox.list(&later).await.unwrap().is_empty());
        let elsewhere = kurir_receiver::ListQuery { source: "other".into(), ..query(None, None, 10) };
        assert!(db.inbox.list(&elsewhere).await.unwrap().is_empty());

        let found = db.inbox.find("billing", &failed).await.unwrap().unwrap();
        assert_eq!((found.id, found.record.status), (only_failed[0].id, InboxStatus::Failed));
        assert!(db.inbox.find("billing", "evt_none").await.unwrap().is_none());

        let counts = db.inbox.counts().await.unwrap();
        let seen: Vec<(&str, InboxStatus, i64)> =
            counts.iter().map(|c| (c.source.as_str(), c.status, c.count)).collect();
        assert_eq!(seen, [("billing", InboxStatus::Failed, 1), ("billing", InboxStatus::Pending, 2)]);
        assert!(counts.iter().all(|c| c.oldest_created_at.is_some()));
    }
}
