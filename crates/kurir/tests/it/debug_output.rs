//! `Debug` output never shows a secret: the configuration (admin token, the database URL's
//! password), the command line, the admin API's request and response bodies, and inbox sources.
//! Anything may end up in a `{:?}` (a log line, a panic message); none of these may leak through it.

use clap::Parser;
use kurir::api::endpoints::{CreateEndpoint, EndpointView, RotateSecret};
use kurir::api::sources::{CreateSource, SourceView, UpdateSource};
use kurir::config::{Config, RawConfig};
use kurir::inbox_source::{NewSource, SourceUpdate};

const TOKEN: &str = "admin-token-c0ffee-never-printed";
const PASSWORD: &str = "db-pa55word-never-printed";
const SECRET: &str = "whsec_c2VjcmV0LW5ldmVyLXByaW50ZWQtaW4tZGVidWc=";
const OTHER_SECRET: &str = "second-secret-never-printed";

fn database_url() -> String {
    format!("postgres://kurir:{PASSWORD}@db.internal:5432/kurir")
}

/// Fails naming `what` when its `{:?}` or `{:#?}` shows a secret.
fn assert_redacted(what: &str, value: &impl std::fmt::Debug) {
    for text in [format!("{value:?}"), format!("{value:#?}")] {
        for secret in [TOKEN, PASSWORD, SECRET, OTHER_SECRET] {
            assert!(!text.contains(secret), "{what} shows a secret: {text}");
        }
    }
}

#[test]
fn the_configuration_shows_no_secret_in_debug() {
    let url = database_url();
    let flags = [("admin_token", TOKEN.to_owned()), ("database_url", url)];
    let raw = RawConfig::load(None, |_| None, &flags).unwrap();
    assert_redacted("RawConfig", &raw);
    let config = Config::from_raw(&raw).unwrap();
    let shown = format!("{config:?}");
    assert!(
        shown.contains("db.internal"),
        "the host is still shown: {shown}"
    );
    assert_redacted("Config", &config);
}

#[test]
fn the_command_line_shows_no_secret_in_debug() {
    let url = database_url();
    let serve = kurir::cli::Cli::try_parse_from([
        "kurir",
        "serve",
        "--admin-token",
        TOKEN,
        "--database-url",
        &url,
    ])
    .unwrap();
    assert_redacted("kurir serve", &serve);
    let migrate =
        kurir::cli::Cli::try_parse_from(["kurir", "migrate", "--database-url", &url]).unwrap();
    assert_redacted("kurir migrate", &migrate);
    let create = kurir::cli::Cli::try_parse_from([
        "kurir",
        "sources",
        "create",
        "stripe",
        "--scheme",
        "stripe",
        "--secret",
        SECRET,
        "--secret",
        OTHER_SECRET,
        "--forward-url",
        "https://app.example/hooks",
    ])
    .unwrap();
    assert_redacted("kurir sources create", &create);
    let endpoint = kurir::cli::Cli::try_parse_from([
        "kurir",
        "endpoints",
        "create",
        "https://partner.example/hooks",
        "--secret",
        SECRET,
    ])
    .unwrap();
    assert_redacted("kurir endpoints create", &endpoint);
}

#[test]
fn api_bodies_and_views_show_no_secret_in_debug() {
    let create: CreateEndpoint = serde_json::from_value(serde_json::json!({
        "url": "https://partner.example/hooks", "secret": SECRET,
    }))
    .unwrap();
    assert_redacted("CreateEndpoint", &create);
    let rotate: RotateSecret =
        serde_json::from_value(serde_json::json!({"secret": SECRET})).unwrap();
    assert_redacted("RotateSecret", &rotate);
    let source: CreateSource = serde_json::from_value(serde_json::json!({
        "name": "stripe", "scheme": "stripe", "secrets": [SECRET, OTHER_SECRET],
        "forward_url": "https://app.example/hooks",
    }))
    .unwrap();
    assert_redacted("CreateSource", &source);
    let update: UpdateSource =
        serde_json::from_value(serde_json::json!({"secrets": [SECRET]})).unwrap();
    assert_redacted("UpdateSource", &update);
    let at = chrono::Utc::now();
    let endpoint_view = EndpointView {
        id: "x".into(),
        url: "https://partner.example/hooks".into(),
        description: String::new(),
        event_types: vec![],
        enabled: true,
        disabled_reason: None,
        subscriber_id: None,
        max_in_flight: 16,
        rate_limit_per_second: None,
        ordering: Default::default(),
        ordering_on_dead_letter: Default::default(),
        connect_timeout_ms: None,
        request_timeout_ms: None,
        retry_initial_delay_ms: None,
        retry_max_delay_ms: None,
        retry_max_attempts: None,
        circuit_failure_threshold: None,
        circuit_cooldown_ms: None,
        circuit: kurir::api::endpoints::CircuitView::of(None, at),
        secret: Some(SECRET.into()),
        warnings: vec![],
        previous_secrets_expire_at: vec![],
        created_at: at,
        updated_at: at,
    };
    assert_redacted("EndpointView", &endpoint_view);
    let source_view = SourceView {
        name: "stripe".into(),
        scheme: "stripe".into(),
        secret_count: 1,
        tolerance_seconds: 300,
        forward_url: "https://app.example/hooks".into(),
        inbox_path: "/inbox/stripe".into(),
        forward_secret: Some(SECRET.into()),
        read_token: Some(TOKEN.into()),
        created_at: at,
        updated_at: at,
    };
    assert_redacted("SourceView", &source_view);
}

#[test]
fn inbox_sources_show_no_secret_in_debug() {
    let new = NewSource {
        name: "stripe".into(),
        scheme: "stripe".into(),
        secrets: vec![SECRET.into(), OTHER_SECRET.into()],
        tolerance_seconds: None,
        forward_url: "https://app.example/hooks".into(),
    };
    assert_redacted("NewSource", &new);
    let created = new.validate(chrono::Utc::now()).unwrap();
    assert_redacted("CreatedSource", &created);
    let shown = format!("{created:?}");
    assert!(
        !shown.contains("kurir_read_"),
        "CreatedSource shows its read token: {shown}"
    );
    assert!(!shown.contains(created.source.forward_secret.expose()));
    let update = SourceUpdate {
        secrets: Some(vec![SECRET.into()]),
        ..SourceUpdate::default()
    };
    assert_redacted("SourceUpdate", &update);
}
