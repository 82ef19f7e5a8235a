//! End to end over real HTTP: a sender posts signed webhooks to the receiver on 127.0.0.1:0, a real
//! runner processes them. The numbered tests are the receiving article's list (issue 5).

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use axum::extract::Request;
use axum::middleware::{self, Next};
use axum::response::IntoResponse;
use chrono::Utc;
use http::StatusCode;
use kurir_receiver::{InboxStatus, Rejection, Scheme, StepOutcome};
use tokio::sync::Barrier;

use crate::signing::{body_with_id, sign};
use crate::support::{
    default_source, fast_policy, signed_request, Calls, Deadline, TestApp, SECRET,
};

both_backends! {
    /// 1. A signed request creates the inbox row and the handler runs.
    async fn signed_request_is_stored_and_handled(db) {
        let app = TestApp::builder(&db).start().await;
        let (headers, body) = signed_request("evt_first");
        let reply = app.post(&headers, &body).await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text);
        assert_eq!(reply.receipt(), "pending");
        assert_eq!(reply.json["event_id"], "evt_first");
        assert_eq!(db.count_rows("billing", "evt_first").await, 1);

        let done = app.wait_for_record("evt_first", |r| r.status == InboxStatus::Completed).await;
        assert_eq!(done.attempts, 1);
        assert_eq!(app.calls.log(), [("evt_first".to_owned(), 1)]);
    }
}

both_backends! {
    /// 2. The same request again is answered 200 and the handler does not run a second time.
    async fn repeated_request_is_answered_without_running_the_handler_again(db) {
        let app = TestApp::builder(&db).start().await;
        let (headers, body) = signed_request("evt_repeat");
        assert_eq!(app.post(&headers, &body).await.status, StatusCode::ACCEPTED);
        app.wait_for_record("evt_repeat", |r| r.status == InboxStatus::Completed).await;

        let again = app.post(&headers, &body).await;
        assert_eq!(again.status, StatusCode::OK);
        assert_eq!(again.receipt(), "already_processed");
        assert_eq!(app.calls.count(), 1);
        assert_eq!(db.count_rows("billing", "evt_repeat").await, 1);
    }
}

both_backends! {
    /// 2b. While the handler is still running, a repeat is answered 202 with the current status.
    async fn request_repeated_while_processing_gets_202_with_its_status(db) {
        let calls = Calls::gated(0);
        let app = TestApp::builder(&db).calls(calls.clone()).start().await;
        let (headers, body) = signed_request("evt_busy");
        app.post(&headers, &body).await;
        calls.wait_for(1).await;

        let again = app.post(&headers, &body).await;
        assert_eq!(again.status, StatusCode::ACCEPTED);
        assert_eq!(again.receipt(), "processing");

        calls.release();
        app.wait_for_record("evt_busy", |r| r.status == InboxStatus::Completed).await;
        assert_eq!(calls.count(), 1);
    }
}

both_backends! {
    /// 4. A sender that gets 5xx retries with backoff, and no duplicate row appears: the first
    /// attempt is stored but its answer lost (502), the second refused before the app (503).
    async fn sender_retrying_after_5xx_creates_no_duplicate_rows(db) {
        let seen = Arc::new(AtomicU32::new(0));
        let flaky = {
            let seen = Arc::clone(&seen);
            move |request: Request, next: Next| {
                let seen = Arc::clone(&seen);
                async move {
                    match seen.fetch_add(1, Ordering::SeqCst) {
                        0 => {
                            drop(next.run(request).await);
                            StatusCode::BAD_GATEWAY.into_response()
                        }
                        1 => StatusCode::SERVICE_UNAVAILABLE.into_response(),
                        _ => next.run(request).await,
                    }
                }
            }
        };
        let app = TestApp::builder(&db)
            .wrap(move |router| router.layer(middleware::from_fn(flaky)))
            .start()
            .await;

        // The sender: re-signed at each attempt like kurir's dispatcher, backoff from the policy.
        let policy = fast_policy(5);
        let body = body_with_id("evt_resent");
        let mut statuses = Vec::new();
        for attempt in 1..=policy.max_attempts {
            let headers = sign(Scheme::Kurir, SECRET, "evt_resent", Utc::now(), &body);
            let reply = app.post(&headers, &body).await;
            statuses.push(reply.status.as_u16());
            if reply.status.is_success() {
                break;
            }
            // The sender's own backoff between its attempts, as a real sender waits.
            tokio::time::sleep(policy.backoff(attempt)).await;
        }
        assert_eq!(statuses[..2], [502, 503]);
        assert!(statuses.len() == 3 && [200, 202].contains(&statuses[2]), "{statuses:?}");
        assert_eq!(db.count_rows("billing", "evt_resent").await, 1);
        app.wait_for_record("evt_resent", |r| r.status == InboxStatus::Completed).await;
        assert_eq!(app.calls.count(), 1);
    }
}

both_backends! {
    /// 5. The status route reports the latest status and `last_attempt_at`.
    async fn status_route_reports_latest_status_and_last_attempt_at(db) {
        let app = TestApp::builder(&db)
            .calls(Calls::failing_first(1))
            .manual_runner()
            .start()
            .await;
        let unknown = app.status_route("evt_unknown").await;
        assert_eq!(unknown.status, StatusCode::NOT_FOUND);
        assert_eq!(unknown.error_code(), "event_not_found");

        let (headers, body) = signed_request("evt_polled");
        app.post(&headers, &body).await;
        let pending = app.status_route("evt_polled").await;
        assert_eq!(pending.status, StatusCode::OK);
        assert_eq!(pending.json["status"], "pending");
        assert_eq!(pending.json["attempts"], 0);
        assert!(pending.json["last_attempt_at"].is_null());

        app.runner.step().await.unwrap();
        let failed = app.status_route("evt_polled").await.json;
        assert_eq!(failed["status"], "failed");
        assert_eq!(failed["attempts"], 1);
        assert_eq!(failed["last_error"], "attempt 1 failed on purpose");
        let first_attempt = failed["last_attempt_at"].as_str().unwrap().to_owned();
        assert!(chrono::DateTime::parse_from_rfc3339(&first_attempt).is_ok());

        app.wait_for_record("evt_polled", |r| r.next_attempt_at.is_some_and(|at| at <= Utc::now()))
            .await;
        // Due by this process's clock; the claim compares with the database's, which may lag
        // it by a moment, so step until the retry is taken.
        let deadline = Deadline::start();
        while matches!(app.runner.step().await.unwrap(), StepOutcome::Idle) {
            deadline.tick("the retry of evt_polled to be claimed").await;
        }
        let completed = app.status_route("evt_polled").await.json;
        assert_eq!(completed["event_id"], "evt_polled");
        assert_eq!(completed["status"], "completed");
        assert_eq!(completed["attempts"], 2);
        assert!(completed["last_error"].is_null());
        assert!(completed["last_attempt_at"].as_str().unwrap() > first_attempt.as_str());
    }
}

both_backends! {
    async fn twenty_concurrent_identical_requests_store_one_row_and_run_once(db) {
        let app = Arc::new(TestApp::builder(&db).start().await);
        let request = Arc::new(signed_request("evt_stampede"));
        let barrier = Arc::new(Barrier::new(20));
        let senders: Vec<_> = (0..20)
            .map(|_| {
                let (app, request, barrier) = (Arc::clone(&app), Arc::clone(&request), Arc::clone(&barrier));
                tokio::spawn(async move {
                    barrier.wait().await;
                    app.post(&request.0, &request.1).await
                })
            })
            .collect();
        for sender in senders {
            let reply = sender.await.unwrap();
            assert!(reply.status.is_success(), "{}: {}", reply.status, reply.text);
        }
        assert_eq!(db.count_rows("billing", "evt_stampede").await, 1, "{}", db.backend());
        app.wait_for_record("evt_stampede", |r| r.status == InboxStatus::Completed).await;
        assert_eq!(app.calls.count(), 1);
    }
}

/// A body of exactly `len` bytes carrying `event_id`.
fn body_of_len(event_id: &str, len: usize) -> Vec<u8> {
    let bare = format!(r#"{{"event_id":"{event_id}","pad":""}}"#);
    let pad = "x".repeat(len - bare.len());
    format!(r#"{{"event_id":"{event_id}","pad":"{pad}"}}"#).into_bytes()
}

both_backends! {
    async fn oversized_body_is_refused_with_413_and_not_stored(db) {
        let app = TestApp::builder(&db).source(default_source().body_limit(256)).start().await;
        let too_big = body_of_len("evt_big", 257);
        let headers = sign(Scheme::Kurir, SECRET, "evt_big", Utc::now(), &too_big);
        let reply = app.post(&headers, &too_big).await;
        assert_eq!(reply.status, StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(reply.error_code(), "payload_too_large");
        assert_eq!(db.total_rows().await, 0);

        let at_limit = body_of_len("evt_fits", 256);
        let headers = sign(Scheme::Kurir, SECRET, "evt_fits", Utc::now(), &at_limit);
        assert_eq!(app.post(&headers, &at_limit).await.status, StatusCode::ACCEPTED);
    }
}

/// Without a Content-Length (a streamed body) the limit is enforced while reading.
#[tokio::test]
async fn streamed_body_over_the_limit_is_refused() {
    let source = default_source().body_limit(16);
    let request = Request::builder()
        .method("POST")
        .body(axum::body::Body::from(vec![b'x'; 17]))
        .unwrap();
    assert!(request.headers().get("content-length").is_none());
    let rejection = source.verify_request(request).await.unwrap_err();
    assert!(
        matches!(rejection, Rejection::PayloadTooLarge { limit: 16 }),
        "{rejection:?}"
    );
}

both_backends! {
    async fn request_without_event_id_is_refused_with_400_and_not_stored(db) {
        let app = TestApp::builder(&db).start().await;
        // The kurir scheme's id is the signed body's event_id; the unsigned header does not count.
        let body = br#"{"type":"invoice.paid","data":{}}"#;
        let headers = sign(Scheme::Kurir, SECRET, "evt_anonymous", Utc::now(), body);
        let reply = app.post(&headers, body).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST);
        assert_eq!(reply.error_code(), "missing_event_id");
        assert_eq!(db.total_rows().await, 0);
    }
}

both_backends! {
    async fn inline_processing_answers_after_the_handler_ran(db) {
        let app = TestApp::builder(&db).inline().manual_runner().start().await;
        let (headers, body) = signed_request("evt_inline");
        let reply = app.post(&headers, &body).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
        assert_eq!(reply.receipt(), "completed");
        assert_eq!(app.calls.count(), 1);
        assert_eq!(app.record("evt_inline").await.attempts, 1);

        let again = app.post(&headers, &body).await;
        assert_eq!((again.status, again.receipt()), (StatusCode::OK, "already_processed"));
        assert_eq!(app.calls.count(), 1);
    }
}

both_backends! {
    async fn inline_failure_is_answered_202_and_retried_by_the_runner(db) {
        let app = TestApp::builder(&db)
            .calls(Calls::failing_first(1))
            .inline()
            .start()
            .await;
        let (headers, body) = signed_request("evt_inline_flaky");
        let reply = app.post(&headers, &body).await;
        assert_eq!((reply.status, reply.receipt()), (StatusCode::ACCEPTED, "failed"));
        let done = app.wait_for_record("evt_inline_flaky", |r| r.status == InboxStatus::Completed).await;
        assert_eq!(done.attempts, 2);
        assert_eq!(app.calls.count(), 2);
    }
}

both_backends! {
    /// The inline attempt runs in a task of its own: a sender that hangs up mid-way does not leave
    /// the event half-processed.
    async fn inline_attempt_finishes_when_the_sender_hangs_up(db) {
        let calls = Calls::gated(0);
        let app = Arc::new(TestApp::builder(&db).calls(calls.clone()).inline().manual_runner().start().await);
        let (headers, body) = signed_request("evt_hangup");
        let sender = {
            let app = Arc::clone(&app);
            tokio::spawn(async move { app.post(&headers, &body).await })
        };
        calls.wait_for(1).await;
        sender.abort();
        assert!(sender.await.unwrap_err().is_cancelled());

        calls.release();
        let done = app.wait_for_record("evt_hangup", |r| r.status == InboxStatus::Completed).await;
        assert_eq!(done.attempts, 1);
        assert_eq!(calls.count(), 1);
    }
}
