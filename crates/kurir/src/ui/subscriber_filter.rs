//! The subscriber filter of the dashboard's lists (endpoints, events, dead letters): what a
//! list filtered by a subscriber kurir does not know says instead of "nothing matches".

use super::error::UiError;
use super::session::Session;
use super::view;
use crate::api::state::AppState;
use crate::store::subscribers::valid_id;

/// The subscriber a list was `filter`ed by, when its rows are `empty` because kurir has no
/// subscriber of that id (a deleted one it has: its history is listed), so the page can say so
/// rather than "nothing matches". Another subscriber's id is unknown to a subscriber's session,
/// as the API answers it.
pub(super) async fn unknown(
    state: &AppState,
    session: &Session,
    filter: &Option<String>,
    empty: bool,
) -> Result<Option<String>, UiError> {
    let Some(id) = view::given(filter).filter(|_| empty) else {
        return Ok(None);
    };
    let known = valid_id(&id)
        && session.actor().reaches(Some(&id))
        && state.store.subscriber(&id).await?.is_some();
    Ok((!known).then_some(id))
}
