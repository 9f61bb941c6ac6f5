//! Deserializers for the integers of request bodies. JSON Schema (and so the OpenAPI document)
//! counts `2.0` as the integer 2, so these take a whole number however it is spelled; a fraction,
//! a negative number or one past the bound is refused.

use serde::de::{Deserializer, Error, Visitor};

/// A whole number from 0 to `max`.
struct Whole {
    max: u64,
}

impl Visitor<'_> for Whole {
    type Value = u64;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a whole number from 0 to {}", self.max)
    }

    fn visit_u64<E: Error>(self, v: u64) -> Result<u64, E> {
        if v <= self.max {
            Ok(v)
        } else {
            Err(E::custom(format_args!("{v} is larger than {}", self.max)))
        }
    }

    fn visit_i64<E: Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v)
            .map_err(|_| E::custom(format_args!("{v} is negative")))
            .and_then(|v| self.visit_u64(v))
    }

    fn visit_f64<E: Error>(self, v: f64) -> Result<u64, E> {
        // Every whole float below 2^64 converts exactly; the bound check does the rest.
        if v.fract() == 0.0 && (0.0..18_446_744_073_709_551_616.0).contains(&v) {
            self.visit_u64(v as u64)
        } else {
            Err(E::custom(format_args!(
                "{v} is not a whole number from 0 to {}",
                self.max
            )))
        }
    }
}

/// Any `u64`.
pub(crate) fn any<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(Whole { max: u64::MAX })
}

/// A stored integer: 0 to [`super::MAX_STORED_INT`].
pub(crate) fn stored<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    d.deserialize_any(Whole {
        max: super::MAX_STORED_INT,
    })
}

/// An optional stored integer.
pub(crate) fn stored_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Option::<Stored>::deserialize(d).map(|o| o.map(|Stored(v)| v))
}

/// A list of stored integers.
pub(crate) fn stored_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u64>, D::Error> {
    Vec::<Stored>::deserialize(d).map(|v| v.into_iter().map(|Stored(v)| v).collect())
}

/// The schema of a list of stored integers (each 0 to [`super::MAX_STORED_INT`]), for
/// `#[schema(schema_with = …)]`.
#[cfg(feature = "openapi")]
pub(crate) fn stored_vec_schema() -> utoipa::openapi::schema::Array {
    use utoipa::openapi::schema::{ArrayBuilder, KnownFormat, ObjectBuilder, SchemaFormat, Type};
    ArrayBuilder::new()
        .items(
            ObjectBuilder::new()
                .schema_type(Type::Integer)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
                .minimum(Some(0))
                .maximum(Some(super::MAX_STORED_INT)),
        )
        .build()
}

/// A `u32`.
pub(crate) fn u32_req<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    Small::deserialize(d).map(|Small(v)| v)
}

/// An optional `u32`.
pub(crate) fn u32_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let v = Option::<Small>::deserialize(d)?;
    Ok(v.map(|Small(v)| v))
}

use serde::Deserialize;

struct Stored(u64);

impl<'de> Deserialize<'de> for Stored {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        stored(d).map(Stored)
    }
}

struct Small(u32);

impl<'de> Deserialize<'de> for Small {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = d.deserialize_any(Whole {
            max: u64::from(u32::MAX),
        })?;
        u32::try_from(v).map(Small).map_err(D::Error::custom)
    }
}
