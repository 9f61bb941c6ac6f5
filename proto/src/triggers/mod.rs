//! Triggers (issue 17): the pure rules of schedules and webhooks that the agentfile, the API and
//! the CLI share — when a schedule fires (cron or interval, in an IANA time zone, through DST),
//! which missed fires a catch-up takes, whether an overlapping fire runs, and how a webhook's
//! message and session key are rendered from its JSON body. No I/O, no clock: every function
//! takes the time it decides about.

pub mod schedule;
pub mod spec;
pub mod template;

pub use spec::{
    ScheduleTrigger, SignatureScheme, TriggerKind, TriggerSession, TriggerSpec, WebhookTrigger,
};
