//! The `circuit` of an endpoint as the API shows it: the state of its circuit breaker, shared
//! by every kurir process (`store::breaker`), and the operator's two actions on it,
//! `POST /v1/endpoints/{id}/circuit` (probe now, close) and their audit,
//! `GET /v1/endpoints/{id}/circuit/actions`.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::auth::Actor;
use super::endpoints::{endpoint_id, reached, CircuitView, EndpointView};
use super::error::{ApiError, ErrorBody};
use super::extract::{ApiJson, ApiPath};
use crate::api::state::AppState;
use crate::store::breaker::{CircuitAction, CircuitActionRecord};

/// Body of `POST /v1/endpoints/{id}/circuit`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OperateCircuit {
    /// `probe`: an open circuit's cool-down ends now, so the next delivery due is sent as its
    /// probe (a success closes the circuit). `close`: the circuit closes now, with nothing
    /// counted, and every held delivery is sent.
    pub action: CircuitAction,
}

/// One audited operator action on an endpoint's circuit.
#[derive(Debug, Serialize, ToSchema)]
pub struct CircuitActionView {
    /// `probe` or `close`.
    #[schema(example = "close")]
    pub action: String,
    /// The circuit's state before it (`open` or `half_open`).
    #[schema(example = "open")]
    pub state_before: String,
    /// Who: the token's name (`admin` for the environment's token).
    pub actor: String,
    /// Where from: `api`, `cli` or `dashboard`.
    pub via: String,
    /// When.
    pub created_at: DateTime<Utc>,
}

impl From<CircuitActionRecord> for CircuitActionView {
    fn from(r: CircuitActionRecord) -> Self {
        Self {
            action: r.action,
            state_before: r.state_before,
            actor: r.actor,
            via: r.via,
            created_at: DateTime::from_timestamp_millis(r.created_ms).unwrap_or_default(),
        }
    }
}

/// The newest actions `GET /v1/endpoints/{id}/circuit/actions` answers.
pub const ACTIONS_SHOWN: i64 = 50;

/// Brings a probe forward or closes an endpoint's circuit breaker; audited with the token's
/// name and where the request came from.
#[utoipa::path(post, path = "/v1/endpoints/{id}/circuit", operation_id = "operate_circuit", tag = "endpoints",
    request_body = OperateCircuit,
    params(("id" = String, Path, description = "Endpoint id")),
    responses((status = 200, description = "The endpoint with its circuit as changed", body = EndpointView),
              (status = 400, description = "`action` is not `probe` or `close`", body = ErrorBody),
              (status = 404, description = "No such endpoint", body = ErrorBody),
              (status = 409, description = "Nothing to do (`circuit_closed`: deliveries flow already; `probe_underway`: a probe's outcome is awaited); nothing changed or recorded", body = ErrorBody)))]
pub async fn operate(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(id): ApiPath<String>,
    ApiJson(body): ApiJson<OperateCircuit>,
) -> Result<Json<EndpointView>, ApiError> {
    let eid = endpoint_id(&id)?;
    let endpoint = reached(&state, &actor, &id).await?;
    let circuit = match state
        .store
        .operate_circuit(&eid, body.action, &actor)
        .await?
    {
        Ok(circuit) => circuit,
        Err(refusal) => {
            let code = match refusal {
                kurir_core::breaker::Refusal::Closed => "circuit_closed",
                kurir_core::breaker::Refusal::ProbeUnderway => "probe_underway",
            };
            return Err(ApiError::Conflict {
                code,
                message: refusal.to_string(),
            });
        }
    };
    tracing::info!(endpoint_id = %eid, action = body.action.as_str(), state = circuit.state.as_str(),
        actor = %actor.name, via = %actor.via, "circuit breaker changed by an operator");
    let mut view = EndpointView::new(endpoint, false, state.store.clock().now());
    view.circuit = CircuitView::of(Some(&circuit), view.created_at);
    Ok(Json(view))
}

/// The audit of an endpoint's circuit: who brought a probe forward or closed it, from where,
/// newest first (the newest 50).
#[utoipa::path(get, path = "/v1/endpoints/{id}/circuit/actions", operation_id = "list_circuit_actions", tag = "endpoints",
    params(("id" = String, Path, description = "Endpoint id")),
    responses((status = 200, description = "`{\"data\": [...]}`, newest first, at most 50", body = CircuitActions),
              (status = 404, description = "No such endpoint", body = ErrorBody)))]
pub async fn actions(
    State(state): State<AppState>,
    Extension(actor): Extension<Actor>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<CircuitActions>, ApiError> {
    let eid = endpoint_id(&id)?;
    reached(&state, &actor, &id).await?;
    let rows = state.store.circuit_actions(&eid, ACTIONS_SHOWN).await?;
    Ok(Json(CircuitActions {
        data: rows.into_iter().map(CircuitActionView::from).collect(),
    }))
}

/// The answer of `GET /v1/endpoints/{id}/circuit/actions`.
#[derive(Debug, Serialize, ToSchema)]
pub struct CircuitActions {
    /// The actions, newest first.
    pub data: Vec<CircuitActionView>,
}

/// The routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/endpoints/{id}/circuit", post(operate))
        .route("/endpoints/{id}/circuit/actions", get(actions))
}
