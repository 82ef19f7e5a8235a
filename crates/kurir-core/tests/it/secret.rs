//! Generated secrets have the documented shape, and no formatting path leaks one.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use kurir_core::{Scheme, Secret, Verifier};

#[test]
fn generated_secrets_are_whsec_and_24_random_bytes() {
    let secret = Secret::generate();
    let encoded = secret
        .expose()
        .strip_prefix("whsec_")
        .expect("whsec_ prefix");
    assert_eq!(encoded.len(), 32);
    assert_eq!(STANDARD.decode(encoded).unwrap().len(), 24);
    assert_eq!(secret.hmac_key_standard().len(), 24);
    assert_eq!(Secret::parse(secret.expose()).unwrap(), secret);
    assert_ne!(Secret::generate(), secret);
}

#[test]
fn debug_never_shows_the_secret() {
    let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
    assert_eq!(format!("{secret:?}"), "Secret(***)");
    assert_eq!(format!("{secret:#?}"), "Secret(***)");
    let verifier = Verifier::new(Scheme::StandardWebhooks, vec![secret]);
    let debug = format!("{verifier:?}");
    assert!(!debug.contains("MfKQ9r8"), "{debug}");
    assert!(debug.contains("Secret(***)"), "{debug}");
}
