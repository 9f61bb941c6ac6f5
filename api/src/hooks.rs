//! Webhook signatures (issue 17): whether a delivery to `POST /v1/hooks/{pool}/{trigger}` was
//! signed with the trigger's secret, and which delivery ID it carries for deduplication.
//!
//! This module owns the verification rules and nothing else: it does no I/O and reads no clock
//! (the caller passes the time), and it neither stores delivery IDs nor renders messages. Two
//! schemes are understood:
//!
//! - **GitHub**: `X-Hub-Signature-256: sha256=<hex of HMAC-SHA256(secret, body)>`, the delivery ID
//!   in `X-GitHub-Delivery`. GitHub sends no timestamp, so there is no staleness check: the
//!   deduplication by delivery ID is what stops a replay.
//! - **Standard Webhooks** (standardwebhooks.com, as sent by Svix and others): `webhook-id`,
//!   `webhook-timestamp` (Unix seconds) and `webhook-signature`, a space-separated list of
//!   `v1,<base64 of HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`; any one matching `v1` entry
//!   passes (entries of other versions, e.g. the asymmetric `v1a`, are ignored). A timestamp
//!   further than the tolerance from now, either way, is stale.
//!
//! Signatures are compared in constant time (`Mac::verify_slice`). The signature is checked
//! before the timestamp, so [`HookError::Stale`] is only ever reported for an authentic delivery
//! (its sender's clock, or ours, is off). No error message echoes the secret, a header's value or
//! the signature that was expected.

use axum::http::HeaderMap;
use axum::http::header::HeaderName;
use base64::Engine as _;
use base64::alphabet;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

/// How far a Standard Webhooks timestamp may be from now, either way, by default (the trigger's
/// `tolerance` when it sets none): 5 minutes, the tolerance of the reference libraries.
#[cfg(test)]
const DEFAULT_TOLERANCE_SECS: u64 = ninetrix_proto::triggers::spec::DEFAULT_TOLERANCE_SECS;

/// The longest delivery ID accepted, in bytes: IDs are stored for deduplication and name the
/// session of a `session: new` trigger (`trigger:<name>:<id>`, at most 200 characters with a
/// 63-character name). GitHub's are GUIDs (36), Svix's `msg_` and 27 characters.
pub(crate) const MAX_DELIVERY_ID_LEN: usize = 120;

/// The prefix of a Standard Webhooks secret; the base64 of the key follows it.
const STANDARD_SECRET_PREFIX: &[u8] = b"whsec_";

const GITHUB_SIGNATURE: HeaderName = HeaderName::from_static("x-hub-signature-256");
const GITHUB_DELIVERY: HeaderName = HeaderName::from_static("x-github-delivery");
const STANDARD_ID: HeaderName = HeaderName::from_static("webhook-id");
const STANDARD_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
const STANDARD_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");

/// Standard base64, with or without padding (senders differ).
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A webhook signature scheme.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Scheme {
    /// GitHub's `X-Hub-Signature-256`.
    GitHub,
    /// Standard Webhooks' `webhook-id` / `webhook-timestamp` / `webhook-signature`.
    Standard,
}

impl Scheme {
    /// How messages and logs name the scheme.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Scheme::GitHub => "GitHub",
            Scheme::Standard => "Standard Webhooks",
        }
    }

    /// The scheme a request's headers say it was signed with: Standard Webhooks if it has a
    /// `webhook-signature`, else GitHub if it has an `X-Hub-Signature-256`, else none.
    pub(crate) fn detect(headers: &HeaderMap) -> Option<Scheme> {
        if headers.contains_key(STANDARD_SIGNATURE) {
            Some(Scheme::Standard)
        } else if headers.contains_key(GITHUB_SIGNATURE) {
            Some(Scheme::GitHub)
        } else {
            None
        }
    }
}

impl std::fmt::Display for Scheme {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A delivery whose signature is good.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Verified {
    /// The scheme it was signed with.
    pub(crate) scheme: Scheme,
    /// The sender's ID of the delivery, the same on every retry of it: `X-GitHub-Delivery` (GitHub
    /// may omit it; an empty one counts as absent) or `webhook-id` (always there).
    pub(crate) delivery_id: Option<String>,
}

/// What is wrong with a header of a delivery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Malformed {
    /// The header, as its sender spells it in its documentation.
    pub(crate) header: &'static str,
    /// What is wrong with it, and what it should be.
    pub(crate) problem: &'static str,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "`{}` {}", self.header, self.problem)
    }
}

/// Why a delivery is not accepted. Every variant but [`HookError::InvalidSecret`] is the
/// sender's to fix (answer 401); that one is the trigger's configuration.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum HookError {
    /// No signature header of the scheme that applies.
    #[error(
        "the delivery is not signed: it has no `webhook-signature` (Standard Webhooks) or \
         `X-Hub-Signature-256` (GitHub) header, or not the one this trigger's scheme expects; \
         give the webhook the trigger's secret at the sender so that it signs its deliveries"
    )]
    MissingSignature,
    /// A well-formed signature that does not match: another secret, or a changed body.
    #[error(
        "the delivery's signature does not match its body: check that the sender has the \
         trigger's current secret, and that nothing between the sender and this server (a proxy) \
         rewrites the body"
    )]
    BadSignature,
    /// An authentic Standard Webhooks delivery whose timestamp is too far from now.
    #[error("{}", stale_message(*.age_secs))]
    Stale {
        /// Now minus the delivery's `webhook-timestamp`, in seconds: positive for a timestamp in
        /// the past, negative for one in the future.
        age_secs: i64,
    },
    /// A signature header (or one it depends on) that cannot be read.
    #[error("the delivery's {0}")]
    MalformedHeader(Malformed),
    /// The trigger's secret cannot be used (the operator's to fix, not the sender's).
    #[error("the trigger's secret {0}")]
    InvalidSecret(&'static str),
}

fn stale_message(age_secs: i64) -> String {
    let amount = age_secs.unsigned_abs();
    let side = if age_secs >= 0 {
        "in the past"
    } else {
        "in the future"
    };
    format!(
        "the delivery's `webhook-timestamp` is {amount} seconds {side}, outside the window this \
         server accepts: check the clocks of the sender and of this server (NTP); a redelivery is \
         signed afresh with the current time"
    )
}

fn malformed(header: &'static str, problem: &'static str) -> HookError {
    HookError::MalformedHeader(Malformed { header, problem })
}

/// Verifies a delivery: its signature under `secret` by `scheme` (or the scheme its headers
/// show, when `None`: see [`Scheme::detect`]), and for Standard Webhooks that its timestamp is
/// within `tolerance_secs` of `now_unix_secs`.
///
/// `body` is the raw request body, exactly as received. `secret` is the trigger's secret: used
/// as is for GitHub; for Standard Webhooks a `whsec_<base64>` secret is the key the base64
/// encodes, and a secret without the prefix is used as is (the reference libraries would
/// base64-decode it too; using its bytes lets a plain shared secret work with senders that take
/// one). An empty secret is refused: it would let anyone sign.
pub(crate) fn verify(
    headers: &HeaderMap,
    body: &[u8],
    secret: &[u8],
    scheme: Option<Scheme>,
    now_unix_secs: i64,
    tolerance_secs: u64,
) -> Result<Verified, HookError> {
    let scheme = match scheme {
        Some(s) => s,
        None => Scheme::detect(headers).ok_or(HookError::MissingSignature)?,
    };
    match scheme {
        Scheme::GitHub => verify_github(headers, body, secret),
        Scheme::Standard => verify_standard(headers, body, secret, now_unix_secs, tolerance_secs),
    }
}

/// Checks a secret before it is configured for a trigger of `scheme`: the same checks as
/// [`verify`] makes of it, so a bad secret is refused when it is set, not on the first delivery.
pub(crate) fn check_secret(scheme: Scheme, secret: &[u8]) -> Result<(), HookError> {
    match scheme {
        Scheme::GitHub => keyed(secret).map(drop),
        Scheme::Standard => standard_key(secret).and_then(|key| keyed(&key)).map(drop),
    }
}

/// An HMAC-SHA256 keyed with `key`, refusing an empty key.
fn keyed(key: &[u8]) -> Result<Hmac<Sha256>, HookError> {
    if key.is_empty() {
        return Err(HookError::InvalidSecret(
            "is empty, which would let anyone sign deliveries: set a random secret of 32 bytes \
             or more, at the sender and in the trigger",
        ));
    }
    // HMAC takes keys of any length; the error arm cannot be reached, and is not a panic.
    <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .map_err(|_| HookError::InvalidSecret("cannot key HMAC-SHA256"))
}

/// The HMAC key of a Standard Webhooks secret.
fn standard_key(secret: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, HookError> {
    match secret.strip_prefix(STANDARD_SECRET_PREFIX) {
        Some(encoded) => BASE64
            .decode(encoded)
            .map(std::borrow::Cow::Owned)
            .map_err(|_| {
                HookError::InvalidSecret(
                    "starts with `whsec_` but what follows is not base64: copy the whole secret \
                     from the sender again",
                )
            }),
        None => Ok(std::borrow::Cow::Borrowed(secret)),
    }
}

/// The one value of a header, as text; `None` when it is absent.
fn single<'h>(
    headers: &'h HeaderMap,
    name: &HeaderName,
    spelled: &'static str,
) -> Result<Option<&'h str>, HookError> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(malformed(
            spelled,
            "is sent more than once; a delivery carries exactly one",
        ));
    }
    value.to_str().map(Some).map_err(|_| {
        malformed(
            spelled,
            "is not visible ASCII text; it must be as the sender computed it",
        )
    })
}

/// The delivery ID a request says it carries (`webhook-id`, else `X-GitHub-Delivery`), whether or
/// not its signature is good: what a refused delivery is recorded under, so its sender's operator
/// can find it. Only a visible-ASCII value of at most 120 characters is taken.
pub(crate) fn claimed_delivery_id(headers: &HeaderMap) -> Option<String> {
    [&STANDARD_ID, &GITHUB_DELIVERY]
        .into_iter()
        .find_map(|name| {
            let value = headers.get(name)?.to_str().ok()?.trim();
            (!value.is_empty()
                && value.len() <= MAX_DELIVERY_ID_LEN
                && value.bytes().all(|b| b.is_ascii_graphic()))
            .then(|| value.to_owned())
        })
}

/// A delivery ID fit to store and to name a session: trimmed, `None` when empty, refused when
/// longer than [`MAX_DELIVERY_ID_LEN`] or holding anything but visible ASCII (a space, a tab).
fn delivery_id(value: &str, spelled: &'static str) -> Result<Option<String>, HookError> {
    let id = value.trim();
    if id.len() > MAX_DELIVERY_ID_LEN {
        return Err(malformed(
            spelled,
            "is longer than 120 characters; a delivery ID is a short unique token",
        ));
    }
    if !id.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(malformed(
            spelled,
            "holds a space or a control character; a delivery ID is visible ASCII only",
        ));
    }
    Ok((!id.is_empty()).then(|| id.to_owned()))
}

/// What [`verify`] would refuse whatever the body is: no signature header, one that cannot be
/// read (or a delivery ID that cannot be used), or a secret that cannot sign. Only the headers
/// are looked at, so a delivery refused here is refused before its body is read.
pub(crate) fn check_headers(
    headers: &HeaderMap,
    secret: &[u8],
    scheme: Option<Scheme>,
) -> Result<(), HookError> {
    // Every error but `BadSignature` and `Stale` comes from the headers and the secret alone:
    // they are checked before the body is hashed. An infinite tolerance leaves `Stale` out.
    match verify(headers, b"", secret, scheme, 0, u64::MAX) {
        Err(
            e @ (HookError::MissingSignature
            | HookError::MalformedHeader(_)
            | HookError::InvalidSecret(_)),
        ) => Err(e),
        Ok(_) | Err(HookError::BadSignature | HookError::Stale { .. }) => Ok(()),
    }
}

fn verify_github(headers: &HeaderMap, body: &[u8], secret: &[u8]) -> Result<Verified, HookError> {
    const HEADER: &str = "X-Hub-Signature-256";
    let mut mac = keyed(secret)?;
    let value = single(headers, &GITHUB_SIGNATURE, HEADER)?.ok_or(HookError::MissingSignature)?;
    let hex = value.trim().strip_prefix("sha256=").ok_or_else(|| {
        malformed(
            HEADER,
            "does not start with `sha256=`; GitHub sends `sha256=` and 64 hex digits",
        )
    })?;
    let given = decode_hex(hex).ok_or_else(|| {
        malformed(
            HEADER,
            "is not `sha256=` followed by 64 hex digits, as GitHub sends it",
        )
    })?;
    let delivery = match single(headers, &GITHUB_DELIVERY, "X-GitHub-Delivery")? {
        Some(value) => delivery_id(value, "X-GitHub-Delivery")?,
        None => None,
    };
    mac.update(body);
    mac.verify_slice(&given)
        .map_err(|_| HookError::BadSignature)?;
    Ok(Verified {
        scheme: Scheme::GitHub,
        delivery_id: delivery,
    })
}

/// 32 bytes from exactly 64 hex digits (either case).
fn decode_hex(text: &str) -> Option<[u8; 32]> {
    let digits = text.as_bytes();
    if digits.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        let high = char::from(pair[0]).to_digit(16)?;
        let low = char::from(pair[1]).to_digit(16)?;
        *byte = u8::try_from(high * 16 + low).ok()?;
    }
    Some(out)
}

fn verify_standard(
    headers: &HeaderMap,
    body: &[u8],
    secret: &[u8],
    now_unix_secs: i64,
    tolerance_secs: u64,
) -> Result<Verified, HookError> {
    let key = standard_key(secret)?;
    let mut mac = keyed(&key)?;
    let signatures =
        single_list(headers, &STANDARD_SIGNATURE)?.ok_or(HookError::MissingSignature)?;
    let id = single(headers, &STANDARD_ID, "webhook-id")?
        .and_then(|v| delivery_id(v, "webhook-id").transpose())
        .transpose()?
        .ok_or_else(|| {
            malformed(
                "webhook-id",
                "is missing or empty; a Standard Webhooks sender signs \
                 `{id}.{timestamp}.{body}` and sends the id with the signature",
            )
        })?;
    let timestamp_text = single(headers, &STANDARD_TIMESTAMP, "webhook-timestamp")?
        .ok_or_else(|| {
            malformed(
                "webhook-timestamp",
                "is missing; a Standard Webhooks sender sends the Unix time (in seconds) at \
                 which it signed",
            )
        })?
        .trim();
    let timestamp = parse_unix_secs(timestamp_text).ok_or_else(|| {
        malformed(
            "webhook-timestamp",
            "is not a Unix time in whole seconds (digits only)",
        )
    })?;

    // The signed content is `{id}.{timestamp}.{body}`, the timestamp as the sender wrote it.
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp_text.as_bytes());
    mac.update(b".");
    mac.update(body);

    let mut offered = 0;
    let mut matched = false;
    for entry in signatures.iter().flat_map(|v| v.split_ascii_whitespace()) {
        let Some(("v1", encoded)) = entry.split_once(',') else {
            continue;
        };
        if encoded.is_empty() {
            continue;
        }
        let Ok(given) = BASE64.decode(encoded) else {
            continue;
        };
        offered += 1;
        // Every offered signature is checked, so the time taken does not say which one matched.
        matched |= mac.clone().verify_slice(&given).is_ok();
    }
    if offered == 0 {
        return Err(malformed(
            "webhook-signature",
            "has no `v1,<base64>` entry; this server verifies the symmetric HMAC-SHA256 \
             signatures (`v1`) of Standard Webhooks, sent as a space-separated list",
        ));
    }
    if !matched {
        return Err(HookError::BadSignature);
    }

    let age_secs = now_unix_secs.saturating_sub(timestamp);
    if age_secs.unsigned_abs() > tolerance_secs {
        return Err(HookError::Stale { age_secs });
    }
    Ok(Verified {
        scheme: Scheme::Standard,
        delivery_id: Some(id),
    })
}

/// Every value of a list header, as text (a sender may split a list over several lines);
/// `None` when it is absent.
fn single_list<'h>(
    headers: &'h HeaderMap,
    name: &HeaderName,
) -> Result<Option<Vec<&'h str>>, HookError> {
    let values = headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| {
            malformed(
                "webhook-signature",
                "is not visible ASCII text; it must be as the sender computed it",
            )
        })?;
    Ok((!values.is_empty()).then_some(values))
}

/// A Unix time in seconds: ASCII digits only, no sign, in range of `i64`.
fn parse_unix_secs(text: &str) -> Option<i64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    /// GitHub's documented example ("Validating webhook deliveries").
    const GITHUB_SECRET: &[u8] = b"It's a Secret to Everybody";
    const GITHUB_BODY: &[u8] = b"Hello, World!";
    const GITHUB_SIGNATURE_VALUE: &str =
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";

    /// The Standard Webhooks example used by the reference libraries' tests (Svix's
    /// `testSignFunctionWorks`).
    const SW_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const SW_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const SW_TIMESTAMP: i64 = 1_614_265_330;
    const SW_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const SW_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                HeaderName::from_static(name),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        map
    }

    fn github(signature: &str) -> HeaderMap {
        headers(&[
            ("x-hub-signature-256", signature),
            ("x-github-delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958"),
        ])
    }

    fn standard(id: &str, timestamp: &str, signature: &str) -> HeaderMap {
        headers(&[
            ("webhook-id", id),
            ("webhook-timestamp", timestamp),
            ("webhook-signature", signature),
        ])
    }

    /// A Standard Webhooks signature made by the spec's construction, independently of
    /// `verify_standard`.
    fn sign_standard(key: &[u8], id: &str, timestamp: i64, body: &[u8]) -> String {
        let mut content = format!("{id}.{timestamp}.").into_bytes();
        content.extend_from_slice(body);
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key).unwrap();
        mac.update(&content);
        format!(
            "v1,{}",
            base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
        )
    }

    fn sw_key() -> Vec<u8> {
        base64::engine::general_purpose::STANDARD
            .decode(&SW_SECRET["whsec_".len()..])
            .unwrap()
    }

    fn verify_sw(map: &HeaderMap, body: &[u8], now: i64) -> Result<Verified, HookError> {
        verify(
            map,
            body,
            SW_SECRET.as_bytes(),
            Some(Scheme::Standard),
            now,
            DEFAULT_TOLERANCE_SECS,
        )
    }

    // ---- GitHub ----

    #[test]
    fn github_documented_example_verifies() {
        let verified = verify(
            &github(GITHUB_SIGNATURE_VALUE),
            GITHUB_BODY,
            GITHUB_SECRET,
            Some(Scheme::GitHub),
            0,
            DEFAULT_TOLERANCE_SECS,
        )
        .unwrap();
        assert_eq!(
            verified,
            Verified {
                scheme: Scheme::GitHub,
                delivery_id: Some("72d3162e-cc78-11e3-81ab-4c9367dc0958".into()),
            }
        );
    }

    #[test]
    fn github_has_no_staleness_check() {
        // Any "now" at all: GitHub sends no timestamp.
        for now in [i64::MIN, -1, 0, 1_700_000_000, i64::MAX] {
            verify(
                &github(GITHUB_SIGNATURE_VALUE),
                GITHUB_BODY,
                GITHUB_SECRET,
                Some(Scheme::GitHub),
                now,
                0,
            )
            .unwrap();
        }
    }

    #[test]
    fn github_accepts_upper_case_hex_and_no_delivery_id() {
        let upper = format!("sha256={}", GITHUB_SIGNATURE_VALUE[7..].to_uppercase());
        let map = headers(&[("x-hub-signature-256", &upper)]);
        let verified = verify(&map, GITHUB_BODY, GITHUB_SECRET, None, 0, 300).unwrap();
        assert_eq!(verified.delivery_id, None);
        let map = headers(&[
            ("x-hub-signature-256", GITHUB_SIGNATURE_VALUE),
            ("x-github-delivery", "  "),
        ]);
        let verified = verify(&map, GITHUB_BODY, GITHUB_SECRET, None, 0, 300).unwrap();
        assert_eq!(verified.delivery_id, None);
    }

    #[test]
    fn github_wrong_secret_or_tampered_body_is_a_bad_signature() {
        let map = github(GITHUB_SIGNATURE_VALUE);
        let check =
            |body: &[u8], secret: &[u8]| verify(&map, body, secret, Some(Scheme::GitHub), 0, 300);
        assert_eq!(
            check(GITHUB_BODY, b"It's a Secret to Everybody!"),
            Err(HookError::BadSignature)
        );
        assert_eq!(
            check(b"Hello, World?", GITHUB_SECRET),
            Err(HookError::BadSignature)
        );
        assert_eq!(check(b"", GITHUB_SECRET), Err(HookError::BadSignature));
    }

    #[test]
    fn github_malformed_signatures() {
        for bad in [
            "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            "sha1=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            "sha256=",
            "sha256=757107ea",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e1",
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17aa",
            "sha256=zz7107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
            "sha256=+57107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
        ] {
            let err = verify(
                &github(bad),
                GITHUB_BODY,
                GITHUB_SECRET,
                Some(Scheme::GitHub),
                0,
                300,
            )
            .unwrap_err();
            assert!(
                matches!(
                    err,
                    HookError::MalformedHeader(Malformed {
                        header: "X-Hub-Signature-256",
                        ..
                    })
                ),
                "{bad}: {err:?}"
            );
        }
    }

    #[test]
    fn github_non_ascii_and_repeated_headers_are_malformed() {
        let mut map = HeaderMap::new();
        map.insert(
            GITHUB_SIGNATURE,
            HeaderValue::from_bytes(b"sha256=\xff").unwrap(),
        );
        assert!(matches!(
            verify(&map, GITHUB_BODY, GITHUB_SECRET, None, 0, 300),
            Err(HookError::MalformedHeader(_))
        ));
        let map = headers(&[
            ("x-hub-signature-256", GITHUB_SIGNATURE_VALUE),
            ("x-hub-signature-256", GITHUB_SIGNATURE_VALUE),
        ]);
        assert!(matches!(
            verify(&map, GITHUB_BODY, GITHUB_SECRET, None, 0, 300),
            Err(HookError::MalformedHeader(_))
        ));
        let long = "d".repeat(MAX_DELIVERY_ID_LEN + 1);
        let map = headers(&[
            ("x-hub-signature-256", GITHUB_SIGNATURE_VALUE),
            ("x-github-delivery", &long),
        ]);
        assert!(matches!(
            verify(&map, GITHUB_BODY, GITHUB_SECRET, None, 0, 300),
            Err(HookError::MalformedHeader(Malformed {
                header: "X-GitHub-Delivery",
                ..
            }))
        ));
    }

    #[test]
    fn github_configured_but_unsigned_is_missing_signature() {
        // Standard Webhooks headers do not stand in for the configured scheme's.
        let map = standard(SW_ID, "1614265330", SW_SIGNATURE);
        assert_eq!(
            verify(&map, SW_BODY, GITHUB_SECRET, Some(Scheme::GitHub), 0, 300),
            Err(HookError::MissingSignature)
        );
    }

    // ---- Standard Webhooks ----

    #[test]
    fn standard_published_example_verifies() {
        let verified = verify_sw(
            &standard(SW_ID, "1614265330", SW_SIGNATURE),
            SW_BODY,
            SW_TIMESTAMP,
        )
        .unwrap();
        assert_eq!(
            verified,
            Verified {
                scheme: Scheme::Standard,
                delivery_id: Some(SW_ID.into()),
            }
        );
        // And the test's own signer reproduces the published signature.
        assert_eq!(
            sign_standard(&sw_key(), SW_ID, SW_TIMESTAMP, SW_BODY),
            SW_SIGNATURE
        );
    }

    #[test]
    fn standard_reference_library_example_verifies() {
        // From the Rust library of github.com/standard-webhooks/standard-webhooks (`test_sign`).
        let secret = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD";
        let id = "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk";
        let body = br#"{"email":"test@example.com","username":"test_user"}"#;
        let map = standard(
            id,
            "1649367553",
            "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw=",
        );
        let verified = verify(
            &map,
            body,
            secret.as_bytes(),
            None,
            1_649_367_553,
            DEFAULT_TOLERANCE_SECS,
        )
        .unwrap();
        assert_eq!(verified.scheme, Scheme::Standard);
        assert_eq!(verified.delivery_id.as_deref(), Some(id));
    }

    #[test]
    fn standard_constructed_signature_verifies_at_any_time_in_the_window() {
        let now = 1_700_000_000;
        let body = br#"{"type":"invoice.paid","data":{"id":"in_1"}}"#;
        let signature = sign_standard(&sw_key(), "msg_abc", now, body);
        let map = standard("msg_abc", &now.to_string(), &signature);
        for at in [now - 300, now - 1, now, now + 1, now + 300] {
            assert!(verify_sw(&map, body, at).is_ok(), "now {at}");
        }
    }

    #[test]
    fn standard_secret_without_prefix_is_used_as_is() {
        let secret = b"a plain shared secret";
        let now = 1_700_000_000;
        let signature = sign_standard(secret, "msg_1", now, b"{}");
        let map = standard("msg_1", &now.to_string(), &signature);
        verify(&map, b"{}", secret, Some(Scheme::Standard), now, 300).unwrap();
        // The same bytes behind the prefix, base64-encoded, are the same key.
        let prefixed = format!(
            "whsec_{}",
            base64::engine::general_purpose::STANDARD.encode(secret)
        );
        verify(&map, b"{}", prefixed.as_bytes(), None, now, 300).unwrap();
        // Padding may be left off the secret.
        let unpadded = prefixed.trim_end_matches('=');
        verify(&map, b"{}", unpadded.as_bytes(), None, now, 300).unwrap();
    }

    #[test]
    fn standard_wrong_secret_tampered_body_or_id_is_a_bad_signature() {
        let map = standard(SW_ID, "1614265330", SW_SIGNATURE);
        let other = format!(
            "whsec_{}",
            base64::engine::general_purpose::STANDARD.encode([7u8; 24])
        );
        assert_eq!(
            verify(
                &map,
                SW_BODY,
                other.as_bytes(),
                Some(Scheme::Standard),
                SW_TIMESTAMP,
                300
            ),
            Err(HookError::BadSignature)
        );
        assert_eq!(
            verify_sw(&map, br#"{"test": 2432232315}"#, SW_TIMESTAMP),
            Err(HookError::BadSignature)
        );
        // The id and the timestamp are signed too.
        let map = standard("msg_other", "1614265330", SW_SIGNATURE);
        assert_eq!(
            verify_sw(&map, SW_BODY, SW_TIMESTAMP),
            Err(HookError::BadSignature)
        );
        let map = standard(SW_ID, "1614265331", SW_SIGNATURE);
        assert_eq!(
            verify_sw(&map, SW_BODY, SW_TIMESTAMP),
            Err(HookError::BadSignature)
        );
        // The whole `whsec_…` text as the key is not the key.
        let map = standard(SW_ID, "1614265330", SW_SIGNATURE);
        let literal = sign_standard(SW_SECRET.as_bytes(), SW_ID, SW_TIMESTAMP, SW_BODY);
        assert_ne!(literal, SW_SIGNATURE);
        assert!(verify_sw(&map, SW_BODY, SW_TIMESTAMP).is_ok());
    }

    #[test]
    fn standard_stale_and_future_timestamps() {
        let map = standard(SW_ID, "1614265330", SW_SIGNATURE);
        assert_eq!(
            verify_sw(&map, SW_BODY, SW_TIMESTAMP + 301),
            Err(HookError::Stale { age_secs: 301 })
        );
        assert_eq!(
            verify_sw(&map, SW_BODY, SW_TIMESTAMP - 301),
            Err(HookError::Stale { age_secs: -301 })
        );
        assert_eq!(
            verify_sw(&map, SW_BODY, i64::MAX),
            Err(HookError::Stale {
                age_secs: i64::MAX - SW_TIMESTAMP
            })
        );
        assert!(matches!(
            verify_sw(&map, SW_BODY, i64::MIN),
            Err(HookError::Stale { .. })
        ));
        // A tolerance of zero accepts only the very second.
        let strict = |now| verify(&map, SW_BODY, SW_SECRET.as_bytes(), None, now, 0);
        assert!(strict(SW_TIMESTAMP).is_ok());
        assert_eq!(
            strict(SW_TIMESTAMP + 1),
            Err(HookError::Stale { age_secs: 1 })
        );
        assert_eq!(
            HookError::Stale { age_secs: 301 }.to_string(),
            "the delivery's `webhook-timestamp` is 301 seconds in the past, outside the window \
             this server accepts: check the clocks of the sender and of this server (NTP); a \
             redelivery is signed afresh with the current time"
        );
        assert!(
            HookError::Stale { age_secs: -7 }
                .to_string()
                .contains("7 seconds in the future")
        );
    }

    #[test]
    fn standard_stale_is_reported_only_for_an_authentic_delivery() {
        let map = standard(
            SW_ID,
            "1614265330",
            "v1,AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
        );
        assert_eq!(
            verify_sw(&map, SW_BODY, SW_TIMESTAMP + 100_000),
            Err(HookError::BadSignature)
        );
    }

    #[test]
    fn standard_any_one_matching_v1_signature_passes() {
        let lists = [
            format!("v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= {SW_SIGNATURE}"),
            format!("{SW_SIGNATURE} v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="),
            // Other versions and unreadable entries are skipped.
            format!("v2,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v1,!!! junk  {SW_SIGNATURE}"),
            format!("v1a,{} {SW_SIGNATURE}", &SW_SIGNATURE[3..]),
        ];
        for list in &lists {
            let map = standard(SW_ID, "1614265330", list);
            assert!(verify_sw(&map, SW_BODY, SW_TIMESTAMP).is_ok(), "{list}");
        }
        // Split over two header lines.
        let map = headers(&[
            ("webhook-id", SW_ID),
            ("webhook-timestamp", "1614265330"),
            (
                "webhook-signature",
                "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc=",
            ),
            ("webhook-signature", SW_SIGNATURE),
        ]);
        assert!(verify_sw(&map, SW_BODY, SW_TIMESTAMP).is_ok());
        // The right signature under another version tag does not count.
        let map = standard(SW_ID, "1614265330", &format!("v2,{}", &SW_SIGNATURE[3..]));
        assert!(matches!(
            verify_sw(&map, SW_BODY, SW_TIMESTAMP),
            Err(HookError::MalformedHeader(_))
        ));
        let map = standard(
            SW_ID,
            "1614265330",
            "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v1,Mm7xgUVICxZfQ3bgf0h0Dof65L/IFx+PnZvnDWPCX6Q=",
        );
        assert_eq!(
            verify_sw(&map, SW_BODY, SW_TIMESTAMP),
            Err(HookError::BadSignature)
        );
    }

    #[test]
    fn standard_missing_headers() {
        // No signature at all.
        let map = headers(&[("webhook-id", SW_ID), ("webhook-timestamp", "1614265330")]);
        assert_eq!(
            verify_sw(&map, SW_BODY, SW_TIMESTAMP),
            Err(HookError::MissingSignature)
        );
        // A signature without the id or the timestamp it covers.
        let map = headers(&[
            ("webhook-timestamp", "1614265330"),
            ("webhook-signature", SW_SIGNATURE),
        ]);
        assert!(matches!(
            verify_sw(&map, SW_BODY, SW_TIMESTAMP),
            Err(HookError::MalformedHeader(Malformed {
                header: "webhook-id",
                ..
            }))
        ));
        let map = standard("", "1614265330", SW_SIGNATURE);
        assert!(matches!(
            verify_sw(&map, SW_BODY, SW_TIMESTAMP),
            Err(HookError::MalformedHeader(Malformed {
                header: "webhook-id",
                ..
            }))
        ));
        let map = headers(&[("webhook-id", SW_ID), ("webhook-signature", SW_SIGNATURE)]);
        assert!(matches!(
            verify_sw(&map, SW_BODY, SW_TIMESTAMP),
            Err(HookError::MalformedHeader(Malformed {
                header: "webhook-timestamp",
                ..
            }))
        ));
    }

    #[test]
    fn standard_malformed_headers() {
        for timestamp in [
            "",
            "-1614265330",
            "+1614265330",
            "1614265330.0",
            "soon",
            "99999999999999999999",
        ] {
            let map = standard(SW_ID, timestamp, SW_SIGNATURE);
            assert!(
                matches!(
                    verify_sw(&map, SW_BODY, SW_TIMESTAMP),
                    Err(HookError::MalformedHeader(Malformed {
                        header: "webhook-timestamp",
                        ..
                    }))
                ),
                "{timestamp:?}"
            );
        }
        for signature in [
            "",
            "   ",
            "v1",
            "v1,",
            "v1,***",
            "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        ] {
            let map = standard(SW_ID, "1614265330", signature);
            assert!(
                matches!(
                    verify_sw(&map, SW_BODY, SW_TIMESTAMP),
                    Err(HookError::MalformedHeader(Malformed {
                        header: "webhook-signature",
                        ..
                    }))
                ),
                "{signature:?}"
            );
        }
        // Well-formed base64 of the wrong length is simply not a match.
        let map = standard(SW_ID, "1614265330", "v1,AAAA");
        assert_eq!(
            verify_sw(&map, SW_BODY, SW_TIMESTAMP),
            Err(HookError::BadSignature)
        );
        let map = headers(&[
            ("webhook-id", SW_ID),
            ("webhook-id", "msg_2"),
            ("webhook-timestamp", "1614265330"),
            ("webhook-signature", SW_SIGNATURE),
        ]);
        assert!(matches!(
            verify_sw(&map, SW_BODY, SW_TIMESTAMP),
            Err(HookError::MalformedHeader(_))
        ));
    }

    #[test]
    fn secrets_that_cannot_be_used_are_refused() {
        let map = standard(SW_ID, "1614265330", SW_SIGNATURE);
        for secret in [&b"whsec_not*base64"[..], b"whsec_", b""] {
            let err = verify(&map, SW_BODY, secret, None, SW_TIMESTAMP, 300).unwrap_err();
            assert!(matches!(err, HookError::InvalidSecret(_)), "{err:?}");
            assert_eq!(check_secret(Scheme::Standard, secret), Err(err));
        }
        let err = verify(
            &github(GITHUB_SIGNATURE_VALUE),
            GITHUB_BODY,
            b"",
            None,
            0,
            300,
        )
        .unwrap_err();
        assert!(matches!(err, HookError::InvalidSecret(_)), "{err:?}");
        assert!(check_secret(Scheme::GitHub, b"").is_err());
        assert!(check_secret(Scheme::GitHub, GITHUB_SECRET).is_ok());
        assert!(check_secret(Scheme::Standard, SW_SECRET.as_bytes()).is_ok());
        // A GitHub secret is used as is, even with the prefix.
        assert!(check_secret(Scheme::GitHub, b"whsec_not*base64").is_ok());
    }

    // ---- Which scheme ----

    #[test]
    fn auto_detection_prefers_standard_then_github() {
        assert_eq!(Scheme::detect(&HeaderMap::new()), None);
        assert_eq!(
            Scheme::detect(&github(GITHUB_SIGNATURE_VALUE)),
            Some(Scheme::GitHub)
        );
        let mut both = standard(SW_ID, "1614265330", SW_SIGNATURE);
        both.insert(
            GITHUB_SIGNATURE,
            HeaderValue::from_static(GITHUB_SIGNATURE_VALUE),
        );
        assert_eq!(Scheme::detect(&both), Some(Scheme::Standard));
        // Detected Standard is verified as Standard (the GitHub header is ignored).
        let verified = verify(
            &both,
            SW_BODY,
            SW_SECRET.as_bytes(),
            None,
            SW_TIMESTAMP,
            300,
        )
        .unwrap();
        assert_eq!(verified.scheme, Scheme::Standard);
        // Header names are case-insensitive.
        let map = headers(&[("x-hub-signature-256", GITHUB_SIGNATURE_VALUE)]);
        assert_eq!(
            verify(&map, GITHUB_BODY, GITHUB_SECRET, None, 0, 300).map(|v| v.scheme),
            Ok(Scheme::GitHub)
        );
    }

    #[test]
    fn unsigned_delivery_is_missing_signature() {
        let map = headers(&[("content-type", "application/json"), ("webhook-id", SW_ID)]);
        for scheme in [None, Some(Scheme::GitHub), Some(Scheme::Standard)] {
            assert_eq!(
                verify(&map, b"{}", SW_SECRET.as_bytes(), scheme, 0, 300),
                Err(HookError::MissingSignature),
                "{scheme:?}"
            );
        }
    }

    #[test]
    fn messages_never_echo_the_secret_or_a_signature() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let errors = [
            verify_sw(
                &standard(SW_ID, "1614265330", SW_SIGNATURE),
                b"x",
                SW_TIMESTAMP,
            ),
            verify_sw(
                &standard(SW_ID, "1614265330", "v1,x"),
                SW_BODY,
                SW_TIMESTAMP,
            ),
            verify_sw(&standard(SW_ID, "1614265330", SW_SIGNATURE), SW_BODY, 0),
            verify_sw(&standard(SW_ID, "nope", SW_SIGNATURE), SW_BODY, 0),
            verify(
                &github("sha256=00"),
                GITHUB_BODY,
                GITHUB_SECRET,
                None,
                0,
                300,
            ),
            verify(
                &github(GITHUB_SIGNATURE_VALUE),
                b"tampered",
                GITHUB_SECRET,
                None,
                0,
                300,
            ),
            verify(&HeaderMap::new(), b"", GITHUB_SECRET, None, 0, 300),
        ];
        for result in errors {
            let text = result.unwrap_err().to_string();
            for needle in [
                secret,
                &secret[6..],
                "It's a Secret",
                &SW_SIGNATURE[3..],
                &GITHUB_SIGNATURE_VALUE[7..],
                "Ceo5",
            ] {
                assert!(!text.contains(needle), "{text}");
            }
            assert!(text.starts_with("the "), "{text}");
        }
        assert_eq!(
            HookError::MalformedHeader(Malformed {
                header: "webhook-timestamp",
                problem: "is missing"
            })
            .to_string(),
            "the delivery's `webhook-timestamp` is missing"
        );
    }

    #[test]
    fn no_input_panics() {
        let values = [
            "",
            " ",
            ",",
            "v1,",
            "v1,=",
            "v1,====",
            "sha256=",
            "sha256=ZZ",
            "0",
            "-0",
            "18446744073709551616",
            "\t",
            "é",
        ];
        let names = [
            "x-hub-signature-256",
            "x-github-delivery",
            "webhook-id",
            "webhook-timestamp",
            "webhook-signature",
        ];
        for value in values {
            let Ok(value) = HeaderValue::from_str(value) else {
                continue;
            };
            for name in names {
                for other in names {
                    let mut map = HeaderMap::new();
                    map.insert(HeaderName::from_static(name), value.clone());
                    map.append(HeaderName::from_static(other), value.clone());
                    for scheme in [None, Some(Scheme::GitHub), Some(Scheme::Standard)] {
                        for secret in [&b""[..], b"whsec_", b"whsec_AAAA", b"k"] {
                            for now in [i64::MIN, 0, i64::MAX] {
                                let _ = verify(&map, b"body", secret, scheme, now, u64::MAX);
                                let _ = verify(&map, b"body", secret, scheme, now, 0);
                            }
                        }
                    }
                }
            }
        }
    }
}
