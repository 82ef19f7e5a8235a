//! The runner and the processor: retries with backoff, giving up, re-running, leases, shutdown.
//! Most tests step the runner by hand, so each intermediate state can be looked at.

use std::time::Duration;

use kurir_receiver::{
    CancellationToken, InboxEvent, InboxStatus, Processor, RetryNow, Runner, SourceSet, StepCounts,
    StepOutcome,
};

use crate::support::{fast_policy, verified_event, Calls, Deadline, TestApp, DEADLINE};

const HOUR: Duration = Duration::from_secs(3600);

/// Steps `runner` until a step processes something, and returns what it did.
async fn step_until_processed(runner: &Runner) -> StepCounts {
    let deadline = Deadline::start();
    loop {
        if let StepOutcome::Processed(counts) = runner.step().await.unwrap() {
            return counts;
        }
        deadline.tick("a due event to be processed").await;
    }
}

both_backends! {
    /// Issue test 3, with a real background runner: attempts 1 and 2 fail, 3 succeeds; each attempt
    /// is observed while it runs.
    async fn failing_handler_is_retried_until_it_succeeds(db) {
        let calls = Calls::gated(2);
        let app = TestApp::builder(&db).calls(calls.clone()).start().await;
        let (headers, body) = crate::support::signed_request("evt_flaky");
        assert_eq!(app.post(&headers, &body).await.status, 202);

        calls.wait_for(1).await;
        let first = app.record("evt_flaky").await;
        assert_eq!((first.status, first.attempts), (InboxStatus::Processing, 1));
        calls.release();

        calls.wait_for(2).await;
        let second = app.record("evt_flaky").await;
        assert_eq!((second.status, second.attempts), (InboxStatus::Processing, 2));
        assert_eq!(second.last_error.as_deref(), Some("attempt 1 failed on purpose"));
        assert!(second.last_attempt_at > first.last_attempt_at);
        calls.release();

        calls.wait_for(3).await;
        calls.release();
        let done = app.wait_for_record("evt_flaky", |r| r.status == InboxStatus::Completed).await;
        assert_eq!(done.attempts, 3);
        assert_eq!(done.last_error, None);
        assert!(done.last_attempt_at > second.last_attempt_at);
        let attempts: Vec<u32> = calls.log().into_iter().map(|(_, attempt)| attempt).collect();
        assert_eq!(attempts, [1, 2, 3]);
    }
}

both_backends! {
    /// kurir's gateway shares the table with applications: its runner follows a changing set.
    async fn a_runner_over_a_source_set_follows_the_set_as_it_changes(db) {
        db.inbox.receive(&verified_event("evt_set")).await.unwrap();
        let sources = SourceSet::default();
        let runner = Runner::new(db.inbox.clone(), Processor::new(|_: InboxEvent| async {
            Ok::<(), std::io::Error>(())
        }))
        .sources(sources.clone());
        assert_eq!(runner.step().await.unwrap(), StepOutcome::Idle, "an empty set claims nothing");
        sources.insert("billing");
        let counts = step_until_processed(&runner).await;
        assert_eq!((counts.claimed, counts.completed), (1, 1));
    }
}

both_backends! {
    async fn failed_attempt_is_recorded_then_retried_when_due(db) {
        let calls = Calls::failing_first(1);
        let app = TestApp::builder(&db).calls(calls.clone()).manual_runner().start().await;
        let (headers, body) = crate::support::signed_request("evt_once_failing");
        assert_eq!(app.post(&headers, &body).await.status, 202);

        let counts = step_until_processed(&app.runner).await;
        assert_eq!((counts.claimed, counts.retrying), (1, 1));
        let failed = app.record("evt_once_failing").await;
        assert_eq!((failed.status, failed.attempts), (InboxStatus::Failed, 1));
        assert!(failed.last_attempt_at.is_some());
        assert!(failed.next_attempt_at.is_some());
        assert_eq!(failed.last_error.as_deref(), Some("attempt 1 failed on purpose"));

        let counts = step_until_processed(&app.runner).await;
        assert_eq!(counts.completed, 1);
        let done = app.record("evt_once_failing").await;
        assert_eq!((done.status, done.attempts), (InboxStatus::Completed, 2));
        assert_eq!(calls.count(), 2);
    }
}

both_backends! {
    async fn gives_up_after_max_attempts_until_retry_now(db) {
        let calls = Calls::failing_first(u32::MAX);
        let app = TestApp::builder(&db)
            .calls(calls.clone())
            .policy(fast_policy(3))
            .manual_runner()
            .start()
            .await;
        let (headers, body) = crate::support::signed_request("evt_hopeless");
        app.post(&headers, &body).await;

        let mut gave_up = 0;
        while gave_up == 0 {
            gave_up = step_until_processed(&app.runner).await.gave_up;
        }
        let dead = app.record("evt_hopeless").await;
        assert_eq!((dead.status, dead.attempts), (InboxStatus::Failed, 3));
        assert_eq!(dead.next_attempt_at, None);
        assert_eq!(dead.last_error.as_deref(), Some("attempt 3 failed on purpose"));
        assert_eq!(app.runner.step().await.unwrap(), StepOutcome::Idle);
        assert_eq!(calls.count(), 3);

        calls.fail_attempts_up_to(0);
        assert_eq!(app.inbox.retry_now("billing", "evt_hopeless").await.unwrap(), RetryNow::Scheduled);
        assert_eq!(step_until_processed(&app.runner).await.completed, 1);
        let done = app.record("evt_hopeless").await;
        assert_eq!((done.status, done.attempts), (InboxStatus::Completed, 1));
    }
}

async fn panicking(_: InboxEvent) -> Result<(), String> {
    panic!("handler bug (this panic is expected by the test)")
}

both_backends! {
    async fn a_panicking_handler_fails_the_attempt(db) {
        let processor = Processor::new(panicking).retry_policy(fast_policy(5)).unwrap();
        let runner = Runner::new(db.inbox.clone(), processor);
        db.inbox.receive(&verified_event("evt_panic")).await.unwrap();
        assert_eq!(step_until_processed(&runner).await.retrying, 1);
        let record = db.inbox.status("billing", "evt_panic").await.unwrap().unwrap();
        assert_eq!(record.status, InboxStatus::Failed);
        assert_eq!(record.last_error.as_deref(), Some("handler panicked"));
    }
}

both_backends! {
    async fn a_handler_running_past_its_lease_is_abandoned(db) {
        let processor = Processor::new(|_: InboxEvent| std::future::pending::<Result<(), String>>())
            .lease(Duration::from_millis(50))
            .unwrap();
        let runner = Runner::new(db.inbox.clone(), processor);
        db.inbox.receive(&verified_event("evt_stuck")).await.unwrap();
        assert_eq!(step_until_processed(&runner).await.retrying, 1);
        let record = db.inbox.status("billing", "evt_stuck").await.unwrap().unwrap();
        assert_eq!(record.status, InboxStatus::Failed);
        assert!(record.last_error.unwrap().contains("timed out"));
    }
}

both_backends! {
    /// A worker that dies during the last allowed attempt leaves its lease to expire; the event
    /// then ends `failed` without the handler running once more.
    async fn crash_during_the_last_attempt_gives_up_without_running_again(db) {
        let calls = Calls::default();
        let processor = calls.processor().retry_policy(fast_policy(1)).unwrap();
        let runner = Runner::new(db.inbox.clone(), processor);
        db.inbox.receive(&verified_event("evt_orphan")).await.unwrap();
        let orphaned = db.inbox.claim_due("dead-worker", Duration::from_millis(20), 1, None).await.unwrap();
        assert_eq!(orphaned.len(), 1);

        assert_eq!(step_until_processed(&runner).await.gave_up, 1);
        assert_eq!(calls.count(), 0);
        let record = db.inbox.status("billing", "evt_orphan").await.unwrap().unwrap();
        assert_eq!((record.status, record.attempts), (InboxStatus::Failed, 2));
        assert_eq!(record.next_attempt_at, None);
    }
}

both_backends! {
    async fn runner_stops_when_shutdown_is_cancelled(db) {
        let runner = Runner::new(db.inbox.clone(), Calls::default().processor()).poll_interval(HOUR);
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(runner.run(shutdown.clone()));
        shutdown.cancel();
        tokio::time::timeout(DEADLINE, running).await.unwrap().unwrap();
    }
}
