//! Rendering: colours, `up`'s live progress, tables, and the trace tree.

pub(crate) mod progress;
pub(crate) mod style;
pub(crate) mod table;
pub(crate) mod trace;
