//! The subscriber's endpoints: the list with each one's health over the last hour (success
//! ratio, last error, circuit state, as the dashboard shows them), adding one with event types
//! chosen from the catalog, one endpoint's page with its edit, disable or enable and delete
//! controls, and its signing secret: revealed on a click (a POST, never in a page a cache could
//! keep), rotated with the grace period shown.
//!
//! Every read and change goes through the admin API's endpoint handlers as the visitor's actor,
//! which reaches only the subscriber's endpoints: another's id answers exactly as a missing one.
//! A form is checked against the API route its handler calls ([`Visitor::check`]), so a
//! read-only session is refused every change (403) whether or not a page showed the control.

use askama::Template;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::error::PortalError;
use super::session::Visitor;
use super::view::Chrome;
use crate::api::endpoints::{
    self as api, CreateEndpoint, EndpointView, ListEndpoints, RotateSecret, UpdateEndpoint,
    DEFAULT_GRACE_PERIOD_SECONDS,
};
use crate::api::error::ApiError;
use crate::api::extract::{ApiJson, ApiPath, ApiQuery};
use crate::api::state::AppState;
use crate::ui::endpoints::Health;
use crate::ui::view;

/// The grace periods a rotation offers: `(seconds, label)`.
const GRACE_PERIODS: [(u64, &str); 4] = [
    (0, "none: the old secret stops signing at once"),
    (3600, "1 hour"),
    (DEFAULT_GRACE_PERIOD_SECONDS, "24 hours"),
    (7 * 86_400, "7 days"),
];

/// A form's fields as sent, repeated ones (the event type checkboxes) kept in order.
struct Fields(Vec<(String, String)>);

impl Fields {
    fn parse(body: &[u8]) -> Self {
        Self(url::form_urlencoded::parse(body).into_owned().collect())
    }

    /// The first value of `name`, trimmed; `None` when absent or blank.
    fn one(&self, name: &str) -> Option<String> {
        let value = self.0.iter().find(|(k, _)| k == name)?.1.trim();
        (!value.is_empty()).then(|| value.to_owned())
    }

    /// Every non-blank value of `name`.
    fn all(&self, name: &str) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, v)| k == name && !v.trim().is_empty())
            .map(|(_, v)| v.trim().to_owned())
            .collect()
    }

    fn csrf(&self) -> String {
        self.one("csrf").unwrap_or_default()
    }
}

/// One event type offered as a checkbox.
struct TypeChoice {
    name: String,
    description: String,
    checked: bool,
}

/// The checkboxes: every type the subscriber may receive ([`super::event_types::receivable`],
/// its newest version's description), then every pattern of `chosen` the catalog lacks (a
/// wildcard, say), so saving keeps it.
async fn type_choices(state: &AppState, chosen: &[String]) -> Result<Vec<TypeChoice>, PortalError> {
    let mut choices: Vec<TypeChoice> = Vec::new();
    for entry in super::event_types::receivable(state).await? {
        match choices.iter_mut().find(|c| c.name == entry.event_type) {
            // Entries come in (type, version) order: a later one is newer.
            Some(c) => c.description = entry.spec.description,
            None => choices.push(TypeChoice {
                checked: chosen.contains(&entry.event_type),
                name: entry.event_type,
                description: entry.spec.description,
            }),
        }
    }
    for pattern in chosen {
        if !choices.iter().any(|c| &c.name == pattern) {
            choices.push(TypeChoice {
                name: pattern.clone(),
                description: String::new(),
                checked: true,
            });
        }
    }
    Ok(choices)
}

async fn health_of(
    state: &AppState,
) -> Result<Vec<crate::store::activity::EndpointHealth>, PortalError> {
    let since = state.store.clock().now() - chrono::Duration::hours(1);
    Ok(state.store.endpoint_health(since).await?)
}

#[derive(Template)]
#[template(path = "portal/endpoints.html")]
struct ListPage {
    chrome: Chrome,
    rows: Vec<(EndpointView, Health)>,
    next: Option<String>,
    first: bool,
    deleted: bool,
}

impl ListPage {
    /// `url` for its cell: escaped, breakable after each "/" and "." (`<wbr>`). The portal's
    /// stylesheet shows it whole, wrapped there, rather than cut to its first characters as in
    /// the dashboard's long lists: a subscriber tells its few endpoints apart by URL, and a
    /// phone shows no `title`.
    fn url_wrapped(&self, url: &str) -> String {
        view::url_breaks(url).replace('.', ".<wbr>")
    }
}

#[derive(Default, Deserialize)]
struct ListQuery {
    cursor: Option<String>,
    deleted: Option<String>,
}

async fn list(
    State(state): State<AppState>,
    visitor: Visitor,
    Query(q): Query<ListQuery>,
) -> Result<Response, PortalError> {
    let query = ListEndpoints {
        cursor: view::given(&q.cursor),
        limit: None,
        subscriber_id: None,
    };
    let actor = Extension(visitor.actor().clone());
    let page = api::list(State(state.clone()), actor, ApiQuery(query))
        .await?
        .0;
    let health = health_of(&state).await?;
    let rows = page
        .data
        .into_iter()
        .map(|e| {
            let h = Health::of(health.iter().find(|h| h.endpoint_id == e.id));
            (e, h)
        })
        .collect();
    super::render(&ListPage {
        chrome: Chrome::new(&state, &visitor, "endpoints", "Endpoints").await?,
        rows,
        next: page
            .next_cursor
            .map(|c| format!("/portal/endpoints?cursor={}", view::enc(&c))),
        first: q.cursor.is_none(),
        deleted: q.deleted.is_some(),
    })
}

#[derive(Template)]
#[template(path = "portal/endpoint_new.html")]
struct NewPage {
    chrome: Chrome,
    types: Vec<TypeChoice>,
    url: String,
    description: String,
    error: Option<String>,
}

async fn new_form(
    State(state): State<AppState>,
    visitor: Visitor,
) -> Result<Response, PortalError> {
    visitor.allow(&Method::POST, "/endpoints")?;
    super::render(&NewPage {
        chrome: Chrome::new(&state, &visitor, "endpoints", "New endpoint").await?,
        types: type_choices(&state, &[]).await?,
        url: String::new(),
        description: String::new(),
        error: None,
    })
}

/// Whether `e` is an answer to show beside the form (bad input), not a failure of the page.
fn input_error(e: &ApiError) -> bool {
    matches!(
        e,
        ApiError::InvalidField { .. }
            | ApiError::InvalidRequest(_)
            | ApiError::Unprocessable { .. }
    )
}

async fn create(
    State(state): State<AppState>,
    visitor: Visitor,
    body: Bytes,
) -> Result<Response, PortalError> {
    let f = Fields::parse(&body);
    visitor.check(&f.csrf(), &Method::POST, "/endpoints")?;
    let request = CreateEndpoint::basic(
        f.one("url").unwrap_or_default(),
        f.one("description").unwrap_or_default(),
        f.all("event_types"),
    );
    let actor = Extension(visitor.actor().clone());
    match api::create(State(state.clone()), actor, ApiJson(request)).await {
        Ok((_, created)) => {
            tracing::info!(endpoint_id = %created.id, subscriber_id = %visitor.subscriber_id(),
                via = "portal", "endpoint created in the portal");
            Ok(
                Redirect::to(&format!("/portal/endpoints/{}?created=1", created.0.id))
                    .into_response(),
            )
        }
        Err(e) if input_error(&e) => {
            let mut page = super::render(&NewPage {
                chrome: Chrome::new(&state, &visitor, "endpoints", "New endpoint").await?,
                types: type_choices(&state, &f.all("event_types")).await?,
                url: f.one("url").unwrap_or_default(),
                description: f.one("description").unwrap_or_default(),
                error: Some(e.to_string()),
            })?;
            *page.status_mut() = e.status();
            Ok(page)
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(Template)]
#[template(path = "portal/endpoint.html")]
struct EndpointPage {
    chrome: Chrome,
    e: EndpointView,
    health: Health,
    types: Vec<TypeChoice>,
    /// What just happened, for the notice at the top.
    done: Option<&'static str>,
    /// A form's error, shown beside it.
    error: Option<String>,
    /// The signing secret, after a reveal or a rotation.
    secret: Option<String>,
    grace_periods: &'static [(u64, &'static str)],
}

impl EndpointPage {
    /// When the rotated-out secrets that still sign stop signing.
    fn previous_until(&self) -> Vec<String> {
        self.e
            .previous_secrets_expire_at
            .iter()
            .map(|t: &DateTime<Utc>| view::time(t))
            .collect()
    }
}

#[derive(Default, Deserialize)]
struct ShowQuery {
    created: Option<String>,
    saved: Option<String>,
    enabled: Option<String>,
    disabled: Option<String>,
}

impl ShowQuery {
    fn done(&self) -> Option<&'static str> {
        [
            (
                &self.created,
                "Endpoint added. Reveal its signing secret below to verify what it receives.",
            ),
            (&self.saved, "Changes saved."),
            (&self.enabled, "Endpoint enabled: deliveries resume."),
            (
                &self.disabled,
                "Endpoint disabled: its deliveries wait until you enable it again.",
            ),
        ]
        .into_iter()
        .find_map(|(flag, text)| flag.is_some().then_some(text))
    }
}

/// The endpoint `id` as the visitor reaches it (404 as a missing one otherwise).
async fn reach(
    state: &AppState,
    visitor: &Visitor,
    id: String,
) -> Result<EndpointView, PortalError> {
    let actor = Extension(visitor.actor().clone());
    Ok(api::show(State(state.clone()), actor, ApiPath(id)).await?.0)
}

async fn endpoint_page(
    state: &AppState,
    visitor: &Visitor,
    e: EndpointView,
    done: Option<&'static str>,
    error: Option<String>,
    secret: Option<String>,
) -> Result<Response, PortalError> {
    let health = health_of(state).await?;
    let health = Health::of(health.iter().find(|h| h.endpoint_id == e.id));
    let types = type_choices(state, &e.event_types).await?;
    super::render(&EndpointPage {
        chrome: Chrome::new(state, visitor, "endpoints", e.url.clone()).await?,
        e,
        health,
        types,
        done,
        error,
        secret,
        grace_periods: &GRACE_PERIODS,
    })
}

async fn show(
    State(state): State<AppState>,
    visitor: Visitor,
    Path(id): Path<String>,
    Query(q): Query<ShowQuery>,
) -> Result<Response, PortalError> {
    let e = reach(&state, &visitor, id).await?;
    endpoint_page(&state, &visitor, e, q.done(), None, None).await
}

/// Calls the API's `PATCH /v1/endpoints/{id}` as the visitor.
async fn patch(
    state: &AppState,
    visitor: &Visitor,
    id: &str,
    change: UpdateEndpoint,
) -> Result<EndpointView, ApiError> {
    let actor = Extension(visitor.actor().clone());
    api::update(
        State(state.clone()),
        actor,
        ApiPath(id.to_owned()),
        ApiJson(change),
    )
    .await
    .map(|j| j.0)
}

/// Saves the URL, description and event types.
async fn update(
    State(state): State<AppState>,
    visitor: Visitor,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, PortalError> {
    let f = Fields::parse(&body);
    visitor.check(&f.csrf(), &Method::PATCH, "/endpoints/{id}")?;
    let change = UpdateEndpoint {
        url: Some(f.one("url").unwrap_or_default()),
        description: Some(f.one("description").unwrap_or_default()),
        event_types: Some(f.all("event_types")),
        ..UpdateEndpoint::default()
    };
    match patch(&state, &visitor, &id, change).await {
        Ok(e) => {
            tracing::info!(endpoint_id = %e.id, subscriber_id = %visitor.subscriber_id(),
                via = "portal", "endpoint changed in the portal");
            Ok(Redirect::to(&format!("/portal/endpoints/{}?saved=1", e.id)).into_response())
        }
        Err(err) if input_error(&err) => {
            let e = reach(&state, &visitor, id).await?;
            let status = err.status();
            let mut page =
                endpoint_page(&state, &visitor, e, None, Some(err.to_string()), None).await?;
            *page.status_mut() = status;
            Ok(page)
        }
        Err(err) => Err(err.into()),
    }
}

/// Disables or enables the endpoint.
async fn set_enabled(
    State(state): State<AppState>,
    visitor: Visitor,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, PortalError> {
    let f = Fields::parse(&body);
    visitor.check(&f.csrf(), &Method::PATCH, "/endpoints/{id}")?;
    let enabled = f.one("enabled").as_deref() == Some("true");
    let change = UpdateEndpoint {
        enabled: Some(enabled),
        disabled_reason: (!enabled).then(|| "disabled in the subscriber portal".to_owned()),
        ..UpdateEndpoint::default()
    };
    let e = patch(&state, &visitor, &id, change).await?;
    tracing::info!(endpoint_id = %e.id, enabled, subscriber_id = %visitor.subscriber_id(),
        via = "portal", "endpoint {} in the portal", if enabled { "enabled" } else { "disabled" });
    let flag = if enabled { "enabled" } else { "disabled" };
    Ok(Redirect::to(&format!("/portal/endpoints/{}?{flag}=1", e.id)).into_response())
}

#[derive(Template)]
#[template(path = "portal/endpoint_delete.html")]
struct DeletePage {
    chrome: Chrome,
    e: EndpointView,
}

/// Asks before deleting: it cannot be undone.
async fn confirm_delete(
    State(state): State<AppState>,
    visitor: Visitor,
    Path(id): Path<String>,
) -> Result<Response, PortalError> {
    visitor.allow(&Method::DELETE, "/endpoints/{id}")?;
    let e = reach(&state, &visitor, id).await?;
    super::render(&DeletePage {
        chrome: Chrome::new(&state, &visitor, "endpoints", "Delete endpoint").await?,
        e,
    })
}

async fn delete(
    State(state): State<AppState>,
    visitor: Visitor,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, PortalError> {
    let f = Fields::parse(&body);
    visitor.check(&f.csrf(), &Method::DELETE, "/endpoints/{id}")?;
    let actor = Extension(visitor.actor().clone());
    api::delete(State(state.clone()), actor, ApiPath(id)).await?;
    Ok(Redirect::to("/portal/endpoints?deleted=1").into_response())
}

#[derive(Template)]
#[template(path = "portal/secret.html")]
struct SecretFragment {
    /// The secret (`s`, as the endpoint page's include names it).
    s: String,
}

/// Shows the signing secret: to a session that may change things only (a read-only session
/// never sees a secret), on a POST, in an answer no cache keeps ([`super::headers`]).
async fn reveal(
    State(state): State<AppState>,
    visitor: Visitor,
    headers: HeaderMap,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, PortalError> {
    let f = Fields::parse(&body);
    // Whoever may rotate the secret may read it; nobody else.
    visitor.check(&f.csrf(), &Method::POST, "/endpoints/{id}/rotate-secret")?;
    let endpoint = api::reached(&state, visitor.actor(), &id).await?;
    let secret = endpoint.secret.expose().to_owned();
    tracing::info!(endpoint_id = %endpoint.id, subscriber_id = %visitor.subscriber_id(),
        via = "portal", "signing secret revealed in the portal");
    if super::is_htmx(&headers) {
        return super::render(&SecretFragment { s: secret });
    }
    let e = reach(&state, &visitor, id).await?;
    endpoint_page(&state, &visitor, e, None, None, Some(secret)).await
}

/// Rotates the signing secret with the chosen grace period, and shows the new one.
async fn rotate(
    State(state): State<AppState>,
    visitor: Visitor,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, PortalError> {
    let f = Fields::parse(&body);
    visitor.check(&f.csrf(), &Method::POST, "/endpoints/{id}/rotate-secret")?;
    let grace = match f.one("grace_period_seconds") {
        None => DEFAULT_GRACE_PERIOD_SECONDS,
        Some(text) => text.parse().map_err(|_| {
            ApiError::field(
                "grace_period_seconds",
                format!("'{text}' is not a number of seconds"),
            )
        })?,
    };
    let request = RotateSecret {
        grace_period_seconds: Some(grace),
        secret: None,
    };
    let actor = Extension(visitor.actor().clone());
    let mut e = api::rotate_secret(
        State(state.clone()),
        actor,
        ApiPath(id),
        Some(ApiJson(request)),
    )
    .await?
    .0;
    let secret = e.secret.take().map(crate::redact::Sensitive::into_inner);
    tracing::info!(endpoint_id = %e.id, grace_period_seconds = grace,
        subscriber_id = %visitor.subscriber_id(), via = "portal", "signing secret rotated in the portal");
    endpoint_page(
        &state,
        &visitor,
        e,
        Some("Signing secret rotated."),
        None,
        secret,
    )
    .await
}

/// The endpoint pages' routes.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/portal/endpoints", get(list).post(create))
        .route("/portal/endpoints/new", get(new_form))
        .route("/portal/endpoints/{id}", get(show).post(update))
        .route("/portal/endpoints/{id}/enabled", post(set_enabled))
        .route(
            "/portal/endpoints/{id}/delete",
            get(confirm_delete).post(delete),
        )
        .route("/portal/endpoints/{id}/secret", post(reveal))
        .route("/portal/endpoints/{id}/rotate", post(rotate))
}
