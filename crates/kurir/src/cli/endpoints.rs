//! `kurir endpoints create|list|show|update|rotate-secret|delete`.

use crate::redact::Sensitive;
use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Map, Value};

use super::client::{insert_given, Client, ClientArgs};
use super::output::{self, out};

/// `kurir endpoints …`
#[derive(Debug, Args)]
pub struct EndpointsArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: EndpointsCommand,
    /// Where the admin API is.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Endpoint commands.
#[derive(Debug, Subcommand)]
pub enum EndpointsCommand {
    /// Create an endpoint; prints its secret (shown only now and at rotation).
    Create(EndpointFields),
    /// List the endpoints, oldest first, a page at a time.
    List(ListArgs),
    /// Show one endpoint.
    Show {
        /// Endpoint id.
        id: String,
    },
    /// Change an endpoint.
    Update {
        /// Endpoint id.
        id: String,
        /// Fields to change.
        #[command(flatten)]
        fields: UpdateFields,
    },
    /// Make a new secret current; the old one keeps signing during the grace period.
    RotateSecret {
        /// Endpoint id.
        id: String,
        /// How long the old secret keeps signing, e.g. 24h, 30m, 0s.
        #[arg(long, default_value = "24h", value_parser = humantime::parse_duration)]
        grace: std::time::Duration,
    },
    /// End an open circuit breaker's cool-down now: the next delivery due is sent as its probe
    /// (a success closes it). Audited with the token's name.
    Probe {
        /// Endpoint id.
        id: String,
    },
    /// Close an endpoint's circuit breaker now: every held delivery is sent. Audited with the
    /// token's name.
    CloseCircuit {
        /// Endpoint id.
        id: String,
    },
    /// Send a signed kurir.test event to an endpoint now and show what it answered.
    Test {
        /// Endpoint id.
        id: String,
    },
    /// Delete an endpoint: it receives nothing more, and its deliveries not yet made are
    /// cancelled. Its history (deliveries, attempts, its url) stays until retention
    /// (KURIR_RETENTION) takes it; its secrets and settings go now, for good. To pause it and
    /// keep everything, disable it instead (`kurir endpoints update ID --disable`).
    #[command(
        after_help = "On a terminal, asks for confirmation first; --yes skips the question. \
                      Deleting cannot be undone: its pending deliveries end `cancelled` and are \
                      never replayed. Disabling an endpoint pauses its deliveries and keeps \
                      everything, to enable again later."
    )]
    Delete {
        /// Endpoint id.
        id: String,
        /// Delete without asking.
        #[arg(long)]
        yes: bool,
    },
}

/// Arguments of `endpoints list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only the endpoints of this subscriber (its id). An id kurir does not know is an error, not an
    /// empty list.
    #[arg(long, value_name = "SUBSCRIBER_ID")]
    pub subscriber: Option<String>,
    /// Rows per page (1 to 200).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Continue from a previous page.
    #[arg(long)]
    pub cursor: Option<String>,
}

/// Fields of `endpoints create`.
#[derive(Debug, Args)]
pub struct EndpointFields {
    /// Where events are POSTed (absolute http or https URL).
    #[arg(value_name = "ENDPOINT_URL")]
    pub endpoint_url: String,
    /// Free text for operators.
    #[arg(long)]
    pub description: Option<String>,
    /// Event types to receive (repeat or comma-separate; `*` and `order.*` allowed); all when absent.
    #[arg(long = "event-type", value_delimiter = ',')]
    pub event_types: Vec<String>,
    /// Use this secret instead of a generated one.
    #[arg(long)]
    pub secret: Option<Sensitive>,
    /// Concurrent requests to the endpoint per kurir process.
    #[arg(long)]
    pub max_in_flight: Option<u32>,
    /// Ordered delivery per aggregate.
    #[command(flatten)]
    pub ordering: OrderingFields,
    /// The subscriber it belongs to (its id): it gets only the events addressed to that
    /// subscriber. Absent: your own endpoint, which gets only events addressed to no subscriber.
    #[arg(long, value_name = "SUBSCRIBER_ID")]
    pub subscriber: Option<String>,
}

/// The ordering settings, on create and update.
#[derive(Debug, Args)]
pub struct OrderingFields {
    /// `aggregate`: deliveries of events sharing an aggregate go one at a time, in outbox order.
    #[arg(long, value_parser = ["none", "aggregate"])]
    pub ordering: Option<String>,
    /// With ordering: whether a dead-lettered delivery holds back the rest of its aggregate.
    #[arg(long, value_parser = ["block", "skip"])]
    pub ordering_on_dead_letter: Option<String>,
}

impl OrderingFields {
    fn insert_into(self, body: &mut Map<String, Value>) {
        insert_given(body, "ordering", self.ordering.map(Value::from));
        let policy = self.ordering_on_dead_letter.map(Value::from);
        insert_given(body, "ordering_on_dead_letter", policy);
    }
}

/// Fields of `endpoints update`.
#[derive(Debug, Args)]
pub struct UpdateFields {
    /// New URL of the endpoint (`--url` is the admin API's).
    #[arg(long, value_name = "ENDPOINT_URL")]
    pub endpoint_url: Option<String>,
    /// New description.
    #[arg(long)]
    pub description: Option<String>,
    /// New event types (replaces the list).
    #[arg(long = "event-type", value_delimiter = ',')]
    pub event_types: Option<Vec<String>>,
    /// Enable deliveries.
    #[arg(long, conflicts_with = "disable")]
    pub enable: bool,
    /// Disable deliveries.
    #[arg(long)]
    pub disable: bool,
    /// Why, with --disable.
    #[arg(long, requires = "disable")]
    pub reason: Option<String>,
    /// New per-process concurrency.
    #[arg(long)]
    pub max_in_flight: Option<u32>,
    /// Ordered delivery per aggregate.
    #[command(flatten)]
    pub ordering: OrderingFields,
}

/// Runs an endpoint command.
pub async fn run(args: EndpointsArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client)?;
    let as_json = args.client.json;
    let shown = match args.command {
        EndpointsCommand::Create(f) => {
            client
                .call(Method::POST, "/v1/endpoints", &create_body(f))
                .await?
                .1
        }
        EndpointsCommand::List(l) => {
            let query = [
                ("subscriber_id", l.subscriber.clone()),
                ("limit", l.limit.map(|n| n.to_string())),
                ("cursor", l.cursor),
            ];
            let page = client.get_query("/v1/endpoints", &query).await?;
            client
                .check_filtered(l.subscriber.as_deref(), &page)
                .await?;
            output::shown(&page, as_json, list_table);
            return Ok(());
        }
        EndpointsCommand::Show { id } => client.get(&format!("/v1/endpoints/{id}")).await?,
        EndpointsCommand::Update { id, fields: f } => {
            let path = format!("/v1/endpoints/{id}");
            client.call(Method::PATCH, &path, &update_body(f)).await?.1
        }
        EndpointsCommand::RotateSecret { id, grace } => {
            let body = json!({"grace_period_seconds": grace.as_secs()});
            let path = format!("/v1/endpoints/{id}/rotate-secret");
            client.call(Method::POST, &path, &body).await?.1
        }
        EndpointsCommand::Probe { id } => operate(&client, &id, "probe").await?,
        EndpointsCommand::CloseCircuit { id } => operate(&client, &id, "close").await?,
        EndpointsCommand::Test { id } => return test(&client, &id, as_json).await,
        EndpointsCommand::Delete { id, yes } => {
            if !yes && !confirmed(&id)? {
                anyhow::bail!("endpoint {id} not deleted");
            }
            client
                .call(Method::DELETE, &format!("/v1/endpoints/{id}"), &Value::Null)
                .await?;
            output::deleted("endpoint", &id, as_json);
            return Ok(());
        }
    };
    output::shown(&shown, as_json, show);
    Ok(())
}

/// The body of a create request.
fn create_body(f: EndpointFields) -> Value {
    let mut body = Map::new();
    body.insert("url".into(), json!(f.endpoint_url));
    insert_given(&mut body, "description", f.description.map(Value::from));
    insert_given(
        &mut body,
        "event_types",
        (!f.event_types.is_empty()).then(|| json!(f.event_types)),
    );
    insert_given(&mut body, "secret", f.secret.map(|s| s.into_inner().into()));
    insert_given(&mut body, "max_in_flight", f.max_in_flight.map(Value::from));
    f.ordering.insert_into(&mut body);
    insert_given(&mut body, "subscriber_id", f.subscriber.map(Value::from));
    Value::Object(body)
}

/// The body of an update request: only the fields given.
fn update_body(f: UpdateFields) -> Value {
    let mut body = Map::new();
    insert_given(&mut body, "url", f.endpoint_url.map(Value::from));
    insert_given(&mut body, "description", f.description.map(Value::from));
    insert_given(&mut body, "event_types", f.event_types.map(|t| json!(t)));
    insert_given(
        &mut body,
        "enabled",
        (f.enable || f.disable).then_some(json!(f.enable)),
    );
    insert_given(&mut body, "disabled_reason", f.reason.map(Value::from));
    insert_given(&mut body, "max_in_flight", f.max_in_flight.map(Value::from));
    f.ordering.insert_into(&mut body);
    Value::Object(body)
}

/// `endpoints probe|close-circuit`: the endpoint as changed.
async fn operate(client: &Client, id: &str, action: &str) -> anyhow::Result<Value> {
    let path = format!("/v1/endpoints/{id}/circuit");
    Ok(client
        .call(Method::POST, &path, &json!({ "action": action }))
        .await?
        .1)
}

/// One page of endpoints as a table, and how to get the next page.
fn list_table(page: &Value) {
    let rows: Vec<Vec<String>> = page["data"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|e| {
            let mut row: Vec<String> = ["id", "url", "enabled"]
                .iter()
                .map(|k| output::cell(&e[*k]))
                .collect();
            let c = &e["circuit"];
            row.push(output::circuit(&c["state"], &c["next_probe_at"]));
            row.extend(
                ["event_types", "description"]
                    .iter()
                    .map(|k| output::cell(&e[*k])),
            );
            row
        })
        .collect();
    output::table(
        &[
            "ID",
            "URL",
            "ENABLED",
            "CIRCUIT",
            "EVENT TYPES",
            "DESCRIPTION",
        ],
        &rows,
    );
    output::next_page(page);
}

fn show(e: &Value) {
    output::fields(
        e,
        &[
            "id",
            "url",
            "subscriber_id",
            "description",
            "event_types",
            "enabled",
            "disabled_reason",
            "max_in_flight",
            "rate_limit_per_second",
            "ordering",
            "ordering_on_dead_letter",
            "connect_timeout_ms",
            "request_timeout_ms",
            "retry_initial_delay_ms",
            "retry_max_delay_ms",
            "retry_max_attempts",
            "circuit_failure_threshold",
            "circuit_cooldown_ms",
            "previous_secrets_expire_at",
            "created_at",
            "updated_at",
        ],
    );
    show_circuit(&e["circuit"]);
    if let Some(secret) = e["secret"].as_str() {
        out!("secret: {secret}");
        out!("(configure your receiver with this secret; kurir shows it only now)");
    }
    for warning in e["warnings"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
    {
        out!("warning: {}", output::cell(warning));
    }
}

/// One line for the endpoint's circuit breaker, e.g. `circuit: open since … (5 failures in a
/// row; next probe at …)`.
fn show_circuit(c: &Value) {
    let Some(state) = c["state"].as_str() else {
        return;
    };
    let mut line = format!("circuit: {state} since {}", output::cell(&c["since"]));
    let failures = c["consecutive_failures"].as_u64().unwrap_or(0);
    let mut notes = Vec::new();
    if failures > 0 {
        notes.push(format!("{failures} failures in a row"));
    }
    if let Some(at) = c["next_probe_at"].as_str() {
        notes.push(format!("next probe at {at}"));
    }
    if !notes.is_empty() {
        line.push_str(&format!(" ({})", notes.join("; ")));
    }
    out!("{line}");
}

/// `endpoints test`: sends the test event and shows its answer.
async fn test(client: &Client, id: &str, as_json: bool) -> anyhow::Result<()> {
    let path = format!("/v1/endpoints/{id}/test");
    let (_, result) = client.call(Method::POST, &path, &json!({})).await?;
    if as_json {
        output::json(&result);
    } else {
        show_test(&result);
    }
    Ok(())
}

fn show_test(r: &Value) {
    let outcome = match (r["delivered"].as_bool(), r["status_code"].as_u64()) {
        (Some(true), Some(code)) => format!("delivered: HTTP {code}"),
        (_, Some(code)) => format!("not delivered: HTTP {code}"),
        _ => format!("not delivered: {}", output::cell(&r["error"])),
    };
    out!(
        "{outcome} in {} ms (test event {})",
        output::cell(&r["duration_ms"]),
        output::cell(&r["event_id"])
    );
    if let Some(body) = r["response_body"].as_str().filter(|b| !b.is_empty()) {
        out!("response body: {}", crate::text::preview(body, 200));
    }
}

/// Whether the operator, asked on a terminal, agrees to delete endpoint `id`; `true` without a
/// terminal to ask on (a script decided already).
fn confirmed(id: &str) -> anyhow::Result<bool> {
    use std::io::{BufRead, IsTerminal, Write};
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Ok(true);
    }
    eprint!(
        "Delete endpoint {id}? Its pending deliveries are cancelled; its history stays until \
         retention. Disabling it instead keeps everything. [y/N] "
    );
    std::io::stderr().flush()?;
    let mut answer = String::new();
    stdin.lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}
