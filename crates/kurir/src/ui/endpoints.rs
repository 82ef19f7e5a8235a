//! Endpoints: the list, oldest first and paged, filtered by subscriber, with each one's health over the last hour, creating one, and one
//! endpoint's page with its actions (edit, change its delivery settings, disable or enable,
//! rotate the secret, send a test event, delete it). Every action goes through the admin API's
//! own handler.

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use chrono::Duration;
use serde::Deserialize;

use super::error::UiError;
use super::session::Session;
use super::view::{self, Chrome};
use crate::access::Action;
use crate::api::endpoints::{
    self as api, CreateEndpoint, EndpointView, ListEndpoints, RotateSecret, UpdateEndpoint,
};
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::api::state::AppState;
use crate::probe::TestResult;
use crate::store::activity::EndpointHealth;

/// One endpoint's health, ready to show (here, on a subscriber's page, and in the subscriber
/// portal).
pub(crate) struct Health {
    pub(crate) attempts: i64,
    pub(crate) success: String,
    pub(crate) timeouts: String,
    pub(crate) p95: String,
    pub(crate) last_error: String,
    /// When the last failed attempt started.
    pub(crate) last_error_at: Option<chrono::DateTime<chrono::Utc>>,
    /// Whether an attempt succeeded after it: the error is past.
    pub(crate) recovered: bool,
    pub(crate) good: bool,
}

impl Health {
    pub(crate) fn of(h: Option<&EndpointHealth>) -> Self {
        let Some(h) = h else {
            return Self {
                attempts: 0,
                success: "–".into(),
                timeouts: "–".into(),
                p95: "–".into(),
                last_error: String::new(),
                last_error_at: None,
                recovered: false,
                good: true,
            };
        };
        Self {
            attempts: h.attempts,
            success: view::percent(h.delivered, h.attempts),
            timeouts: view::percent(h.timeouts, h.attempts),
            p95: h
                .duration
                .quantile(0.95)
                .map_or("–".into(), |ms| view::seconds(ms / 1000.0)),
            last_error: h
                .last_error
                .as_deref()
                .map(|e| view::preview(e, 120))
                .unwrap_or_default(),
            last_error_at: h.last_error_at,
            recovered: h.recovered,
            good: h.delivered * 10 >= h.attempts * 9,
        }
    }
}

#[derive(Template)]
#[template(path = "endpoints.html")]
struct ListPage {
    chrome: Chrome,
    q: ListQuery,
    rows: String,
}

/// The rows and what depends on their filter (the pager), so that an htmx swap of the rows
/// never leaves a link to another filter beside them.
#[derive(Template)]
#[template(path = "endpoints_rows.html")]
struct Rows {
    rows: Vec<(EndpointView, Health)>,
    /// The link to the next page (newer endpoints), when there is one.
    next: Option<String>,
    /// Whether this is the first page: an empty one then means no endpoint at all.
    first: bool,
    /// The first page of the same filter.
    first_page: String,
    /// The subscriber filtered by.
    subscriber_id: Option<String>,
    /// The subscriber filtered by, when kurir has none of that id (no endpoint then).
    unknown_subscriber: Option<String>,
    /// Whether the session may create an endpoint.
    can_change: bool,
}

#[derive(Template)]
#[template(path = "endpoint_new.html")]
struct NewPage {
    chrome: Chrome,
}

#[derive(Template)]
#[template(path = "endpoint.html")]
struct EndpointPage {
    chrome: Chrome,
    e: EndpointView,
    health: Health,
    event_types: String,
    secret: Option<String>,
    test: Option<TestResult>,
}

/// An override's value with its unit, or that the global setting applies.
fn setting<T: std::fmt::Display>(value: Option<T>, unit: &str) -> String {
    value.map_or_else(|| "global setting".to_owned(), |v| format!("{v}{unit}"))
}

fn field<T: std::fmt::Display>(value: Option<T>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

impl EndpointPage {
    /// What the endpoint's delivery settings are: `(label, value)`.
    fn settings(&self) -> Vec<(&'static str, String)> {
        let e = &self.e;
        vec![
            ("Connect timeout", setting(e.connect_timeout_ms, " ms")),
            ("Response timeout", setting(e.request_timeout_ms, " ms")),
            (
                "Attempts before dead letter",
                setting(e.retry_max_attempts, ""),
            ),
            (
                "First retry delay",
                setting(e.retry_initial_delay_ms, " ms"),
            ),
            ("Longest retry delay", setting(e.retry_max_delay_ms, " ms")),
            (
                "Circuit opens after",
                setting(e.circuit_failure_threshold, " failures in a row"),
            ),
            ("Circuit cool-down", setting(e.circuit_cooldown_ms, " ms")),
            (
                "Rate limit",
                e.rate_limit_per_second
                    .map_or("none".into(), |r| format!("{r} / s")),
            ),
            (
                "Concurrent requests per process",
                e.max_in_flight.to_string(),
            ),
        ]
    }

    /// The settings form's number fields: `(name, label, value)`.
    fn setting_fields(&self) -> Vec<(&'static str, &'static str, String)> {
        let e = &self.e;
        vec![
            (
                "connect_timeout_ms",
                "Connect timeout (ms)",
                field(e.connect_timeout_ms),
            ),
            (
                "request_timeout_ms",
                "Response timeout (ms)",
                field(e.request_timeout_ms),
            ),
            (
                "retry_max_attempts",
                "Attempts before dead letter",
                field(e.retry_max_attempts),
            ),
            (
                "retry_initial_delay_ms",
                "First retry delay (ms)",
                field(e.retry_initial_delay_ms),
            ),
            (
                "retry_max_delay_ms",
                "Longest retry delay (ms)",
                field(e.retry_max_delay_ms),
            ),
            (
                "circuit_failure_threshold",
                "Circuit opens after this many failures in a row",
                field(e.circuit_failure_threshold),
            ),
            (
                "circuit_cooldown_ms",
                "Circuit cool-down (ms)",
                field(e.circuit_cooldown_ms),
            ),
            (
                "rate_limit_per_second",
                "Rate limit (requests per second; empty: none)",
                field(e.rate_limit_per_second),
            ),
            (
                "max_in_flight",
                "Concurrent requests per process",
                e.max_in_flight.to_string(),
            ),
        ]
    }
}

async fn health_since_an_hour(state: &AppState) -> Result<Vec<EndpointHealth>, UiError> {
    Ok(state
        .store
        .endpoint_health(state.store.clock().now() - Duration::hours(1))
        .await?)
}

/// The query of the endpoints page: which subscriber's, which page.
#[derive(Default, Deserialize)]
struct ListQuery {
    subscriber_id: Option<String>,
    cursor: Option<String>,
}

async fn list(
    session: Session,
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(q): Query<ListQuery>,
) -> Result<Response, UiError> {
    let subscriber_id = view::given(&q.subscriber_id);
    let query = ListEndpoints {
        cursor: view::given(&q.cursor),
        limit: None,
        subscriber_id: subscriber_id.clone(),
    };
    let actor = Extension(session.actor().clone());
    let page = api::list(State(state.clone()), actor, ApiQuery(query))
        .await?
        .0;
    let unknown_subscriber =
        super::subscriber_filter::unknown(&state, &session, &q.subscriber_id, page.data.is_empty())
            .await?;
    let health = health_since_an_hour(&state).await?;
    let rows = page
        .data
        .into_iter()
        .map(|e| {
            let h = Health::of(health.iter().find(|h| h.endpoint_id == e.id));
            (e, h)
        })
        .collect();
    let first_page = match &subscriber_id {
        Some(id) => format!("/ui/endpoints?subscriber_id={}", view::enc(id)),
        None => "/ui/endpoints".to_owned(),
    };
    let next = page.next_cursor.map(|c| {
        let sep = if subscriber_id.is_some() { '&' } else { '?' };
        format!("{first_page}{sep}cursor={}", view::enc(&c))
    });
    let rows = Rows {
        rows,
        next,
        first: view::given(&q.cursor).is_none(),
        first_page,
        subscriber_id,
        unknown_subscriber,
        can_change: session.may(Action::Change),
    };
    let page = ListPage {
        chrome: Chrome::new(&session, "endpoints", "Endpoints"),
        q,
        rows: rows.render().map_err(super::error::internal)?,
    };
    super::page_or_rows(&headers, &page, &rows)
}

async fn new_form(session: Session) -> Result<Response, UiError> {
    session.require(Action::Change)?;
    super::render(&NewPage {
        chrome: Chrome::new(&session, "endpoints", "New endpoint"),
    })
}

#[derive(Deserialize)]
struct EndpointForm {
    csrf: String,
    url: Option<String>,
    description: Option<String>,
    event_types: Option<String>,
}

/// `order.*, payment.succeeded` as a list.
fn patterns(text: &Option<String>) -> Vec<String> {
    view::given(text)
        .map(|t| {
            t.split([',', ' ', '\n'])
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

async fn show_page(
    session: &Session,
    state: &AppState,
    e: EndpointView,
    secret: Option<String>,
    test: Option<TestResult>,
) -> Result<Response, UiError> {
    let health = health_since_an_hour(state).await?;
    let health = Health::of(health.iter().find(|h| h.endpoint_id == e.id));
    super::render(&EndpointPage {
        chrome: Chrome::new(session, "endpoints", e.url.clone()),
        event_types: e.event_types.join(", "),
        e,
        health,
        secret,
        test,
    })
}

async fn create(
    session: Session,
    State(state): State<AppState>,
    Form(f): Form<EndpointForm>,
) -> Result<Response, UiError> {
    session.check_csrf(&f.csrf)?;
    let body = CreateEndpoint::basic(
        view::given(&f.url).unwrap_or_default(),
        view::given(&f.description).unwrap_or_default(),
        patterns(&f.event_types),
    );
    let actor = Extension(session.actor().clone());
    let (_, created) = api::create(State(state.clone()), actor, ApiJson(body)).await?;
    let mut e = created.0;
    let secret = e.secret.take().map(crate::redact::Sensitive::into_inner);
    show_page(&session, &state, e, secret, None).await
}

async fn show(
    session: Session,
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    let e = api::show(State(state.clone()), actor_of(&session), ApiPath(id))
        .await?
        .0;
    show_page(&session, &state, e, None, None).await
}

async fn update(
    session: Session,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Form(f): Form<EndpointForm>,
) -> Result<Response, UiError> {
    session.check_csrf(&f.csrf)?;
    let body = UpdateEndpoint {
        url: view::given(&f.url),
        description: Some(view::given(&f.description).unwrap_or_default()),
        event_types: Some(patterns(&f.event_types)),
        ..UpdateEndpoint::default()
    };
    apply(&session, state, id, body).await
}

/// The delivery settings form: every per-endpoint override, empty meaning "the global
/// setting" (a cleared override).
#[derive(Deserialize)]
struct SettingsForm {
    csrf: String,
    connect_timeout_ms: Option<String>,
    request_timeout_ms: Option<String>,
    retry_initial_delay_ms: Option<String>,
    retry_max_delay_ms: Option<String>,
    retry_max_attempts: Option<String>,
    circuit_failure_threshold: Option<String>,
    circuit_cooldown_ms: Option<String>,
    max_in_flight: Option<String>,
    rate_limit_per_second: Option<String>,
    ordering: Option<String>,
    ordering_on_dead_letter: Option<String>,
}

/// A whole number typed in field `name`; `None` when left empty. The API checks the range.
fn number<T: std::str::FromStr>(name: &str, value: &Option<String>) -> Result<Option<T>, UiError> {
    view::given(value)
        .map(|v| {
            v.parse().map_err(|_| {
                UiError::Api(crate::api::error::ApiError::field(
                    name,
                    format!("'{v}' is not a whole number"),
                ))
            })
        })
        .transpose()
}

/// A choice of field `name` (`ordering`, `ordering_on_dead_letter`) as the API spells it.
fn choice<T: serde::de::DeserializeOwned>(
    name: &str,
    value: &Option<String>,
) -> Result<Option<T>, UiError> {
    view::given(value)
        .map(|v| {
            serde_json::from_value(serde_json::Value::String(v.clone())).map_err(|_| {
                UiError::Api(crate::api::error::ApiError::field(
                    name,
                    format!("unknown value '{v}'"),
                ))
            })
        })
        .transpose()
}

impl SettingsForm {
    /// The change: each override as typed, an empty one cleared (back to the global setting).
    fn update(&self) -> Result<UpdateEndpoint, UiError> {
        Ok(UpdateEndpoint {
            connect_timeout_ms: Some(number("connect_timeout_ms", &self.connect_timeout_ms)?),
            request_timeout_ms: Some(number("request_timeout_ms", &self.request_timeout_ms)?),
            retry_initial_delay_ms: Some(number(
                "retry_initial_delay_ms",
                &self.retry_initial_delay_ms,
            )?),
            retry_max_delay_ms: Some(number("retry_max_delay_ms", &self.retry_max_delay_ms)?),
            retry_max_attempts: Some(number("retry_max_attempts", &self.retry_max_attempts)?),
            circuit_failure_threshold: Some(number(
                "circuit_failure_threshold",
                &self.circuit_failure_threshold,
            )?),
            circuit_cooldown_ms: Some(number("circuit_cooldown_ms", &self.circuit_cooldown_ms)?),
            // Not an override: it always has a value, so an empty field leaves it.
            max_in_flight: number("max_in_flight", &self.max_in_flight)?,
            rate_limit_per_second: Some(number(
                "rate_limit_per_second",
                &self.rate_limit_per_second,
            )?),
            ordering: choice("ordering", &self.ordering)?,
            ordering_on_dead_letter: choice(
                "ordering_on_dead_letter",
                &self.ordering_on_dead_letter,
            )?,
            ..UpdateEndpoint::default()
        })
    }
}

/// Saves the delivery settings, through the API's update.
async fn settings(
    session: Session,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Form(f): Form<SettingsForm>,
) -> Result<Response, UiError> {
    session.check_csrf(&f.csrf)?;
    let body = f.update()?;
    tracing::info!(endpoint_id = %id, actor = %session.actor().name, via = %session.actor().via,
        "endpoint delivery settings changed");
    apply(&session, state, id, body).await
}

/// Deletes the endpoint, through the API's delete, then shows the list.
async fn delete(
    session: Session,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Form(f): Form<CsrfForm>,
) -> Result<Response, UiError> {
    session.check_csrf(&f.csrf)?;
    let actor = Extension(session.actor().clone());
    api::delete(State(state), actor, ApiPath(id)).await?;
    Ok(Redirect::to("/ui/endpoints").into_response())
}

#[derive(Deserialize)]
struct EnabledForm {
    csrf: String,
    enabled: String,
    reason: Option<String>,
}

async fn set_enabled(
    session: Session,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Form(f): Form<EnabledForm>,
) -> Result<Response, UiError> {
    session.check_csrf(&f.csrf)?;
    let enabled = f.enabled == "true";
    let body = UpdateEndpoint {
        enabled: Some(enabled),
        disabled_reason: if enabled {
            None
        } else {
            view::given(&f.reason)
        },
        ..UpdateEndpoint::default()
    };
    apply(&session, state, id, body).await
}

#[derive(Deserialize)]
struct CsrfForm {
    csrf: String,
}

#[derive(Deserialize)]
struct CircuitForm {
    csrf: String,
    action: crate::store::breaker::CircuitAction,
}

/// Probe now or close the circuit, through the API's handler (which audits it).
async fn operate_circuit(
    session: Session,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Form(f): Form<CircuitForm>,
) -> Result<Response, UiError> {
    session.check_csrf(&f.csrf)?;
    let body = crate::api::circuit::OperateCircuit { action: f.action };
    let actor = Extension(session.actor().clone());
    let _ = crate::api::circuit::operate(State(state), actor, ApiPath(id.clone()), ApiJson(body))
        .await?;
    Ok(Redirect::to(&format!("/ui/endpoints/{}", view::enc(&id))).into_response())
}

async fn rotate(
    session: Session,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Form(f): Form<CsrfForm>,
) -> Result<Response, UiError> {
    session.check_csrf(&f.csrf)?;
    let mut e = api::rotate_secret(
        State(state.clone()),
        actor_of(&session),
        ApiPath(id),
        Some(ApiJson(RotateSecret::default())),
    )
    .await?
    .0;
    let secret = e.secret.take().map(crate::redact::Sensitive::into_inner);
    show_page(&session, &state, e, secret, None).await
}

async fn test(
    session: Session,
    State(state): State<AppState>,
    Path(id): Path<String>,
    Form(f): Form<CsrfForm>,
) -> Result<Response, UiError> {
    session.check_csrf(&f.csrf)?;
    let result = crate::api::endpoint_test::test(
        State(state.clone()),
        actor_of(&session),
        ApiPath(id.clone()),
    )
    .await?
    .0;
    let e = api::show(State(state.clone()), actor_of(&session), ApiPath(id))
        .await?
        .0;
    show_page(&session, &state, e, None, Some(result)).await
}

/// The session's actor, as the API's handlers take it.
fn actor_of(session: &Session) -> Extension<crate::access::Actor> {
    Extension(session.actor().clone())
}

/// Applies `body` to endpoint `id`, then shows its page.
async fn apply(
    session: &Session,
    state: AppState,
    id: String,
    body: UpdateEndpoint,
) -> Result<Response, UiError> {
    let actor = actor_of(session);
    let _ = api::update(State(state), actor, ApiPath(id.clone()), ApiJson(body)).await?;
    Ok(Redirect::to(&format!("/ui/endpoints/{}", view::enc(&id))).into_response())
}

/// The endpoint pages' routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ui/endpoints", get(list).post(create))
        .route("/ui/endpoints/new", get(new_form))
        .route("/ui/endpoints/{id}", get(show).post(update))
        .route("/ui/endpoints/{id}/enabled", post(set_enabled))
        .route("/ui/endpoints/{id}/rotate", post(rotate))
        .route("/ui/endpoints/{id}/test", post(test))
        .route("/ui/endpoints/{id}/circuit", post(operate_circuit))
        .route("/ui/endpoints/{id}/settings", post(settings))
        .route("/ui/endpoints/{id}/delete", post(delete))
}
