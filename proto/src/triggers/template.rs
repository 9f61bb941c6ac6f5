//! Webhook templates: how a trigger's `message:` and `session:` texts are rendered from the JSON
//! body of a delivery.
//!
//! This module owns the template syntax and its rendering, nothing else (no I/O). A template is
//! literal text with `{{ path }}` placeholders; a path is dot-separated object keys and array
//! indices into the body — `issue.title`, `message.chat.id`, `commits.0.id`. Whitespace is allowed
//! just inside the braces, not within the path. There is no escape for a literal `{{`: a `{{`
//! always opens a placeholder, and one without its `}}` is a parse error. A lone `}}` is plain
//! text. Keys that contain a dot, a brace or whitespace cannot be addressed.
//!
//! Rendering inserts strings as they are, numbers and booleans as their JSON text, objects and
//! arrays as compact JSON. A path that is not in the body, or that holds `null`, is an error that
//! names the path, says where the lookup stopped and which keys exist there (with a "did you
//! mean" for a likely typo): a webhook whose payload changed shape is rejected with a message the
//! sender's operator can act on, rather than turned into a message with a hole in it. The
//! rendered text is capped at [`MAX_RENDERED_BYTES`].

use std::fmt;
use std::str::FromStr;

use serde_json::Value;
use serde_json::value::RawValue;

/// The most bytes a rendered template may have (100 KiB): literal text and inserted values
/// together. A template that would render longer fails with [`TemplateError::TooLong`].
pub const MAX_RENDERED_BYTES: usize = 100 * 1024;

/// At most this many keys are listed when a path is not found; the rest are counted.
const MAX_LISTED_KEYS: usize = 20;

/// The two characters that open a placeholder.
const OPEN: &str = "{{";
/// The two characters that close a placeholder.
const CLOSE: &str = "}}";

/// Why a template could not be parsed or rendered.
///
/// Parse errors carry `offset`: the 0-based count of characters (not bytes) before the `{{` of
/// the offending placeholder. Render errors carry the placeholder's path as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `{{` with no `}}` after it.
    #[error(
        "the `{{{{` at character {offset} is never closed: end the placeholder with `}}}}`, e.g. \
         `{{{{ issue.title }}}}` (a template has no escape for a literal `{{{{`)"
    )]
    Unclosed {
        /// Characters before the `{{`.
        offset: usize,
    },
    /// A placeholder with nothing (or only whitespace) between its braces.
    #[error(
        "the placeholder at character {offset} is empty: name a value of the body by its path, \
         e.g. `{{{{ issue.title }}}}` or `{{{{ message.chat.id }}}}`"
    )]
    EmptyPath {
        /// Characters before the `{{`.
        offset: usize,
    },
    /// A path with an empty segment: a leading, trailing or doubled dot.
    #[error(
        "the path `{path}` at character {offset} has an empty segment: separate keys and indices \
         with single dots, e.g. `message.chat.id` or `commits.0.id`"
    )]
    EmptySegment {
        /// Characters before the `{{`.
        offset: usize,
        /// The path as written.
        path: String,
    },
    /// A path with a character no path may hold (whitespace or a brace).
    #[error(
        "the path `{path}` at character {offset} contains {found:?}, which a path cannot hold: \
         write keys and indices separated by dots with no spaces, e.g. `issue.title`"
    )]
    InvalidPath {
        /// Characters before the `{{`.
        offset: usize,
        /// The text between the braces, trimmed.
        path: String,
        /// The first character that cannot be in a path.
        found: char,
    },
    /// The body has no such key: the lookup stopped at an object without it.
    #[error("{}", no_key_message(.path, .at, .key, .keys, .suggestion.as_deref()))]
    NoKey {
        /// The placeholder's path.
        path: String,
        /// The part of the path that was found (empty for the body itself).
        at: String,
        /// The key that object lacks.
        key: String,
        /// The keys the object has, sorted.
        keys: Vec<String>,
        /// A path that is probably what was meant (the found part and a key spelled closely).
        suggestion: Option<String>,
    },
    /// The lookup reached an array and the next segment is not one of its indices.
    #[error("{}", no_index_message(.path, .at, .segment, *.len))]
    NoIndex {
        /// The placeholder's path.
        path: String,
        /// The part of the path that was found: the array (empty for the body itself).
        at: String,
        /// The segment that is not an index of the array.
        segment: String,
        /// The array's length.
        len: usize,
    },
    /// The lookup reached a string, number, boolean or null where the path goes on.
    #[error(
        "the body has no `{path}`: {} is {kind}, so it has no `{next}`; check the sender's \
         payload format",
        name(.at)
    )]
    NotContainer {
        /// The placeholder's path.
        path: String,
        /// The part of the path that was found (empty for the body itself).
        at: String,
        /// What was found there: "a string", "a number", "a boolean" or "null".
        kind: &'static str,
        /// The segment that was to be looked up in it.
        next: String,
    },
    /// The path exists and holds `null`.
    #[error(
        "`{path}` is null in this body, and a template inserts only values that are present: \
         template a field the sender always sets"
    )]
    Null {
        /// The placeholder's path.
        path: String,
    },
    /// The rendered text would be longer than [`MAX_RENDERED_BYTES`].
    #[error(
        "the rendered text would be longer than {limit} bytes (reached at `{path}`): template a \
         smaller part of the body than a whole object or array"
    )]
    TooLong {
        /// The cap, in bytes.
        limit: usize,
        /// The placeholder whose value crossed it, or `(literal text)`.
        path: String,
    },
}

/// The most characters of one key of the body that an error message repeats.
pub const MAX_ECHOED_KEY_CHARS: usize = 200;

/// `text` cut to `max` characters, with `…` in place of the rest.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

/// How a message names the part of a path that was found.
fn name(at: &str) -> String {
    if at.is_empty() {
        "the body".to_owned()
    } else {
        format!("`{at}`")
    }
}

fn no_key_message(
    path: &str,
    at: &str,
    key: &str,
    keys: &[String],
    suggestion: Option<&str>,
) -> String {
    let mut text = format!("the body has no `{path}`: {} has no key `{key}`", name(at));
    if let Some(s) = suggestion {
        text.push_str(&format!(" (did you mean `{s}`?)"));
    }
    if keys.is_empty() {
        text.push_str("; it is an empty object");
    } else {
        // A key of the body is the sender's text: each is echoed at most MAX_ECHOED_KEY_CHARS
        // long, so a body with megabyte keys does not come back in the message.
        let listed: Vec<String> = keys
            .iter()
            .take(MAX_LISTED_KEYS)
            .map(|k| clip(k, MAX_ECHOED_KEY_CHARS))
            .collect();
        text.push_str(&format!("; its keys are: {}", listed.join(", ")));
        if keys.len() > MAX_LISTED_KEYS {
            text.push_str(&format!(" and {} more", keys.len() - MAX_LISTED_KEYS));
        }
    }
    text
}

fn no_index_message(path: &str, at: &str, segment: &str, len: usize) -> String {
    let what = name(at);
    let is_index = !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit());
    if !is_index {
        format!(
            "the body has no `{path}`: {what} is an array, so `{segment}` cannot address it; \
             address its items by number, e.g. `{}0`",
            prefix(at)
        )
    } else if len == 0 {
        format!("the body has no `{path}`: {what} is an empty array in this body")
    } else {
        format!(
            "the body has no `{path}`: {what} has {len} item{} (indices 0 to {})",
            if len == 1 { "" } else { "s" },
            len - 1
        )
    }
}

/// `at` followed by a dot, or nothing at the body's root.
fn prefix(at: &str) -> String {
    if at.is_empty() {
        String::new()
    } else {
        format!("{at}.")
    }
}

/// A parsed template: literal text and placeholders, rendered against a JSON body with
/// [`Template::render`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    /// The text it was parsed from.
    source: String,
    /// Literal text and placeholders, in order.
    parts: Vec<Part>,
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// Text kept as it is.
    Literal(String),
    /// A value of the body.
    Placeholder(Path),
}

/// A placeholder's path: its text (trimmed) and its segments.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Path {
    /// As written, without the surrounding whitespace, e.g. `commits.0.id`.
    text: String,
}

impl Path {
    fn segments(&self) -> std::str::Split<'_, char> {
        self.text.split('.')
    }
}

impl Template {
    /// Parses a template: literal text with `{{ path }}` placeholders.
    ///
    /// Fails on a `{{` without a `}}`, an empty placeholder, a path with an empty segment
    /// (`a..b`, `.a`, `a.`) or a path holding whitespace or a brace; the error gives the
    /// character offset of the placeholder.
    pub fn parse(text: &str) -> Result<Template, TemplateError> {
        let mut parts = Vec::new();
        let mut rest = text;
        // Bytes of `text` consumed so far; offsets are counted in characters when reported.
        let mut consumed = 0;
        while let Some(open) = rest.find(OPEN) {
            let offset = text[..consumed + open].chars().count();
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            let after_open = &rest[open + OPEN.len()..];
            let Some(close) = after_open.find(CLOSE) else {
                return Err(TemplateError::Unclosed { offset });
            };
            let path = parse_path(&after_open[..close], offset)?;
            parts.push(Part::Placeholder(path));
            let used = open + OPEN.len() + close + CLOSE.len();
            consumed += used;
            rest = &rest[used..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        // Its literal text alone would be longer than any rendering may be: it could never
        // render (the agentfile and the API's registration both parse templates here).
        let literal: usize = parts
            .iter()
            .map(|p| match p {
                Part::Literal(text) => text.len(),
                Part::Placeholder(_) => 0,
            })
            .sum();
        if literal > MAX_RENDERED_BYTES {
            return Err(TemplateError::TooLong {
                limit: MAX_RENDERED_BYTES,
                path: "(literal text)".to_owned(),
            });
        }
        Ok(Template {
            source: text.to_owned(),
            parts,
        })
    }

    /// The text the template was parsed from.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The paths of the placeholders, each once, in the order they first appear (e.g. for a
    /// validation message listing what a trigger reads from its bodies).
    pub fn paths(&self) -> Vec<&str> {
        let mut paths: Vec<&str> = Vec::new();
        for part in &self.parts {
            if let Part::Placeholder(path) = part
                && !paths.contains(&path.text.as_str())
            {
                paths.push(&path.text);
            }
        }
        paths
    }

    /// Renders the template against a JSON body.
    ///
    /// Strings are inserted as they are, numbers and booleans as their JSON text, objects and
    /// arrays as compact JSON. A path that is not in the body, or that holds `null`, is an
    /// error naming it; so is a result longer than [`MAX_RENDERED_BYTES`].
    pub fn render(&self, body: &Value) -> Result<String, TemplateError> {
        self.render_inner(body, None)
    }

    /// [`Template::render`], with numbers inserted as their text in `raw` — the same body as
    /// received — rather than as `serde_json` holds them: a number past 2^64, or with more
    /// digits than an `f64` keeps (`12345678901234567890123`, `0.1000000000000000000001`),
    /// comes out as the sender wrote it.
    pub fn render_raw(&self, body: &Value, raw: &RawValue) -> Result<String, TemplateError> {
        self.render_inner(body, Some(raw))
    }

    fn render_inner(&self, body: &Value, raw: Option<&RawValue>) -> Result<String, TemplateError> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => {
                    if out.len() + text.len() > MAX_RENDERED_BYTES {
                        return Err(TemplateError::TooLong {
                            limit: MAX_RENDERED_BYTES,
                            path: "(literal text)".to_owned(),
                        });
                    }
                    out.push_str(text);
                }
                Part::Placeholder(path) => {
                    let value = lookup(body, path)?;
                    match (value, raw.and_then(|raw| raw_at(raw, path))) {
                        (Value::Number(_), Some(text)) => {
                            if out.len() + text.len() > MAX_RENDERED_BYTES {
                                return Err(TemplateError::TooLong {
                                    limit: MAX_RENDERED_BYTES,
                                    path: path.text.clone(),
                                });
                            }
                            out.push_str(text);
                        }
                        _ => insert(&mut out, value, path)?,
                    }
                }
            }
        }
        Ok(out)
    }
}

impl FromStr for Template {
    type Err = TemplateError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Template::parse(text)
    }
}

impl fmt::Display for Template {
    /// The text the template was parsed from.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// Parses the text between `{{` and `}}`.
fn parse_path(inner: &str, offset: usize) -> Result<Path, TemplateError> {
    let text = inner.trim();
    if text.is_empty() {
        return Err(TemplateError::EmptyPath { offset });
    }
    if let Some(found) = text
        .chars()
        .find(|c| c.is_whitespace() || *c == '{' || *c == '}')
    {
        return Err(TemplateError::InvalidPath {
            offset,
            path: text.to_owned(),
            found,
        });
    }
    if text.split('.').any(str::is_empty) {
        return Err(TemplateError::EmptySegment {
            offset,
            path: text.to_owned(),
        });
    }
    Ok(Path {
        text: text.to_owned(),
    })
}

/// The value at `path` in `body`, or why there is none.
fn lookup<'v>(body: &'v Value, path: &Path) -> Result<&'v Value, TemplateError> {
    let mut current = body;
    // Bytes of `path.text` that have been found so far.
    let mut found_len = 0;
    for segment in path.segments() {
        let at = &path.text[..found_len];
        let next = match current {
            Value::Object(map) => map.get(segment).ok_or_else(|| {
                let mut keys: Vec<String> = map.keys().cloned().collect();
                keys.sort();
                let suggestion =
                    crate::suggest::closest(segment, &keys).map(|k| format!("{}{k}", prefix(at)));
                TemplateError::NoKey {
                    path: path.text.clone(),
                    at: at.to_owned(),
                    key: segment.to_owned(),
                    keys,
                    suggestion,
                }
            })?,
            Value::Array(items) => {
                index(segment)
                    .and_then(|i| items.get(i))
                    .ok_or_else(|| TemplateError::NoIndex {
                        path: path.text.clone(),
                        at: at.to_owned(),
                        segment: segment.to_owned(),
                        len: items.len(),
                    })?
            }
            Value::String(_) | Value::Number(_) | Value::Bool(_) | Value::Null => {
                return Err(TemplateError::NotContainer {
                    path: path.text.clone(),
                    at: at.to_owned(),
                    kind: kind(current),
                    next: segment.to_owned(),
                });
            }
        };
        found_len += if found_len == 0 {
            segment.len()
        } else {
            segment.len() + 1
        };
        current = next;
    }
    Ok(current)
}

/// The text of the value at `path` in `raw` (a body as received), if it is a number.
fn raw_at<'r>(raw: &'r RawValue, path: &Path) -> Option<&'r str> {
    let mut current = raw;
    for segment in path.segments() {
        let text = current.get();
        current = match text.trim_start().as_bytes().first()? {
            b'{' => {
                // The last of duplicate keys, as `serde_json::Value` keeps it.
                let map: std::collections::HashMap<String, &'r RawValue> =
                    serde_json::from_str(text).ok()?;
                map.get(segment).copied()?
            }
            b'[' => {
                let items: Vec<&'r RawValue> = serde_json::from_str(text).ok()?;
                items.get(index(segment)?).copied()?
            }
            _ => return None,
        };
    }
    let text = current.get().trim();
    text.bytes()
        .all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'))
        .then_some(text)
}

/// A segment as an array index: ASCII digits only (no sign), in range of `usize`.
fn index(segment: &str) -> Option<usize> {
    if segment.bytes().all(|b| b.is_ascii_digit()) {
        segment.parse().ok()
    } else {
        None
    }
}

/// How a message names the kind of a scalar value.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::String(_) => "a string",
        Value::Number(_) => "a number",
        Value::Bool(_) => "a boolean",
        Value::Null => "null",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Appends a value's text to `out`, within [`MAX_RENDERED_BYTES`].
fn insert(out: &mut String, value: &Value, path: &Path) -> Result<(), TemplateError> {
    let too_long = || TemplateError::TooLong {
        limit: MAX_RENDERED_BYTES,
        path: path.text.clone(),
    };
    let room = MAX_RENDERED_BYTES.saturating_sub(out.len());
    match value {
        Value::Null => {
            return Err(TemplateError::Null {
                path: path.text.clone(),
            });
        }
        Value::String(s) => {
            if s.len() > room {
                return Err(too_long());
            }
            out.push_str(s);
        }
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Array(_) | Value::Object(_) => {
            // Serialised through a writer that refuses to grow past the room left, so a huge
            // object is never turned into a huge string only to be rejected.
            let mut writer = Capped {
                bytes: Vec::new(),
                room,
            };
            serde_json::to_writer(&mut writer, value).map_err(|_| too_long())?;
            // serde_json writes valid UTF-8; a failure here cannot happen, and is not a panic.
            let text = String::from_utf8(writer.bytes).map_err(|_| too_long())?;
            out.push_str(&text);
        }
    }
    if out.len() > MAX_RENDERED_BYTES {
        return Err(too_long());
    }
    Ok(())
}

/// A byte sink that fails once more than `room` bytes are written to it.
struct Capped {
    bytes: Vec<u8>,
    room: usize,
}

impl std::io::Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > self.room {
            return Err(std::io::Error::other("rendered value too long"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(template: &str, body: &Value) -> Result<String, TemplateError> {
        Template::parse(template)?.render(body)
    }

    #[test]
    fn numbers_past_what_f64_keeps_render_as_the_sender_wrote_them() {
        let text = r#"{"id": 12345678901234567890123, "n": [1, {"x": 9007199254740993.5}], "small": 42, "neg": -0.10000000000000000000001}"#;
        let body: Value = serde_json::from_str(text).unwrap();
        let raw: &RawValue = serde_json::from_str(text).unwrap();
        let t = |s: &str| Template::parse(s).unwrap();
        assert_eq!(
            t("{{ id }}/{{ n.1.x }}/{{ small }}/{{ neg }}").render_raw(&body, raw),
            Ok("12345678901234567890123/9007199254740993.5/42/-0.10000000000000000000001".into())
        );
        // Without the raw text the same placeholder loses digits (what `render` does).
        assert_ne!(
            t("{{ id }}").render(&body).unwrap(),
            "12345678901234567890123"
        );
        // Strings and objects are unchanged.
        let text = r#"{"s": "12345678901234567890123", "o": {"a": 1}}"#;
        let body: Value = serde_json::from_str(text).unwrap();
        let raw: &RawValue = serde_json::from_str(text).unwrap();
        assert_eq!(
            t("{{ s }} {{ o }}").render_raw(&body, raw),
            Ok(r#"12345678901234567890123 {"a":1}"#.into())
        );
        // Duplicate keys: the last, as `Value` keeps it.
        let text = r#"{"k": 1, "k": 22222222222222222222222}"#;
        let body: Value = serde_json::from_str(text).unwrap();
        let raw: &RawValue = serde_json::from_str(text).unwrap();
        assert_eq!(
            t("{{ k }}").render_raw(&body, raw),
            Ok("22222222222222222222222".into())
        );
    }

    #[test]
    fn long_keys_are_echoed_clipped() {
        let long = "k".repeat(1_000_000);
        let body = serde_json::json!({ long.clone(): 1 });
        let err = render("{{ nope }}", &body).unwrap_err().to_string();
        assert!(err.len() < 1000, "{} bytes", err.len());
        assert!(
            err.contains(&format!("{}…", "k".repeat(MAX_ECHOED_KEY_CHARS))),
            "{err:.300}"
        );
        assert_eq!(clip("abc", 2), "ab…");
        assert_eq!(clip("ab", 2), "ab");
        assert_eq!(clip("éé", 1), "é…");
    }

    /// The shape of GitHub's `issues` event (trimmed).
    fn github_issue() -> Value {
        json!({
            "action": "opened",
            "issue": {
                "number": 1347,
                "title": "Found a bug",
                "body": "I'm having a problem with this.",
                "user": { "login": "octocat", "id": 1 },
                "labels": [ { "name": "bug" }, { "name": "triage" } ],
                "milestone": null,
                "locked": false
            },
            "repository": { "full_name": "octocat/Hello-World" },
            "sender": { "login": "octocat" }
        })
    }

    /// The shape of a Telegram `Update` carrying a text message.
    fn telegram_update() -> Value {
        json!({
            "update_id": 10000,
            "message": {
                "message_id": 1365,
                "date": 1441645532,
                "chat": { "id": 42, "type": "private", "first_name": "Ada" },
                "from": { "id": 42, "is_bot": false, "first_name": "Ada" },
                "text": "/start"
            }
        })
    }

    #[test]
    fn renders_a_github_issue_message() {
        assert_eq!(
            render(
                "New issue #{{ issue.number }}: {{ issue.title }}",
                &github_issue()
            )
            .unwrap(),
            "New issue #1347: Found a bug"
        );
    }

    #[test]
    fn renders_a_telegram_chat_id_as_a_session_key() {
        let t = Template::parse("{{ message.chat.id }}").unwrap();
        assert_eq!(t.render(&telegram_update()).unwrap(), "42");
        let t = Template::parse("telegram-{{message.chat.id}}").unwrap();
        assert_eq!(t.render(&telegram_update()).unwrap(), "telegram-42");
    }

    #[test]
    fn scalars_render_as_their_json_text_and_strings_as_they_are() {
        let body = json!({"s": "a \"quoted\" line\nand more", "f": 1.5, "neg": -3, "t": true,
                          "big": 18446744073709551615u64});
        assert_eq!(
            render("{{s}}|{{f}}|{{neg}}|{{t}}|{{big}}", &body).unwrap(),
            "a \"quoted\" line\nand more|1.5|-3|true|18446744073709551615"
        );
        assert_eq!(
            render("locked={{ issue.locked }}", &github_issue()).unwrap(),
            "locked=false"
        );
    }

    #[test]
    fn array_indices_address_items() {
        let body = json!({"commits": [{"id": "abc"}, {"id": "def"}], "matrix": [[1, 2], [3, 4]]});
        assert_eq!(render("{{ commits.1.id }}", &body).unwrap(), "def");
        assert_eq!(render("{{ matrix.1.0 }}", &body).unwrap(), "3");
        assert_eq!(render("{{ 0 }}", &json!(["first"])).unwrap(), "first");
    }

    #[test]
    fn objects_and_arrays_render_as_compact_json() {
        let body = github_issue();
        // Compared as JSON: key order depends on serde_json's `preserve_order` feature.
        let user = render("{{ issue.user }}", &body).unwrap();
        assert!(!user.contains(' '), "{user}");
        assert_eq!(
            serde_json::from_str::<Value>(&user).unwrap(),
            body["issue"]["user"]
        );
        assert_eq!(
            render("labels: {{ issue.labels }}", &body).unwrap(),
            r#"labels: [{"name":"bug"},{"name":"triage"}]"#
        );
        assert_eq!(
            render("{{ e }}{{ o }}", &json!({"e": [], "o": {}})).unwrap(),
            "[]{}"
        );
    }

    #[test]
    fn a_digit_key_of_an_object_is_a_key() {
        let body = json!({"by_year": {"2024": "leap"}});
        assert_eq!(render("{{ by_year.2024 }}", &body).unwrap(), "leap");
    }

    #[test]
    fn literal_text_is_kept_as_it_is() {
        let t = Template::parse("no placeholders } }} { here — ünïcode").unwrap();
        assert!(t.paths().is_empty());
        assert_eq!(
            t.render(&json!(null)).unwrap(),
            "no placeholders } }} { here — ünïcode"
        );
        assert_eq!(Template::parse("").unwrap().render(&json!({})).unwrap(), "");
        assert_eq!(t.as_str(), "no placeholders } }} { here — ünïcode");
        assert_eq!(t.to_string(), t.as_str());
    }

    #[test]
    fn paths_lists_each_path_once_in_order() {
        let t: Template = "{{ b.c }} {{a}} {{ b.c }} {{ commits.0.id }}"
            .parse()
            .unwrap();
        assert_eq!(t.paths(), vec!["b.c", "a", "commits.0.id"]);
    }

    #[test]
    fn a_missing_key_names_the_path_the_keys_and_a_likely_typo() {
        let err = render("{{ issue.titel }}", &github_issue()).unwrap_err();
        assert_eq!(
            err,
            TemplateError::NoKey {
                path: "issue.titel".into(),
                at: "issue".into(),
                key: "titel".into(),
                keys: [
                    "body",
                    "labels",
                    "locked",
                    "milestone",
                    "number",
                    "title",
                    "user"
                ]
                .map(String::from)
                .to_vec(),
                suggestion: Some("issue.title".into()),
            }
        );
        assert_eq!(
            err.to_string(),
            "the body has no `issue.titel`: `issue` has no key `titel` (did you mean \
             `issue.title`?); its keys are: body, labels, locked, milestone, number, title, user"
        );
    }

    #[test]
    fn a_missing_top_level_key_names_the_body() {
        let err = render("{{ mesage.chat.id }}", &telegram_update()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the body has no `mesage.chat.id`: the body has no key `mesage` (did you mean \
             `message`?); its keys are: message, update_id"
        );
        // Nothing close: no suggestion, only the keys.
        let err = render("{{ zzz }}", &telegram_update()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the body has no `zzz`: the body has no key `zzz`; its keys are: message, update_id"
        );
        let err = render("{{ x }}", &json!({})).unwrap_err();
        assert!(err.to_string().ends_with("it is an empty object"), "{err}");
    }

    #[test]
    fn a_long_key_list_is_cut_short() {
        let body: serde_json::Map<String, Value> =
            (0..30).map(|i| (format!("k{i:02}"), json!(i))).collect();
        let err = render("{{ nope }}", &Value::Object(body)).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("k00, k01"), "{text}");
        assert!(text.contains("k19 and 10 more"), "{text}");
        assert!(!text.contains("k20"), "{text}");
    }

    #[test]
    fn a_missing_index_names_the_array_and_its_length() {
        let body = json!({"commits": [{"id": "abc"}, {"id": "def"}], "none": []});
        let err = render("{{ commits.5.id }}", &body).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the body has no `commits.5.id`: `commits` has 2 items (indices 0 to 1)"
        );
        let err = render("{{ commits.id }}", &body).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the body has no `commits.id`: `commits` is an array, so `id` cannot address it; \
             address its items by number, e.g. `commits.0`"
        );
        let err = render("{{ none.0 }}", &body).unwrap_err();
        assert!(
            err.to_string().contains("`none` is an empty array"),
            "{err}"
        );
        let err = render("{{ commits.-1 }}", &body).unwrap_err();
        assert!(matches!(err, TemplateError::NoIndex { .. }), "{err:?}");
        let err = render("{{ commits.99999999999999999999999 }}", &body).unwrap_err();
        assert!(
            matches!(err, TemplateError::NoIndex { len: 2, .. }),
            "{err:?}"
        );
        let err = render("{{ id }}", &json!([1])).unwrap_err();
        assert!(err.to_string().contains("the body is an array"), "{err}");
    }

    #[test]
    fn a_path_through_a_scalar_says_what_it_found() {
        let err = render("{{ issue.title.text }}", &github_issue()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the body has no `issue.title.text`: `issue.title` is a string, so it has no `text`; \
             check the sender's payload format"
        );
        let err = render("{{ issue.milestone.title }}", &github_issue()).unwrap_err();
        assert!(
            matches!(&err, TemplateError::NotContainer { kind: "null", at, .. } if at == "issue.milestone"),
            "{err:?}"
        );
        let err = render("{{ a }}", &json!("just a string")).unwrap_err();
        assert!(err.to_string().contains("the body is a string"), "{err}");
    }

    #[test]
    fn a_null_value_is_an_error() {
        let err = render("{{ issue.milestone }}", &github_issue()).unwrap_err();
        assert_eq!(
            err,
            TemplateError::Null {
                path: "issue.milestone".into()
            }
        );
        assert!(err.to_string().starts_with("`issue.milestone` is null"));
    }

    #[test]
    fn parse_errors_give_the_character_offset() {
        assert_eq!(
            Template::parse("Hi {{ name").unwrap_err(),
            TemplateError::Unclosed { offset: 3 }
        );
        // Offsets count characters, not bytes.
        assert_eq!(
            Template::parse("héllo {{ x }} {{").unwrap_err(),
            TemplateError::Unclosed { offset: 14 }
        );
        assert_eq!(
            Template::parse("a {{ }} b").unwrap_err(),
            TemplateError::EmptyPath { offset: 2 }
        );
        assert_eq!(
            Template::parse("{{}}").unwrap_err(),
            TemplateError::EmptyPath { offset: 0 }
        );
        for (text, path) in [
            ("{{ a..b }}", "a..b"),
            ("{{ .a }}", ".a"),
            ("{{ a. }}", "a."),
            ("{{.}}", "."),
        ] {
            assert_eq!(
                Template::parse(text).unwrap_err(),
                TemplateError::EmptySegment {
                    offset: 0,
                    path: path.into()
                },
                "{text}"
            );
        }
        assert_eq!(
            Template::parse("x {{ issue. title }}").unwrap_err(),
            TemplateError::InvalidPath {
                offset: 2,
                path: "issue. title".into(),
                found: ' '
            }
        );
        assert!(matches!(
            Template::parse("{{{ a }}}").unwrap_err(),
            TemplateError::InvalidPath { found: '{', .. }
        ));
        assert!(matches!(
            Template::parse("{{ a {{ b }}").unwrap_err(),
            TemplateError::InvalidPath { found: ' ', .. }
        ));
    }

    #[test]
    fn parse_error_messages_say_what_to_write() {
        assert_eq!(
            TemplateError::Unclosed { offset: 3 }.to_string(),
            "the `{{` at character 3 is never closed: end the placeholder with `}}`, e.g. \
             `{{ issue.title }}` (a template has no escape for a literal `{{`)"
        );
        assert_eq!(
            TemplateError::EmptySegment {
                offset: 0,
                path: "a..b".into()
            }
            .to_string(),
            "the path `a..b` at character 0 has an empty segment: separate keys and indices \
             with single dots, e.g. `message.chat.id` or `commits.0.id`"
        );
    }

    #[test]
    fn whitespace_inside_the_braces_is_allowed() {
        let body = json!({"a": {"b": 1}});
        for text in ["{{a.b}}", "{{ a.b }}", "{{\ta.b\n}}", "{{   a.b}}"] {
            assert_eq!(render(text, &body).unwrap(), "1", "{text:?}");
        }
    }

    #[test]
    fn the_rendered_text_is_capped() {
        let big = "x".repeat(MAX_RENDERED_BYTES);
        let body = json!({"s": big, "list": vec![big.clone(), big.clone()]});
        // Exactly the cap passes.
        assert_eq!(render("{{ s }}", &body).unwrap().len(), MAX_RENDERED_BYTES);
        let err = render("!{{ s }}", &body).unwrap_err();
        assert_eq!(
            err,
            TemplateError::TooLong {
                limit: MAX_RENDERED_BYTES,
                path: "s".into()
            }
        );
        assert!(
            err.to_string().contains("longer than 102400 bytes"),
            "{err}"
        );
        assert!(matches!(
            render("{{ list }}", &body).unwrap_err(),
            TemplateError::TooLong { .. }
        ));
        assert!(matches!(
            render("{{ s }}{{ s }}", &body).unwrap_err(),
            TemplateError::TooLong { .. }
        ));
        // A template whose literal text alone is over the cap could never render: refused
        // when parsed (by the agentfile and by the API's registration alike).
        let long_literal = format!("{big}!");
        let err = Template::parse(&long_literal).unwrap_err();
        assert!(matches!(err, TemplateError::TooLong { .. }), "{err:?}");
        assert!(Template::parse(&big).is_ok(), "exactly the cap is fine");
    }

    #[test]
    fn no_input_panics() {
        let bodies = [
            json!(null),
            json!(1),
            json!("s"),
            json!([]),
            json!({}),
            github_issue(),
            telegram_update(),
        ];
        let texts = [
            "{{",
            "}}",
            "{{}",
            "{}}",
            "{{{{",
            "}}}}",
            "{{ {{ }} }}",
            "{{a}}}}",
            "{{é.ü}}",
            "{{ 0.0.0 }}",
            "{{ . }}",
            "é{{",
            "{{\u{0}}}",
            "{{ 🦀 }}",
        ];
        for text in texts {
            if let Ok(t) = Template::parse(text) {
                for body in &bodies {
                    let _ = t.render(body);
                }
            }
        }
    }
}
