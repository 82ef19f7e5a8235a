//! `throughput`: N events to E endpoints (1 and 10), enqueued with `kurir::outbox::enqueue` in
//! application transactions of 10 events from 4 connections while kurir runs; deliveries/s from
//! the first commit to the last receipt, against raw POSTs/s in the same run. Then E=1 again
//! with every event checked by the relay against a catalog schema of 20 fields (issue 30), its
//! rate beside the unchecked run's, and what one compiled schema costs per event in-process.

use super::{kurir_concurrency, produce, result, Ctx, Pace, Rig, Via};
use crate::db::Backend;
use crate::report::ScenarioResult;
use crate::stats::Deliveries;

/// Events per application transaction.
pub const TX_SIZE: usize = 10;
/// Concurrent application connections.
pub const PRODUCERS: usize = 8;

/// One run per endpoint count.
pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<ScenarioResult>> {
    let counts = ctx.sizes.endpoints.map_or(vec![1, 10], |e| vec![e]);
    let mut out = Vec::new();
    let mut unchecked = None;
    for e in counts {
        let r = one(ctx, ctx.sizes.events, e).await?;
        if e == 1 {
            unchecked = r.get("deliveries_per_s");
            ctx.shared.lock().unwrap().throughput_one = unchecked;
        }
        out.push(r);
    }
    if let Some(unchecked) = unchecked {
        out.push(checked(ctx, unchecked).await?);
    }
    Ok(out)
}

/// `events` events to `endpoints` fast endpoints.
pub async fn one(ctx: &Ctx, events: usize, endpoints: usize) -> anyhow::Result<ScenarioResult> {
    one_with(ctx, events, endpoints, None).await
}

/// A JSON Schema of 20 fields for the benchmark's `order.paid` payload ([`crate::db::PAYLOAD`]):
/// its ten values required and typed, ten more optional ones declared, as a real contract has.
pub fn order_paid_schema() -> serde_json::Value {
    serde_json::json!({
        "type": "object",
        "required": ["order_id", "customer_id", "total", "currency", "status", "items"],
        "properties": {
            "order_id": {"type": "string", "pattern": "^[0-9]+$"},
            "customer_id": {"type": "string", "minLength": 1},
            "total": {"type": "integer", "minimum": 0},
            "currency": {"type": "string", "enum": ["IDR", "USD", "SGD"]},
            "status": {"type": "string", "enum": ["paid", "refunded"]},
            "items": {
                "type": "array", "minItems": 1,
                "items": {
                    "type": "object", "required": ["sku", "qty", "price"],
                    "properties": {
                        "sku": {"type": "string", "maxLength": 64},
                        "qty": {"type": "integer", "minimum": 1},
                        "price": {"type": "integer", "minimum": 0}
                    }
                }
            },
            "paid_at": {"type": "string", "format": "date-time"},
            "note": {"type": "string", "maxLength": 500},
            "coupon": {"type": ["string", "null"]},
            "discount": {"type": "integer", "minimum": 0},
            "tax": {"type": "integer", "minimum": 0},
            "shipping_fee": {"type": "integer", "minimum": 0},
            "channel": {"type": "string", "enum": ["web", "app", "pos"]},
            "store_id": {"type": "string"},
            "email": {"type": "string", "format": "email"},
            "loyalty_points": {"type": "integer"}
        }
    })
}

/// E=1 with every event checked against [`order_paid_schema`], side by side with the
/// unchecked run's `unchecked` deliveries/s; and the in-process cost of one check.
async fn checked(ctx: &Ctx, unchecked: f64) -> anyhow::Result<ScenarioResult> {
    let mut r = one_with(ctx, ctx.sizes.events, 1, Some(order_paid_schema())).await?;
    let rate = r.get("deliveries_per_s").unwrap_or(0.0);
    r.metric("unchecked_deliveries_per_s", unchecked, "/s");
    r.metric("ratio_to_unchecked", rate / unchecked, "");
    r.at_least(
        "ratio to the run without a catalog",
        rate / unchecked,
        0.9,
        "",
    );
    r.metric("schema_check_us_per_event", check_cost_us(), "us");
    r.notes.push(
        "every event checked by the relay against a 20-field JSON Schema (KURIR_EVENT_CATALOG=open); \
         schema_check_us_per_event: parsing the payload and checking it, in this process"
            .to_owned(),
    );
    Ok(r)
}

/// Microseconds to parse the benchmark payload and check it against the compiled schema, as the
/// relay does for each event (the mean of 20,000).
fn check_cost_us() -> f64 {
    let checks =
        kurir::catalog::schema::compile(&order_paid_schema()).expect("the schema compiles");
    let rounds = 20_000;
    let started = std::time::Instant::now();
    let mut passed = 0;
    for _ in 0..rounds {
        let data: serde_json::Value = serde_json::from_str(crate::db::PAYLOAD).expect("JSON");
        passed += usize::from(checks.passes(&data));
    }
    assert_eq!(passed, rounds, "the benchmark payload passes its schema");
    started.elapsed().as_secs_f64() * 1e6 / rounds as f64
}

/// [`one`], with `schema` as the catalog's schema of the benchmark's event type.
async fn one_with(
    ctx: &Ctx,
    events: usize,
    endpoints: usize,
    schema: Option<serde_json::Value>,
) -> anyhow::Result<ScenarioResult> {
    let concurrency = kurir_concurrency(endpoints);
    let raw = ctx.raw_posts(concurrency).await?;
    let label = match schema {
        Some(_) => format!("E={endpoints} schema"),
        None => format!("E={endpoints}"),
    };
    let mut r = result("throughput", label);
    let base = ctx.events(events);
    let paths: Vec<String> = (0..endpoints).map(|k| format!("e/{k}")).collect();
    let mut rig = Rig::new(ctx, base, events, &paths).await?;
    let base_url = rig.start_kurir(ctx).await?;
    if let Some(schema) = schema {
        put_schema(&base_url, schema).await?;
    }
    let cpu_start = crate::machine::machine_cpu_ticks();
    let pace = Pace {
        tx_size: TX_SIZE,
        producers: PRODUCERS,
        rate: None,
    };
    let enqueue_rate = produce(&rig.app, &Via::Rust, &rig.recorder, base, events, pace).await?;
    let expected = (events * endpoints) as u64;
    rig.wait_or_note(&mut r, expected, ctx.sizes.patience).await;
    r.record_busy(cpu_start);
    let d = Deliveries::collect(&rig.recorder, 0..endpoints);
    let rate = d.end_to_end_rate();
    let lat = d.latency();
    r.metric("events", events as f64, "");
    r.metric("deliveries", d.received as f64, "");
    r.metric("duplicates", rig.recorder.duplicates() as f64, "");
    r.metric("stray_requests", rig.recorder.stray() as f64, "");
    r.metric("enqueue_events_per_s", enqueue_rate, "/s");
    r.metric("deliveries_per_s", rate, "/s");
    r.metric("latency_p50", lat.p50, "ms");
    r.metric("latency_p90", lat.p90, "ms");
    r.metric("latency_p99", lat.p99, "ms");
    r.metric("latency_max", lat.max, "ms");
    r.metric("raw_posts_per_s", raw, "/s");
    r.metric("ratio_to_raw_posts", rate / raw, "");
    let goal = match ctx.backend {
        // The issue set no goal of its own for MySQL: PostgreSQL's, the other shared server's.
        Backend::Postgres | Backend::Mysql => 10_000.0,
        Backend::Sqlite => 15_000.0,
    };
    r.at_least("deliveries/s", rate, goal, "/s");
    r.at_least("ratio to raw POSTs/s", rate / raw, 0.20, "");
    r.notes.push(format!(
        "{events} events in transactions of {TX_SIZE} from {PRODUCERS} connections; kurir's concurrency here is {concurrency}"
    ));
    r.rate_series = d.rate_series(d.first_commit, 0.25);
    r.latency_cdf = crate::stats::cdf(&d.latencies);
    rig.finish(&mut r, d.received).await?;
    r.load_end = crate::machine::load_average();
    Ok(r)
}

/// Writes the catalog entry of the benchmark's event type through kurir's API.
async fn put_schema(base_url: &str, schema: serde_json::Value) -> anyhow::Result<()> {
    let example: serde_json::Value = serde_json::from_str(crate::db::PAYLOAD)?;
    let body = serde_json::json!({"schema": schema, "examples": [example]});
    let resp = reqwest::Client::new()
        .put(format!(
            "{base_url}/v1/event-types/{}/versions/1",
            crate::db::EVENT_TYPE
        ))
        .bearer_auth(crate::child::ADMIN_TOKEN)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await?;
    anyhow::ensure!(
        resp.status().is_success(),
        "PUT of the catalog entry answered {}: {}",
        resp.status(),
        resp.text().await.unwrap_or_default()
    );
    Ok(())
}
