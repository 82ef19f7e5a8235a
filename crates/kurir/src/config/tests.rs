//! Unit tests of [`super`]: its rules, without a database.

use std::collections::HashMap;

use super::*;

fn load(env: &[(&str, &str)], flags: &[(&'static str, &str)]) -> Result<Config, ConfigError> {
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let flags: Vec<(&'static str, String)> =
        flags.iter().map(|(k, v)| (*k, v.to_string())).collect();
    Config::from_raw(&RawConfig::load(None, |k| env.get(k).cloned(), &flags)?)
}

#[test]
fn defaults_are_the_documented_ones() {
    let c = load(&[], &[]).unwrap();
    assert_eq!(c.database_url, "sqlite://./kurir-data/kurir.db");
    assert_eq!(c.delivery.connect_timeout, Duration::from_secs(2));
    assert_eq!(c.delivery.request_timeout, Duration::from_secs(5));
    assert_eq!(c.delivery.retry.initial_delay, Duration::from_secs(2));
    assert_eq!(c.delivery.retry.max_delay, Duration::from_secs(300));
    assert_eq!(c.delivery.retry.max_attempts, 10);
    assert!(c.delivery.allowed_networks.is_empty());
    assert_eq!(c.max_body_bytes, 256 * 1024);
    assert!(!c.metrics_require_token);
    assert_eq!(c.http, HttpConfig::default());
    assert_eq!(c.shutdown_timeout, DEFAULT_SHUTDOWN_TIMEOUT);
}

#[test]
fn metrics_token_requirement_is_a_boolean() {
    let on = load(&[("KURIR_METRICS_REQUIRE_TOKEN", "true")], &[]).unwrap();
    assert!(on.metrics_require_token);
    let err = load(&[("KURIR_METRICS_REQUIRE_TOKEN", "sometimes")], &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("KURIR_METRICS_REQUIRE_TOKEN: invalid value 'sometimes'"),
        "{err}"
    );
}

#[test]
fn body_sizes_take_bytes_or_binary_units() {
    assert_eq!(byte_size("262144"), Some(262_144));
    assert_eq!(byte_size("1MiB"), Some(1_048_576));
    assert_eq!(byte_size("16 KiB"), Some(16_384));
    assert_eq!(byte_size("10"), None);
    assert_eq!(byte_size("1GB"), None);
}

#[test]
fn an_invalid_duration_names_its_variable() {
    let err = load(&[("KURIR_CONNECT_TIMEOUT", "soon")], &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("KURIR_CONNECT_TIMEOUT: invalid value 'soon'"),
        "{err}"
    );
}

#[test]
fn an_initial_delay_above_the_max_is_refused() {
    let err = load(&[("KURIR_RETRY_INITIAL_DELAY", "10m")], &[])
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("KURIR_RETRY_INITIAL_DELAY: invalid value '10m'"),
        "{err}"
    );
}

#[test]
fn flags_override_environment() {
    let c = load(
        &[("KURIR_REQUEST_TIMEOUT", "9s")],
        &[("request_timeout", "150ms")],
    )
    .unwrap();
    assert_eq!(c.delivery.request_timeout, Duration::from_millis(150));
    let err = load(&[], &[("retry_jitter", "3")]).unwrap_err().to_string();
    assert!(err.starts_with("--retry-jitter:"), "{err}");
}

#[test]
fn file_is_overridden_by_environment() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kurir.toml");
    std::fs::write(
        &path,
        "retry_max_attempts = 3\nallowed_networks = [\"127.0.0.0/8\", \"::1/128\"]\n",
    )
    .unwrap();
    let env = |k: &str| (k == "KURIR_RETRY_MAX_ATTEMPTS").then(|| "4".to_string());
    let c = Config::from_raw(&RawConfig::load(Some(&path), env, &[]).unwrap()).unwrap();
    assert_eq!(c.delivery.retry.max_attempts, 4);
    assert_eq!(c.delivery.allowed_networks.len(), 2);
    std::fs::write(&path, "no_such_setting = 1\n").unwrap();
    let err = RawConfig::load(Some(&path), |_| None, &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown setting 'no_such_setting'"), "{err}");
}

#[test]
fn networks_accept_cidrs_and_bare_addresses() {
    assert_eq!(parse_networks("127.0.0.0/8, ::1").unwrap().len(), 2);
    assert!(parse_networks("10.0.0.0/33").is_none());
    let err = load(&[("KURIR_ALLOWED_NETWORKS", "localhost")], &[])
        .unwrap_err()
        .to_string();
    assert!(err.starts_with("KURIR_ALLOWED_NETWORKS:"), "{err}");
}

#[test]
fn every_number_is_refused_outside_its_documented_bound() {
    let cases = [
        ("KURIR_CONNECT_TIMEOUT", "99ms"),
        ("KURIR_CONNECT_TIMEOUT", "2m"),
        ("KURIR_REQUEST_TIMEOUT", "0s"),
        ("KURIR_REQUEST_TIMEOUT", "1h"),
        ("KURIR_RETRY_INITIAL_DELAY", "0s"),
        ("KURIR_RETRY_MAX_DELAY", "8days"),
        ("KURIR_RETRY_MAX_ATTEMPTS", "0"),
        ("KURIR_RETRY_MAX_ATTEMPTS", "51"),
        ("KURIR_RETRY_MAX_ATTEMPTS", "2147483647"),
        ("KURIR_MAX_CONCURRENCY", "10001"),
        ("KURIR_BATCH_SIZE", "0"),
        ("KURIR_BATCH_SIZE", "1000000"),
        ("KURIR_POLL_INTERVAL", "2h"),
        ("KURIR_LEASE_MARGIN", "0s"),
        ("KURIR_MAX_BODY_SIZE", "64MiB"),
        ("KURIR_HTTP_HEADER_TIMEOUT", "0s"),
        ("KURIR_HTTP_BODY_TIMEOUT", "1h"),
        ("KURIR_MAX_CONNECTIONS", "0"),
        ("KURIR_SHUTDOWN_TIMEOUT", "500ms"),
        ("KURIR_SHUTDOWN_TIMEOUT", "1h"),
    ];
    for (name, value) in cases {
        let err = load(&[(name, value)], &[])
            .map(|_| ())
            .expect_err(&format!("{name}={value} is out of bounds"))
            .to_string();
        assert!(err.starts_with(&format!("{name}: invalid value")), "{err}");
        assert!(err.contains("between"), "the bound is stated: {err}");
    }
    for (name, value) in [
        ("KURIR_CONNECT_TIMEOUT", "100ms"),
        ("KURIR_REQUEST_TIMEOUT", "60s"),
        ("KURIR_RETRY_MAX_DELAY", "7days"),
        ("KURIR_RETRY_MAX_ATTEMPTS", "50"),
    ] {
        assert!(
            load(&[(name, value)], &[]).is_ok(),
            "{name}={value} is at the bound"
        );
    }
}
