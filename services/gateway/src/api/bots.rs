//! `/v1/bots`: the bot registry over HTTP, with the API key — the same changes and checks
//! as `nanobot bots` ([`nanobot_runtime::bot_registry::admin`]).
//!
//! - `GET /v1/bots`: every bot, `{"object":"list","data":[{"id","entry"}]}`;
//! - `GET /v1/bots/{id}`: one bot, `{"id","entry"}`;
//! - `POST /v1/bots` with `{"id","entry"}`: adds a bot (201; 409 when it exists);
//! - `PUT /v1/bots/{id}` with the entry: replaces it; `PATCH` lays the fields given over it;
//! - `DELETE /v1/bots/{id}`: removes it (its channels stop, its data is kept).
//!
//! An entry is shown masked ([`admin::masked`]): secrets appear as the `${VAR}` references
//! the registry keeps, never as values. Bad input is a 400 naming the problem, with nothing
//! written.
//!
//! SIGKILL: each change is one atomic KV write; a gateway killed mid-request changed the
//! bot or left it as it was (the client sees the connection drop and may read it back).

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use nanobot_runtime::bot_registry::admin::{self, Edit};

use super::AppState;
use super::completions::read_body;
use super::error::ApiError;

/// The body of `POST /v1/bots`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewBot {
    id: String,
    #[serde(default = "empty_entry")]
    entry: Value,
}

fn empty_entry() -> Value {
    json!({})
}

fn shown(id: &str, raw: &Value) -> Value {
    json!({"id": id, "entry": admin::masked(raw)})
}

/// Reads the request's JSON body (within `api.readTimeoutSecs`), a 400 when it is not JSON.
async fn json_body<T: serde::de::DeserializeOwned>(
    state: &AppState,
    request: Request,
) -> Result<T, ApiError> {
    let body = read_body(request, state.inner.read_timeout).await?;
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::BadRequest(format!("Invalid JSON body: {e}")))
}

pub(super) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    state.authorize_admin(&headers)?;
    let bots = admin::list(state.registry().await?).await?;
    let data: Vec<Value> = bots.iter().map(|(id, raw)| shown(id, raw)).collect();
    Ok(Json(json!({"object": "list", "data": data})))
}

pub(super) async fn show(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    state.authorize_admin(&headers)?;
    let raw = admin::get(state.registry().await?, &id).await?;
    Ok(Json(shown(&id, &raw)))
}

pub(super) async fn add(State(state): State<AppState>, request: Request) -> Response {
    let run = async {
        state.authorize_admin(request.headers())?;
        let new: NewBot = json_body(&state, request).await?;
        admin::add(state.registry().await?, &new.id, &new.entry).await?;
        tracing::info!(bot = %new.id, "bot added over the api");
        Ok::<_, ApiError>((StatusCode::CREATED, Json(shown(&new.id, &new.entry))))
    };
    run.await.into_response()
}

pub(super) async fn replace(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    change(state, id, request, Edit::Replace).await
}

pub(super) async fn patch(
    State(state): State<AppState>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    change(state, id, request, Edit::Merge).await
}

async fn change(
    state: AppState,
    id: String,
    request: Request,
    edit: fn(Value) -> Edit,
) -> Response {
    let run = async {
        state.authorize_admin(request.headers())?;
        let body: Value = json_body(&state, request).await?;
        let raw = admin::update(state.registry().await?, &id, edit(body)).await?;
        tracing::info!(bot = %id, "bot changed over the api");
        Ok::<_, ApiError>(Json(shown(&id, &raw)))
    };
    run.await.into_response()
}

pub(super) async fn remove(
    State(state): State<AppState>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    state.authorize_admin(&headers)?;
    admin::remove(state.registry().await?, &id).await?;
    tracing::info!(bot = %id, "bot removed over the api");
    Ok(Json(json!({"id": id, "deleted": true})))
}
