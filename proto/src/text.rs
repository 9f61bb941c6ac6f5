//! What free text that names something — a session key, an approver's name — may hold: any
//! character but those that change how the text around them is shown. Control characters (a line
//! break, a NUL, the ESC of an ANSI sequence that recolours or clears a terminal), the Unicode
//! bidirectional controls that reorder a line (U+061C, U+200E–U+200F, U+202A–U+202E,
//! U+2066–U+2069: "Trojan Source"), and the line and paragraph separators (U+2028, U+2029) would
//! let a name garble or forge what `ninetrix ps`, a log line or the console shows next to it.
//! Also the one rule for cutting text to show it: [`preview`].

/// Whether `c` may not appear in a name (see the module).
pub fn is_unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{200E}'
                | '\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// The first character of `text` that may not appear in a name, if any.
pub fn first_unsafe(text: &str) -> Option<char> {
    text.chars().find(|&c| is_unsafe_char(c))
}

/// The same rule as a JSON Schema `pattern` (for the OpenAPI document): one or more characters,
/// none of them unsafe.
pub const SAFE_TEXT_PATTERN: &str =
    "^[^\\u0000-\\u001F\\u007F-\\u009F\\u061C\\u200E\\u200F\\u2028-\\u202E\\u2066-\\u2069]+$";

/// At most `max` characters of `text`, with `…` when cut (on a character boundary).
pub fn preview(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preview_cuts_on_a_character_and_says_so() {
        assert_eq!(preview("héllo", 2), "hé…");
        assert_eq!(preview("héllo", 5), "héllo");
        assert_eq!(preview("", 0), "");
    }

    #[test]
    fn text_that_reorders_recolours_or_breaks_a_line_is_unsafe() {
        for bad in [
            "a\nb",
            "\u{1b}[2Jcleared",
            "admin\u{202E}gnp.exe",
            "x\u{2066}y",
            "line\u{2028}two",
            "para\u{2029}",
            "nul\0",
            "\u{85}next-line",
        ] {
            assert!(first_unsafe(bad).is_some(), "{bad:?}");
        }
        for good in [
            "customer 42 / eu",
            "Ana María",
            "東京",
            "emoji 🎉",
            "a-b_c.d",
        ] {
            assert_eq!(first_unsafe(good), None, "{good:?}");
        }
    }
}
