//! `/v1/endpoints`: create, read, list, change, delete.

use reqwest::StatusCode;
use serde_json::json;

use super::support::{on_both_backends, TestApp};

on_both_backends!(
    endpoints_are_created_read_listed_changed_and_deleted,
    circuit_breaker_settings_are_overrides_and_the_circuit_is_shown,
    a_rate_limit_is_set_shown_cleared_and_bounded,
    ordering_settings_default_change_and_refuse_unknown_values,
    the_endpoint_list_is_paged_oldest_first_with_each_pages_circuits,
);

async fn endpoints_are_created_read_listed_changed_and_deleted(app: TestApp) {
    let created = app
        .create_endpoint(
            "https://partner.example/hooks",
            json!({"description": "partner", "event_types": ["order.*"], "max_in_flight": 4,
                   "retry_max_attempts": 3}),
        )
        .await;
    let id = created["id"].as_str().unwrap();
    assert!(created["secret"].as_str().unwrap().starts_with("whsec_"));
    assert_eq!(created["event_types"], json!(["order.*"]));
    assert_eq!(created["max_in_flight"], 4);
    assert_eq!(created["retry_max_attempts"], 3);
    assert_eq!(created["enabled"], true);

    let (status, shown) = app.get(&format!("/v1/endpoints/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(shown["url"], "https://partner.example/hooks");
    assert!(
        shown.get("secret").is_none(),
        "reads never show the secret: {shown}"
    );

    let given = app
        .create_endpoint(
            "http://other.example/x",
            json!({"secret": "a-secret-of-my-own"}),
        )
        .await;
    assert_eq!(given["secret"], "a-secret-of-my-own");
    let (status, list) = app.get("/v1/endpoints").await;
    assert_eq!(status, StatusCode::OK);
    assert!(list.get("next_cursor").is_none(), "one page: {list}");
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [id, given["id"].as_str().unwrap()], "oldest first");

    let (status, changed) = app
        .patch(
            &format!("/v1/endpoints/{id}"),
            json!({"enabled": false, "disabled_reason": "partner maintenance",
                   "description": "partner (paused)", "retry_max_attempts": null, "request_timeout_ms": 900}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["enabled"], false);
    assert_eq!(changed["disabled_reason"], "partner maintenance");
    assert_eq!(changed["description"], "partner (paused)");
    assert_eq!(
        changed["retry_max_attempts"],
        json!(null),
        "null clears an override"
    );
    assert_eq!(changed["request_timeout_ms"], 900);
    assert_eq!(
        changed["event_types"],
        json!(["order.*"]),
        "absent fields stay"
    );
    let (_, enabled) = app
        .patch(&format!("/v1/endpoints/{id}"), json!({"enabled": true}))
        .await;
    assert_eq!(
        (
            enabled["enabled"].clone(),
            enabled["disabled_reason"].clone()
        ),
        (json!(true), json!(null))
    );

    let (status, body) = app.delete(&format!("/v1/endpoints/{id}")).await;
    assert_eq!(
        (status, body),
        (StatusCode::NO_CONTENT, serde_json::Value::Null)
    );
    let (status, body) = app.get(&format!("/v1/endpoints/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "not_found");
    let (status, _) = app.delete(&format!("/v1/endpoints/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

/// Issue 15: the breaker's per-endpoint settings are set, shown and cleared like the retry
/// overrides, refused out of bounds with the field named; the circuit is shown read-only.
async fn circuit_breaker_settings_are_overrides_and_the_circuit_is_shown(app: TestApp) {
    let created = app
        .create_endpoint(
            "https://partner.example/hooks",
            json!({"circuit_failure_threshold": 3, "circuit_cooldown_ms": 5000}),
        )
        .await;
    let id = created["id"].as_str().unwrap();
    assert_eq!(created["circuit_failure_threshold"], 3);
    assert_eq!(created["circuit_cooldown_ms"], 5000);
    let (_, shown) = app.get(&format!("/v1/endpoints/{id}")).await;
    assert_eq!(shown["circuit"]["state"], "closed");
    assert_eq!(shown["circuit"]["since"], shown["created_at"]);
    assert_eq!(shown["circuit"]["consecutive_failures"], 0);
    assert_eq!(shown["circuit"]["next_probe_at"], json!(null));
    let (_, list) = app.get("/v1/endpoints").await;
    assert_eq!(list["data"][0]["circuit"]["state"], "closed");

    let (status, changed) = app
        .patch(
            &format!("/v1/endpoints/{id}"),
            json!({"circuit_failure_threshold": null}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["circuit_failure_threshold"], json!(null));
    assert_eq!(changed["circuit_cooldown_ms"], 5000);
    for (field, value) in [
        ("circuit_failure_threshold", json!(0)),
        ("circuit_cooldown_ms", json!(1)),
        ("circuit_cooldown_ms", json!(600_001)),
    ] {
        let (status, body) = app
            .patch(&format!("/v1/endpoints/{id}"), json!({ field: value }))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}={value}: {body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains(field),
            "{body}"
        );
    }
    let (status, body) = app
        .patch(
            &format!("/v1/endpoints/{id}"),
            json!({"circuit": {"state": "open"}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "read-only: {body}");
}

/// Issue 15: `rate_limit_per_second` on create and patch.
async fn a_rate_limit_is_set_shown_cleared_and_bounded(app: TestApp) {
    let created = app
        .create_endpoint(
            "https://partner.example/hooks",
            json!({"rate_limit_per_second": 20}),
        )
        .await;
    let id = created["id"].as_str().unwrap();
    assert_eq!(created["rate_limit_per_second"], 20);
    for value in [json!(0), json!(100_001)] {
        let (status, body) = app
            .patch(
                &format!("/v1/endpoints/{id}"),
                json!({ "rate_limit_per_second": value }),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{value}: {body}");
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("rate_limit_per_second"));
    }
    let (_, shown) = app.get(&format!("/v1/endpoints/{id}")).await;
    assert_eq!(
        shown["rate_limit_per_second"], 20,
        "a refused change changes nothing"
    );
    let (status, changed) = app
        .patch(
            &format!("/v1/endpoints/{id}"),
            json!({"rate_limit_per_second": null}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    assert_eq!(changed["rate_limit_per_second"], json!(null));
}

/// Issue 15: `ordering` and `ordering_on_dead_letter` on create, patch and get; unknown values
/// are refused naming the field.
async fn ordering_settings_default_change_and_refuse_unknown_values(app: TestApp) {
    let plain = app
        .create_endpoint("https://partner.example/plain", json!({}))
        .await;
    assert_eq!(plain["ordering"], "none");
    assert_eq!(plain["ordering_on_dead_letter"], "block");
    let created = app
        .create_endpoint(
            "https://partner.example/hooks",
            json!({"ordering": "aggregate", "ordering_on_dead_letter": "skip"}),
        )
        .await;
    let id = created["id"].as_str().unwrap();
    assert_eq!(created["ordering"], "aggregate");
    assert_eq!(created["ordering_on_dead_letter"], "skip");
    let path = format!("/v1/endpoints/{id}");
    for (field, value) in [
        ("ordering", "ordered"),
        ("ordering", "Aggregate"),
        ("ordering_on_dead_letter", "drop"),
    ] {
        let (status, body) = app.patch(&path, json!({ field: value })).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{field}={value}: {body}");
        assert_eq!(body["error"]["code"], "invalid_field", "{body}");
        assert_eq!(body["error"]["field"], field, "{body}");
        let (status, body) = app
            .post(
                "/v1/endpoints",
                json!({"url": "https://partner.example/x", field: value}),
            )
            .await;
        assert_eq!(
            status,
            StatusCode::BAD_REQUEST,
            "create {field}={value}: {body}"
        );
        assert_eq!(body["error"]["field"], field, "{body}");
    }
    let (status, changed) = app
        .patch(
            &path,
            json!({"ordering": "none", "ordering_on_dead_letter": "block"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{changed}");
    let (_, shown) = app.get(&path).await;
    assert_eq!(shown["ordering"], "none");
    assert_eq!(shown["ordering_on_dead_letter"], "block");
}

/// Issues 27 and 33: `GET /v1/endpoints` answers like every other list, `{data, next_cursor}`
/// with `limit` and `cursor`, oldest first; each endpoint carries its own circuit, read for the
/// page alone; a bad `limit` or `cursor` is refused naming it.
async fn the_endpoint_list_is_paged_oldest_first_with_each_pages_circuits(app: TestApp) {
    let mut ids = Vec::new();
    for n in 0..3 {
        let e = app
            .create_endpoint(&format!("https://p{n}.example/"), json!({}))
            .await;
        ids.push(e["id"].as_str().unwrap().to_owned());
    }
    // The last endpoint's circuit has counted failures; the others have no row.
    let (opened, _) = app
        .store
        .update_circuit(&ids[2], |c| {
            c.consecutive_failures = 4;
            Some(())
        })
        .await
        .unwrap();
    assert_eq!(opened.consecutive_failures, 4);

    let (status, first) = app.get("/v1/endpoints?limit=2").await;
    assert_eq!(status, StatusCode::OK, "{first}");
    let shown = |page: &serde_json::Value, key: &str| -> Vec<serde_json::Value> {
        page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e[key].clone())
            .collect()
    };
    assert_eq!(shown(&first, "id"), [json!(ids[0]), json!(ids[1])]);
    let failures = |page: &serde_json::Value| -> Vec<serde_json::Value> {
        shown(page, "circuit")
            .iter()
            .map(|c| c["consecutive_failures"].clone())
            .collect()
    };
    assert_eq!(failures(&first), [json!(0), json!(0)]);
    let cursor = first["next_cursor"].as_str().expect("a second page");

    let (status, second) = app
        .get(&format!("/v1/endpoints?limit=2&cursor={cursor}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{second}");
    assert_eq!(
        shown(&second, "id"),
        [json!(ids[2])],
        "after the first page"
    );
    assert_eq!(failures(&second), [json!(4)], "the page's own circuit");
    assert!(
        second.get("next_cursor").is_none(),
        "the last page: {second}"
    );
    assert!(
        shown(&second, "secret").iter().all(|s| s.is_null()),
        "a listing never shows a secret"
    );

    let (_, all) = app.get("/v1/endpoints").await;
    assert_eq!(shown(&all, "id").len(), 3, "50 a page by default");
    // "nope", and "events:1": a cursor of another listing.
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=201", "limit"),
        ("cursor=bm9wZQ", "cursor"),
        ("cursor=ZXZlbnRzOjE", "cursor"),
    ] {
        let (status, body) = app.get(&format!("/v1/endpoints?{query}")).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{query}: {body}");
        assert!(
            body["error"]["message"].as_str().unwrap().contains(field),
            "{query}: {body}"
        );
    }
}
