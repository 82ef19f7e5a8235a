//! HMAC-SHA256 over a message given in parts, and the constant-time tag comparison every scheme uses.
//!
//! Private to the crate: signing (`sign`) and verifying (`verify`) share this one piece so the two sides
//! cannot drift apart. It knows nothing about headers or encodings.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Length in bytes of an HMAC-SHA256 tag.
pub(crate) const TAG_LEN: usize = 32;

/// HMAC-SHA256 of the concatenation of `parts`, without building the concatenation.
pub(crate) fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; TAG_LEN] {
    // HMAC accepts keys of any length, so `new_from_slice` cannot fail.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes keys of any length");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Constant-time comparison of a computed tag with a candidate of any length.
pub(crate) fn tags_equal(computed: &[u8; TAG_LEN], candidate: &[u8]) -> bool {
    computed.as_slice().ct_eq(candidate).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_hashed_as_their_concatenation() {
        let whole = hmac_sha256(b"key", &[b"abc.def"]);
        let parts = hmac_sha256(b"key", &[b"abc", b".", b"def"]);
        assert_eq!(whole, parts);
    }

    #[test]
    fn tags_of_other_lengths_never_match() {
        let tag = hmac_sha256(b"key", &[b"msg"]);
        assert!(tags_equal(&tag, &tag));
        assert!(!tags_equal(&tag, &tag[..31]));
        assert!(!tags_equal(&tag, &[]));
    }
}
