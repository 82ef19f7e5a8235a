//! The envelope's exact bytes: field order, timestamp format, escaping, and `data` untouched.

use chrono::{DateTime, TimeZone, Utc};
use kurir_core::Envelope;
use serde_json::value::RawValue;

fn envelope<'a>(data: &'a RawValue, occurred_at: DateTime<Utc>) -> Envelope<'a> {
    Envelope {
        event_id: "0190f3c2-8c2e-7d1a-9a39-3b1f1d2c4e5f",
        event_type: "payment.succeeded",
        version: 1,
        occurred_at,
        delivery_attempt: 3,
        data,
    }
}

fn raw(json: &str) -> Box<RawValue> {
    RawValue::from_string(json.to_owned()).unwrap()
}

fn text(envelope: &Envelope<'_>) -> String {
    String::from_utf8(envelope.to_json()).unwrap()
}

#[test]
fn envelope_fields_come_in_the_documented_order() {
    let data = raw(r#"{"order_id":"98765","total":250000,"currency":"IDR"}"#);
    let at = Utc.with_ymd_and_hms(2026, 6, 11, 8, 15, 30).unwrap();
    assert_eq!(
        text(&envelope(&data, at)),
        concat!(
            r#"{"event_id":"0190f3c2-8c2e-7d1a-9a39-3b1f1d2c4e5f","event_type":"payment.succeeded","#,
            r#""version":1,"occurred_at":"2026-06-11T08:15:30Z","delivery_attempt":3,"#,
            r#""data":{"order_id":"98765","total":250000,"currency":"IDR"}}"#,
        )
    );
}

#[test]
fn data_is_embedded_byte_for_byte() {
    let odd = "{ \"z\" : 1,\n\t\"a\":[1 , 2.50, 1e3],  \"m\":{\"\\u00e9\":\"é\"} }";
    let data = raw(odd);
    let at = Utc.with_ymd_and_hms(2026, 6, 11, 8, 15, 30).unwrap();
    let json = text(&envelope(&data, at));
    assert!(json.ends_with(&format!(",\"data\":{odd}}}")), "{json}");
    serde_json::from_str::<serde_json::Value>(&json).expect("still valid JSON");
}

#[test]
fn data_may_be_any_json_value() {
    let at = Utc.with_ymd_and_hms(2026, 6, 11, 8, 15, 30).unwrap();
    for value in ["null", "[]", "\"text\"", "42"] {
        let data = raw(value);
        assert!(text(&envelope(&data, at)).ends_with(&format!("\"data\":{value}}}")));
    }
}

#[test]
fn fractional_seconds_appear_only_when_non_zero() {
    let data = raw("{}");
    let millis = Utc.with_ymd_and_hms(2026, 6, 11, 8, 15, 30).unwrap()
        + chrono::TimeDelta::milliseconds(120);
    assert!(text(&envelope(&data, millis)).contains(r#""occurred_at":"2026-06-11T08:15:30.120Z""#));
    let nanos =
        Utc.with_ymd_and_hms(2026, 6, 11, 8, 15, 30).unwrap() + chrono::TimeDelta::nanoseconds(5);
    assert!(
        text(&envelope(&data, nanos)).contains(r#""occurred_at":"2026-06-11T08:15:30.000000005Z""#)
    );
}

#[test]
fn strings_are_json_escaped() {
    let data = raw("{}");
    let at = Utc.with_ymd_and_hms(2026, 6, 11, 8, 15, 30).unwrap();
    let envelope = Envelope {
        event_id: "evt\"1\\",
        event_type: "order.paid",
        version: -2,
        delivery_attempt: u32::MAX,
        ..envelope(&data, at)
    };
    assert_eq!(
        text(&envelope),
        r#"{"event_id":"evt\"1\\","event_type":"order.paid","version":-2,"occurred_at":"2026-06-11T08:15:30Z","delivery_attempt":4294967295,"data":{}}"#
    );
}
