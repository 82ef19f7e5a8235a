//! `TestApp`: the receiver mounted in a real axum server on 127.0.0.1:0, a runner (in the
//! background, or stepped by the test), and a scripted handler that records its calls.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use kurir_receiver::{
    CancellationToken, EventRecord, Inbox, InboxEvent, Processor, Receiver, RetryPolicy, Runner,
    Scheme, WebhookSource,
};
use tokio::sync::{Notify, Semaphore};

use crate::client::{self, Reply};
use crate::db::TestDb;
use crate::signing::Headers;

/// How long any wait in a test may take before it fails.
pub const DEADLINE: Duration = Duration::from_secs(15);

/// The secret of [`default_source`].
pub const SECRET: &str = "test-secret-0123456789";

/// A `kurir`-scheme source named `billing`.
pub fn default_source() -> WebhookSource {
    WebhookSource::new("billing", Scheme::Kurir, [SECRET]).unwrap()
}

/// Tiny, jitter-free retry delays, so retries happen within milliseconds.
pub fn fast_policy(max_attempts: u32) -> RetryPolicy {
    RetryPolicy {
        initial_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(20),
        max_attempts,
        jitter: 0.0,
    }
}

/// A wait bounded by [`DEADLINE`]: poll a condition, `tick` between polls.
pub struct Deadline(tokio::time::Instant);

impl Deadline {
    pub fn start() -> Deadline {
        Deadline(tokio::time::Instant::now() + DEADLINE)
    }

    /// Fails the test once the deadline has passed, else pauses briefly before the next poll.
    pub async fn tick(&self, what: &str) {
        assert!(
            tokio::time::Instant::now() < self.0,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The handler's script and its record of calls.
#[derive(Clone, Default)]
pub struct Calls(Arc<CallsInner>);

#[derive(Default)]
struct CallsInner {
    log: Mutex<Vec<(String, u32)>>,
    changed: Notify,
    fail_first: Mutex<u32>,
    gate: Option<Arc<Semaphore>>,
}

impl Calls {
    /// A handler that fails the first `fail_first` attempts of each event, then succeeds.
    pub fn failing_first(fail_first: u32) -> Calls {
        Calls(Arc::new(CallsInner {
            fail_first: Mutex::new(fail_first),
            ..CallsInner::default()
        }))
    }

    /// A handler that, after recording each call, waits for a permit from [`Calls::release`].
    pub fn gated(fail_first: u32) -> Calls {
        Calls(Arc::new(CallsInner {
            fail_first: Mutex::new(fail_first),
            gate: Some(Arc::new(Semaphore::new(0))),
            ..CallsInner::default()
        }))
    }

    /// From now on, fail attempts up to number `n`.
    pub fn fail_attempts_up_to(&self, n: u32) {
        *self.0.fail_first.lock().unwrap() = n;
    }

    /// Lets one gated call finish.
    pub fn release(&self) {
        if let Some(gate) = &self.0.gate {
            gate.add_permits(1);
        }
    }

    /// Calls so far, as (event id, attempt).
    pub fn log(&self) -> Vec<(String, u32)> {
        self.0.log.lock().unwrap().clone()
    }

    /// Number of calls so far.
    pub fn count(&self) -> usize {
        self.0.log.lock().unwrap().len()
    }

    /// Waits until at least `n` calls have started.
    pub async fn wait_for(&self, n: usize) {
        let wait = async {
            loop {
                let changed = self.0.changed.notified();
                tokio::pin!(changed);
                changed.as_mut().enable();
                if self.count() >= n {
                    return;
                }
                changed.await;
            }
        };
        tokio::time::timeout(DEADLINE, wait)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "timed out waiting for {n} handler calls, saw {}",
                    self.count()
                )
            });
    }

    /// The processor running this script.
    pub fn processor(&self) -> Processor {
        let calls = self.clone();
        Processor::new(move |event: InboxEvent| {
            let calls = calls.clone();
            async move { calls.call(event).await }
        })
    }

    async fn call(&self, event: InboxEvent) -> Result<(), String> {
        self.0
            .log
            .lock()
            .unwrap()
            .push((event.event_id.clone(), event.attempt));
        self.0.changed.notify_waiters();
        if let Some(gate) = &self.0.gate {
            gate.acquire().await.unwrap().forget();
        }
        if event.attempt <= *self.0.fail_first.lock().unwrap() {
            return Err(format!("attempt {} failed on purpose", event.attempt));
        }
        Ok(())
    }
}

/// How to build a [`TestApp`].
pub struct TestAppBuilder<'db> {
    db: &'db TestDb,
    source: WebhookSource,
    calls: Calls,
    policy: RetryPolicy,
    background_runner: bool,
    inline: bool,
    wrap: Option<Box<dyn FnOnce(Router) -> Router>>,
}

impl<'db> TestAppBuilder<'db> {
    pub fn source(mut self, source: WebhookSource) -> Self {
        self.source = source;
        self
    }

    pub fn calls(mut self, calls: Calls) -> Self {
        self.calls = calls;
        self
    }

    pub fn policy(mut self, policy: RetryPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// No background runner: the test calls `app.runner.step()` itself.
    pub fn manual_runner(mut self) -> Self {
        self.background_runner = false;
        self
    }

    /// The handler runs inline, in the request.
    pub fn inline(mut self) -> Self {
        self.inline = true;
        self
    }

    /// Wraps the whole app (e.g. in a flaky proxy layer).
    pub fn wrap(mut self, wrap: impl FnOnce(Router) -> Router + 'static) -> Self {
        self.wrap = Some(Box::new(wrap));
        self
    }

    pub async fn start(self) -> TestApp {
        let inbox = self.db.inbox.clone();
        let processor = self.calls.processor().retry_policy(self.policy).unwrap();
        let runner =
            Runner::new(inbox.clone(), processor.clone()).poll_interval(Duration::from_millis(10));
        let mut receiver = Receiver::new(self.source.clone(), inbox.clone()).wake(runner.waker());
        if self.inline {
            receiver = receiver.process_inline(processor);
        }
        let mut app = Router::new().nest(
            &format!("/webhooks/{}", self.source.name()),
            receiver.router(),
        );
        if let Some(wrap) = self.wrap {
            app = wrap(app);
        }
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let server_shutdown = shutdown.clone();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(server_shutdown.cancelled_owned())
                .await
                .unwrap();
        });
        if self.background_runner {
            tokio::spawn(runner.clone().run(shutdown.clone()));
        }
        TestApp {
            addr,
            inbox,
            source: self.source.name().to_owned(),
            runner,
            calls: self.calls,
            shutdown,
        }
    }
}

/// A running receiver.
pub struct TestApp {
    pub addr: SocketAddr,
    pub inbox: Inbox,
    pub source: String,
    /// A runner over the same inbox and handler (the background one, or for manual steps).
    pub runner: Runner,
    pub calls: Calls,
    shutdown: CancellationToken,
}

impl TestApp {
    pub fn builder(db: &TestDb) -> TestAppBuilder<'_> {
        TestAppBuilder {
            db,
            source: default_source(),
            calls: Calls::default(),
            policy: fast_policy(5),
            background_runner: true,
            inline: false,
            wrap: None,
        }
    }

    /// `POST /webhooks/<source>`.
    pub async fn post(&self, headers: &Headers, body: &[u8]) -> Reply {
        client::post(
            self.addr,
            &format!("/webhooks/{}", self.source),
            headers,
            body,
        )
        .await
    }

    /// `GET /webhooks/<source>/events/<event_id>`.
    pub async fn status_route(&self, event_id: &str) -> Reply {
        client::get(
            self.addr,
            &format!("/webhooks/{}/events/{event_id}", self.source),
        )
        .await
    }

    /// The stored record, which must exist.
    pub async fn record(&self, event_id: &str) -> EventRecord {
        self.inbox
            .status(&self.source, event_id)
            .await
            .unwrap()
            .unwrap()
    }

    /// Waits until the event's record satisfies `condition`, and returns it.
    pub async fn wait_for_record(
        &self,
        event_id: &str,
        condition: impl Fn(&EventRecord) -> bool,
    ) -> EventRecord {
        let deadline = Deadline::start();
        loop {
            match self.inbox.status(&self.source, event_id).await.unwrap() {
                Some(record) if condition(&record) => return record,
                last => {
                    deadline
                        .tick(&format!("event {event_id}, last seen {last:?}"))
                        .await
                }
            }
        }
    }
}

impl Drop for TestApp {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// A request for [`default_source`], signed now: (headers, body).
pub fn signed_request(event_id: &str) -> (Headers, Vec<u8>) {
    let body = crate::signing::body_with_id(event_id);
    let headers = crate::signing::sign(Scheme::Kurir, SECRET, event_id, chrono::Utc::now(), &body);
    (headers, body)
}

/// A [`kurir_receiver::VerifiedEvent`] of [`default_source`], for store-level tests.
pub fn verified_event(event_id: &str) -> kurir_receiver::VerifiedEvent {
    verified_event_of(&default_source(), event_id)
}

/// A [`kurir_receiver::VerifiedEvent`] of `source`, a `kurir`-scheme source with [`SECRET`].
pub fn verified_event_of(source: &WebhookSource, event_id: &str) -> kurir_receiver::VerifiedEvent {
    let (headers, body) = signed_request(event_id);
    let mut map = http::HeaderMap::new();
    for (name, value) in headers {
        map.insert(
            http::HeaderName::try_from(name).unwrap(),
            http::HeaderValue::try_from(value).unwrap(),
        );
    }
    source.verify(map, body.into()).unwrap()
}
