//! `inbox`: signed requests/s that `kurir serve`'s inbox gateway verifies and stores, 10 % of
//! them duplicates of an earlier event, from 32 concurrent keep-alive connections. The source
//! (`bench`, kurir scheme) is created through the admin API and forwards to the sink, so the
//! gateway's runner forwards every stored event while the requests arrive, as in production.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chrono::{SecondsFormat, Utc};
use kurir_core::secret::Secret;

use super::{result, Ctx, Rig};
use crate::child::ADMIN_TOKEN;
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

/// Creates the source `bench` forwarding to the sink's `/raw`.
async fn create_source(base_url: &str, secret: &Secret, sink_url: &str) -> anyhow::Result<()> {
    let created = reqwest::Client::new()
        .post(format!("{base_url}/v1/inbox/sources"))
        .bearer_auth(ADMIN_TOKEN)
        .header("content-type", "application/json")
        .body(
            serde_json::json!({
                "name": "bench", "scheme": "kurir", "secrets": [secret.expose()],
                "forward_url": format!("{}/raw", sink_url),
            })
            .to_string(),
        )
        .send()
        .await?;
    anyhow::ensure!(
        created.status().is_success(),
        "creating the inbox source answered {}: {}",
        created.status(),
        created.text().await.unwrap_or_default()
    );
    Ok(())
}

/// Posts inbox request `j`, signed, and answers its status.
async fn post_signed(
    client: &reqwest::Client,
    url: &str,
    secret: &Secret,
    j: usize,
) -> anyhow::Result<u16> {
    let event_id = format!("in-{}", event_of(j));
    let body = format!(
        r#"{{"event_id":"{event_id}","event_type":"order.paid","version":1,"occurred_at":"2026-06-11T08:15:30Z","delivery_attempt":1,"data":{PAYLOAD}}}"#
    );
    let timestamp = Utc::now().to_rfc3339_opts(SecondsFormat::Secs, true);
    let signature = kurir_core::sign::sign_kurir(secret, &timestamp, body.as_bytes());
    let resp = client
        .post(url)
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
    Ok(status)
}

/// Sends requests 0..`n` from [`CONCURRENCY`] clients. Returns each request's time and how
/// many got each status.
async fn send_all(
    client: reqwest::Client,
    url: String,
    secret: Arc<Secret>,
    n: usize,
) -> anyhow::Result<(Vec<u64>, BTreeMap<u16, usize>)> {
    let cursor = Arc::new(AtomicU64::new(0));
    let latencies = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let statuses = Arc::new(Mutex::new(BTreeMap::<u16, usize>::new()));
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
                let t = now_ns();
                let status = post_signed(&client, &url, &secret, j).await?;
                latencies.lock().unwrap().push(now_ns() - t);
                *statuses.lock().unwrap().entry(status).or_default() += 1;
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done??;
    }
    let latencies = std::mem::take(&mut *latencies.lock().unwrap());
    let statuses = std::mem::take(&mut *statuses.lock().unwrap());
    Ok((latencies, statuses))
}

/// The whole scenario.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    let n = ctx.sizes.inbox_requests;
    let mut r = result("inbox", format!("{n} signed requests, 10 % duplicates"));
    let mut rig = Rig::new(ctx, ctx.events(0), 0, &[]).await?;
    let base_url = rig.start_kurir(ctx).await?;
    let secret = Secret::generate();
    create_source(&base_url, &secret, &rig.sink.url()).await?;
    let url = format!("{base_url}/inbox/bench");
    let client = super::ceiling::kurir_like_client()?;
    let secret = Arc::new(secret);
    let start = now_ns();
    let (mut lat, statuses) = send_all(client, url, secret, n).await?;
    let elapsed = now_ns() - start;
    let unique = (0..n).filter(|j| event_of(*j) == *j).count();
    // The forwards, for the record: each stored event reaches the sink once.
    let forwarded_by = std::time::Instant::now() + ctx.sizes.patience;
    while (rig.recorder.raw_requests() as usize) < unique
        && std::time::Instant::now() < forwarded_by
    {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let forward_elapsed = now_ns() - start;
    let stored = rig.app.inbox_rows().await?;
    let lat = percentiles(&mut lat);
    r.metric("requests", n as f64, "");
    r.metric("requests_per_s", rate(n, elapsed), "/s");
    r.metric("stored_events", stored as f64, "");
    r.metric("expected_unique", unique as f64, "");
    r.metric("request_p50", lat.p50, "ms");
    r.metric("request_p99", lat.p99, "ms");
    for (status, count) in &statuses {
        r.metric(&format!("answered_{status}"), *count as f64, "");
    }
    r.metric("forwarded", rig.recorder.raw_requests() as f64, "");
    r.metric(
        "stored_and_forwarded_per_s",
        rate(rig.recorder.raw_requests() as usize, forward_elapsed),
        "/s",
    );
    r.notes.push(
        "kurir serve's gateway, POST /inbox/bench (kurir scheme); its runner forwards each stored event to the sink"
            .into(),
    );
    rig.finish(&mut r, n).await?;
    r.load_end = crate::machine::load_average();
    Ok(vec![r])
}
