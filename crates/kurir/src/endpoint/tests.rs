//! Unit tests of [`super`]: its rules, without a database.

use super::*;

fn filter(p: &[&str]) -> EventFilter {
    EventFilter::parse(p.iter().map(|s| s.to_string()).collect()).unwrap()
}

#[test]
fn empty_filter_and_star_match_everything() {
    assert!(filter(&[]).matches("order.paid"));
    assert!(filter(&["*"]).matches("payment.refunded"));
}

#[test]
fn prefix_wildcard_matches_below_the_prefix_only() {
    let f = filter(&["order.*"]);
    assert!(f.matches("order.paid"));
    assert!(f.matches("order.item.added"));
    assert!(!f.matches("order"));
    assert!(!f.matches("orders.paid"));
    assert!(!f.matches("payment.succeeded"));
}

#[test]
fn exact_names_match_exactly() {
    let f = filter(&["order.paid", "payment.succeeded"]);
    assert!(f.matches("payment.succeeded"));
    assert!(!f.matches("order.paid.late"));
}

#[test]
fn bad_patterns_are_refused_with_the_field_named() {
    let err = EventFilter::parse(vec!["Order Paid".into()]).unwrap_err();
    assert_eq!(err.field, "event_types");
    assert!(EventFilter::parse(vec!["order.*.paid".into()]).is_err());
}

#[test]
fn urls_must_be_absolute_http() {
    assert!(validate_url("https://partner.example/hooks").is_ok());
    assert!(validate_url("http://127.0.0.1:9000/x").is_ok());
    assert!(validate_url("HTTPS://[::1]:9000/x?a=%20b").is_ok());
    assert_eq!(validate_url("ftp://x.example/").unwrap_err().field, "url");
    assert!(validate_url("/relative").is_err());
    assert!(validate_url("not a url").is_err());
}

#[test]
fn urls_that_would_be_read_as_something_else_are_refused() {
    for bad in [
        "http:///path",
        "http:\\\\x.example/",
        "http:x.example/hook",
        "https://user:pw@x.example/hook",
        "https://user@x.example/",
        "https://x.example/a\r\nb",
        "https://x.example/a\tb",
        "https://x.example/a b",
        "https://x.example/\u{0}",
        "https://",
    ] {
        assert!(validate_url(bad).is_err(), "{bad:?}");
    }
    let err = validate_url("https://user:secret-pw@x.example:99999/").unwrap_err();
    assert!(!err.message.contains("secret-pw"), "{err}");
}

#[test]
fn numbers_out_of_their_bounds_name_the_field() {
    let field = |o: Overrides| o.validate().unwrap_err().field;
    let o = Overrides::default;
    assert_eq!(
        field(Overrides {
            connect_timeout_ms: Some(99),
            ..o()
        }),
        "connect_timeout_ms"
    );
    assert_eq!(
        field(Overrides {
            request_timeout_ms: Some(60_001),
            ..o()
        }),
        "request_timeout_ms"
    );
    assert_eq!(
        field(Overrides {
            retry_initial_delay_ms: Some(0),
            ..o()
        }),
        "retry_initial_delay_ms"
    );
    assert_eq!(
        field(Overrides {
            retry_max_delay_ms: Some(u64::MAX),
            ..o()
        }),
        "retry_max_delay_ms"
    );
    assert_eq!(
        field(Overrides {
            retry_max_attempts: Some(51),
            ..o()
        }),
        "retry_max_attempts"
    );
    let mut new = NewEndpoint::new("https://x.example/");
    new.max_in_flight = Some(1001);
    assert_eq!(new.validate().unwrap_err().field, "max_in_flight");
    new.max_in_flight = Some(1000);
    new.description = "a\0b".into();
    assert_eq!(new.validate().unwrap_err().field, "description");
}
