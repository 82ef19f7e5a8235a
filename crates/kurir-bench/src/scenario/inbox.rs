//! `inbox`: signed requests/s that the receiving side verifies and stores, 10 % of them
//! duplicates of an earlier event, from 32 concurrent keep-alive connections.
//!
//! The process under test is kurir-receiver's `Receiver` for one source (kurir scheme) at
//! `POST /inbox/bench`, with a runner whose handler does nothing (see [`crate::inbox_server`]):
//! the same pieces the `kurir serve` gateway mounts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{SecondsFormat, Utc};
use kurir_core::secret::Secret;

use super::{add_process_figures, result, Ctx};
use crate::child::UnderTest;
use crate::clock::now_ns;
use crate::db::PAYLOAD;
use crate::report::ScenarioResult;
use crate::stats::{percentiles, rate};

const CONCURRENCY: usize = 32;

/// The event id of request `j`: every tenth repeats the event of five requests before.
fn event_of(j: usize) -> usize {
    if j % 10 == 9 {
        j - 5
    } else {
        j
    }
}

/// The whole scenario.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    let n = ctx.sizes.inbox_requests;
    let mut r = result("inbox", format!("{n} signed requests, 10 % duplicates"));
    let db = ctx.database().await?;
    let app = db.app_pool(1).await?;
    let secret = Secret::generate();
    let server = UnderTest::inbox(&db.url, &ctx.dir, secret.expose()).await?;
    let before = server.sample();
    let url = format!("{}/inbox/bench", server.base_url);
    let client = super::ceiling::kurir_like_client()?;
    let secret = Arc::new(secret);
    let cursor = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let statuses = Arc::new(Mutex::new(std::collections::BTreeMap::<u16, usize>::new()));
    let start = now_ns();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..CONCURRENCY {
        let (client, url, secret, cursor, latencies, statuses) = (
            client.clone(),
            url.clone(),
            secret.clone(),
            cursor.clone(),
            latencies.clone(),
            statuses.clone(),
        );
        tasks.spawn(async move {
            loop {
                let j = cursor.fetch_add(1, Ordering::Relaxed) as usize;
                if j >= n {
                    return anyhow::Ok(());
                }
                let event_id = format!("in-{}", event_of(j));
                let body = format!(
                    r#"{{"event_id":"{event_id}","event_type":"order.paid","version":1,"occurred_at":"2026-06-11T08:15:30Z","delivery_attempt":1,"data":{PAYLOAD}}}"#
                );
                let timestamp = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
                let signature =
                    kurir_core::sign::sign_kurir(&secret, &timestamp, body.as_bytes());
                let t = now_ns();
                let resp = client
                    .post(&url)
                    .header("content-type", "application/json")
                    .header("x-webhook-event", "order.paid")
                    .header("x-webhook-event-id", &event_id)
                    .header("x-webhook-timestamp", &timestamp)
                    .header("x-webhook-signature", signature)
                    .body(body)
                    .send()
                    .await?;
                let status = resp.status().as_u16();
                resp.bytes().await?;
                latencies.lock().unwrap().push(now_ns() - t);
                *statuses.lock().unwrap().entry(status).or_default() += 1;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let elapsed = now_ns() - start;
    let last = server.stop().await?;
    let stored = app.inbox_rows().await?;
    let unique = (0..n).filter(|j| event_of(*j) == *j).count();
    let mut lat = std::mem::take(&mut *latencies.lock().unwrap());
    let lat = percentiles(&mut lat);
    r.metric("requests", n as f64, "");
    r.metric("requests_per_s", rate(n, elapsed), "/s");
    r.metric("stored_events", stored as f64, "");
    r.metric("expected_unique", unique as f64, "");
    r.metric("request_p50", lat.p50, "ms");
    r.metric("request_p99", lat.p99, "ms");
    for (status, count) in statuses.lock().unwrap().iter() {
        r.metric(&format!("answered_{status}"), *count as f64, "");
    }
    add_process_figures(&mut r, before, last, n);
    r.notes.push(
        "kurir-receiver's Receiver router (POST /inbox/bench, kurir scheme) in a child process; \
         the kurir serve gateway was not on main when this was written"
            .into(),
    );
    app.close().await;
    db.remove().await?;
    r.load_end = crate::machine::load_average();
    Ok(vec![r])
}
