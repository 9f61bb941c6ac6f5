//! The YAML layer: text → a located node tree, through serde-saphyr.
//!
//! Everything the agentfile says is first read into [`Node`]s that remember where they came from
//! (line, column, width). Validation then walks the tree and can report every problem with its
//! place, not just the first one serde would stop at. This module owns the parser settings: strict
//! booleans, duplicate keys rejected, one document, and budgets that refuse alias bombs and huge
//! inputs quickly with bounded memory.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::Spanned;

/// Where a node starts in the source: 1-based line and column (in characters) and its width.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Loc {
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
    /// Width in characters (0 for collections, whose extent is not tracked).
    pub len: u32,
}

impl Loc {
    /// The start of the file.
    pub const START: Loc = Loc {
        line: 1,
        column: 1,
        len: 0,
    };

    fn of(location: &serde_saphyr::Location) -> Loc {
        if location.line() == 0 {
            return Loc::START;
        }
        Loc {
            line: clamp(location.line()),
            column: clamp(location.column()),
            len: clamp(location.span().len()),
        }
    }
}

fn clamp(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// A YAML value with its location.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// The value.
    pub kind: Kind,
    /// Where it is.
    pub loc: Loc,
}

/// A mapping key with its location.
#[derive(Clone, Debug, PartialEq)]
pub struct Key {
    /// The key as written.
    pub name: String,
    /// Where it is.
    pub loc: Loc,
}

/// The shape of a YAML value. Scalars keep the type YAML's core schema gives them: a quoted
/// `"0.5"` is a string, `0.5` a float, `yes` a string (booleans are strict).
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// `~`, `null` or an empty value.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A string.
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in source order.
    Map(Vec<(Key, Node)>),
}

impl Kind {
    /// A short name of the value's type for error messages, e.g. "a string".
    pub fn describe(&self) -> String {
        match self {
            Kind::Null => "nothing (null)".into(),
            Kind::Bool(b) => format!("the boolean {b}"),
            Kind::Int(i) => format!("the number {i}"),
            Kind::Float(f) => format!("the number {f}"),
            Kind::Str(s) if s.chars().count() > 40 => "a string".into(),
            Kind::Str(s) => format!("the string \"{s}\""),
            Kind::Seq(_) => "a list".into(),
            Kind::Map(_) => "a mapping".into(),
        }
    }

    /// The type name without the value, for places where the value must not be shown.
    pub fn type_name(&self) -> &'static str {
        match self {
            Kind::Null => "nothing (null)",
            Kind::Bool(_) => "a boolean",
            Kind::Int(_) | Kind::Float(_) => "a number",
            Kind::Str(_) => "a string",
            Kind::Seq(_) => "a list",
            Kind::Map(_) => "a mapping",
        }
    }
}

/// A YAML syntax or resource error, located.
#[derive(Clone, Debug, PartialEq)]
pub struct SyntaxError {
    /// What is wrong, without the location.
    pub message: String,
    /// Where.
    pub loc: Loc,
    /// How to fix it, when there is something specific to say.
    pub help: Option<String>,
}

/// Largest agentfile accepted, in bytes. Real agentfiles are a few KiB; this bounds memory.
pub const MAX_FILE_BYTES: usize = 1024 * 1024;

/// Parses one YAML document into a node tree.
pub fn parse(text: &str) -> Result<Node, SyntaxError> {
    if text.len() > MAX_FILE_BYTES {
        return Err(SyntaxError {
            message: format!(
                "the file is {} bytes; agentfiles are limited to {} bytes",
                text.len(),
                MAX_FILE_BYTES
            ),
            loc: Loc::START,
            help: Some("is this the right file? An agentfile is a short YAML document".into()),
        });
    }
    let options = serde_saphyr::options! {
        strict_booleans: true,
        with_snippet: false,
        budget: serde_saphyr::budget! {
            max_documents: 1,
            max_depth: 64,
            max_nodes: 50_000,
            max_events: 200_000,
            max_aliases: 1_000,
            max_anchors: 1_000,
            max_total_scalar_bytes: 4 * MAX_FILE_BYTES,
        },
    };
    let root: Result<Spanned<Raw>, _> = serde_saphyr::from_str_with_options(text, options);
    match root {
        Ok(root) => Ok(root.into()),
        Err(err) => Err(syntax_error(&err, text)),
    }
}

fn syntax_error(err: &serde_saphyr::Error, text: &str) -> SyntaxError {
    let mut loc = err.location().map(|l| Loc::of(&l)).unwrap_or(Loc::START);

    let full = err.to_string();
    // serde-saphyr appends " at line N, column M" (and alias notes); the location is shown apart.
    let message = full
        .find(" at line ")
        .map(|i| full[..i].to_string())
        .unwrap_or(full);
    let (message, help) = if let Some(key) = message.strip_prefix("duplicate mapping key: ") {
        let key = key.split(", set DuplicateKeyPolicy").next().unwrap_or(key);
        (
            format!("duplicate key `{key}`"),
            Some("each key may appear once in a mapping; remove or merge the repeated one".into()),
        )
    } else if message.starts_with("budget breached") {
        (
            "the document is too large or too deeply nested (aliases count once per use)".into(),
            Some(
                "agentfiles are limited to 50,000 YAML nodes and 1,000 aliases; \
                 an alias bomb (billion laughs) hits this limit"
                    .into(),
            ),
        )
    } else if message.contains("tabs disallowed") {
        // The parser reports the column after the tab; point at the tab itself.
        let line = text
            .lines()
            .nth(loc.line.saturating_sub(1) as usize)
            .unwrap_or("");
        if let Some(i) = line.chars().position(|c| c == '\t') {
            loc.column = u32::try_from(i + 1).unwrap_or(loc.column);
            loc.len = 1;
        }
        (
            "tab used for indentation".into(),
            Some("YAML indents with spaces only; replace the tab with spaces".into()),
        )
    } else {
        (message, None)
    };
    SyntaxError { message, loc, help }
}

/// The serde-facing twin of [`Kind`], with serde-saphyr's spans on every child.
enum Raw {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Seq(Vec<Spanned<Raw>>),
    Map(Vec<(Spanned<String>, Spanned<Raw>)>),
}

impl From<Spanned<Raw>> for Node {
    fn from(raw: Spanned<Raw>) -> Node {
        let loc = Loc::of(&raw.referenced);
        let kind = match raw.value {
            Raw::Null => Kind::Null,
            Raw::Bool(b) => Kind::Bool(b),
            Raw::Int(i) => Kind::Int(i),
            Raw::Float(f) => Kind::Float(f),
            Raw::Str(s) => Kind::Str(s),
            Raw::Seq(items) => Kind::Seq(items.into_iter().map(Node::from).collect()),
            Raw::Map(entries) => Kind::Map(
                entries
                    .into_iter()
                    .map(|(k, v)| {
                        let key = Key {
                            loc: Loc::of(&k.referenced),
                            name: k.value,
                        };
                        (key, Node::from(v))
                    })
                    .collect(),
            ),
        };
        Node { kind, loc }
    }
}

impl<'de> Deserialize<'de> for Raw {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(RawVisitor)
    }
}

struct RawVisitor;

impl<'de> Visitor<'de> for RawVisitor {
    type Value = Raw;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_unit<E>(self) -> Result<Raw, E> {
        Ok(Raw::Null)
    }

    fn visit_none<E>(self) -> Result<Raw, E> {
        Ok(Raw::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Raw, D::Error> {
        Raw::deserialize(d)
    }

    fn visit_bool<E>(self, v: bool) -> Result<Raw, E> {
        Ok(Raw::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Raw, E> {
        Ok(Raw::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Raw, E> {
        Ok(i64::try_from(v)
            .map(Raw::Int)
            .unwrap_or(Raw::Float(v as f64)))
    }

    fn visit_i128<E: de::Error>(self, v: i128) -> Result<Raw, E> {
        Ok(i64::try_from(v)
            .map(Raw::Int)
            .unwrap_or(Raw::Float(v as f64)))
    }

    fn visit_u128<E: de::Error>(self, v: u128) -> Result<Raw, E> {
        Ok(i64::try_from(v)
            .map(Raw::Int)
            .unwrap_or(Raw::Float(v as f64)))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Raw, E> {
        Ok(Raw::Float(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Raw, E> {
        Ok(Raw::Str(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Raw, E> {
        Ok(Raw::Str(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Raw, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Raw>>()? {
            items.push(item);
        }
        Ok(Raw::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Raw, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<String>>()? {
            let value = map.next_value::<Spanned<Raw>>()?;
            entries.push((key, value));
        }
        Ok(Raw::Map(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_carry_their_locations() {
        let root = parse("a: 1\nb:\n  c: [x, \"2\"]\n").unwrap();
        let Kind::Map(entries) = &root.kind else {
            panic!("root is a map")
        };
        assert_eq!(entries[1].0.name, "b");
        assert_eq!((entries[1].0.loc.line, entries[1].0.loc.column), (2, 1));
        let Kind::Map(inner) = &entries[1].1.kind else {
            panic!("b is a map")
        };
        let Kind::Seq(items) = &inner[0].1.kind else {
            panic!("c is a list")
        };
        assert_eq!(items[1].kind, Kind::Str("2".into()));
        assert_eq!(
            (items[1].loc.line, items[1].loc.column, items[1].loc.len),
            (3, 10, 3)
        );
    }

    #[test]
    fn booleans_are_strict() {
        let root = parse("a: yes\nb: true\n").unwrap();
        let Kind::Map(entries) = root.kind else {
            panic!()
        };
        assert_eq!(entries[0].1.kind, Kind::Str("yes".into()));
        assert_eq!(entries[1].1.kind, Kind::Bool(true));
    }

    #[test]
    fn a_second_document_is_refused() {
        let err = parse("a: 1\n---\nb: 2\n").unwrap_err();
        assert_eq!(err.loc.line, 2, "{err:?}");
    }
}
