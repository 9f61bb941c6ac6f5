//! Rendering: colours, `up`'s live progress, and tables.

pub(crate) mod progress;
pub(crate) mod style;
pub(crate) mod table;
