//! The names the API takes for pools and agents — in a path (after percent-decoding) or a body —
//! follow the agentfile's rule, so no name the CLI could not have written (`..`, `/`, a control
//! or bidirectional character, an upper-case twin of another pool) is ever stored or routed; and
//! free text that names a person (an approver) holds no character that garbles what is shown
//! beside it (`ninetrix_proto::text`).

use ninetrix_agentfile::names::{MAX_NAME_LEN, is_valid_name};
use ninetrix_proto::api::ErrorCode;

use crate::error::ApiError;

/// The rule, for messages.
pub(crate) fn rule() -> String {
    format!(
        "lower-case letters, digits, `-` and `_`, starting with a letter or digit, at most {MAX_NAME_LEN} characters, as in the agentfile"
    )
}

/// A short, printable rendering of a refused value for a message: at most 64 characters, with
/// unsafe characters escaped (a refused name is echoed, never replayed as it was).
pub(crate) fn shown(value: &str) -> String {
    let mut out: String = value
        .chars()
        .take(64)
        .map(|c| {
            if ninetrix_proto::text::is_unsafe_char(c) {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect();
    if value.chars().count() > 64 {
        out.push('…');
    }
    out
}

/// Checks a pool or agent name given in a body; the message names `what`.
pub(crate) fn check(what: &str, name: &str) -> Result<(), String> {
    if is_valid_name(name) {
        Ok(())
    } else {
        Err(format!(
            "{what} {:?} is not a name: {}",
            shown(name),
            rule()
        ))
    }
}

/// Checks a pool or agent name from the path (percent-decoded): 400 `invalid_path`.
pub(crate) fn check_path(what: &str, name: &str) -> Result<(), ApiError> {
    check(what, name).map_err(|message| ApiError::BadRequest {
        code: ErrorCode::InvalidPath,
        message: format!("the {message}"),
    })
}

/// Checks free text that names a person: 1 to `max` characters, none unsafe.
pub(crate) fn check_person(what: &str, text: &str, max: usize) -> Result<(), String> {
    let n = text.chars().count();
    if text.trim().is_empty() || n > max {
        return Err(format!(
            "{what} must have 1 to {max} characters (it has {n})"
        ));
    }
    if let Some(c) = ninetrix_proto::text::first_unsafe(text) {
        return Err(format!(
            "{what} must not contain control, bidirectional-control or line-separator characters (found U+{:04X}); names are shown in terminals and pages as they are",
            u32::from(c)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_agentfile() {
        for good in ["p", "shop", "pool-1", "a_b", "9lives"] {
            assert!(check("pool", good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "..",
            "a/b",
            "../etc",
            "Shop",
            "-x",
            "a b",
            "a\u{202E}b",
            &"x".repeat(49),
        ] {
            let message = check("pool", bad).unwrap_err();
            assert!(message.starts_with("pool \""), "{message}");
        }
    }

    #[test]
    fn refused_values_are_echoed_short_and_escaped() {
        assert_eq!(shown("a\u{1b}[31mred"), "a\\u{1b}[31mred");
        let long = "k".repeat(1_000_000);
        assert_eq!(shown(&long).chars().count(), 65);
    }

    #[test]
    fn a_persons_name_is_free_text_without_escapes() {
        assert!(check_person("name", "Ana María", 200).is_ok());
        for bad in ["", "  ", "\u{1b}[2Jadmin", "bob\u{202E}", "a\u{2028}b"] {
            assert!(check_person("name", bad, 200).is_err(), "{bad:?}");
        }
        assert!(check_person("name", &"n".repeat(201), 200).is_err());
    }
}
