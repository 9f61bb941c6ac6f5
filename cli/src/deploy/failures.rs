//! The failures of a `down`, collected so that every step runs (on any backend) and reported
//! together at the end.

/// The failures of a `down`, collected so that every step runs.
#[derive(Debug, Default)]
pub(crate) struct Failures(Vec<String>);

impl Failures {
    /// Records one failed step.
    pub(crate) fn record(&mut self, what: impl std::fmt::Display) {
        self.0.push(what.to_string());
    }

    /// Records the error of a step, if it failed.
    pub(crate) fn check<T>(&mut self, step: &str, r: anyhow::Result<T>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) => {
                self.record(format!("{step}: {e:#}"));
                None
            }
        }
    }

    /// The end-of-run report: `None` when everything worked.
    pub(crate) fn report(&self) -> Option<String> {
        if self.0.is_empty() {
            return None;
        }
        let mut out = format!("down finished with {} problem(s):", self.0.len());
        for f in &self.0 {
            out.push_str("\n  - ");
            out.push_str(f);
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_failure_is_reported_at_the_end() {
        let mut f = Failures::default();
        assert_eq!(f.report(), None);
        assert_eq!(f.check("container a", anyhow::Ok(1)), Some(1));
        assert_eq!(f.report(), None);
        assert!(
            f.check::<()>("network n", Err(anyhow::anyhow!("has active endpoints")))
                .is_none()
        );
        f.record("volume v: in use");
        let report = f.report().unwrap();
        assert!(report.starts_with("down finished with 2 problem(s):"));
        assert!(report.contains("network n: has active endpoints"));
        assert!(report.contains("volume v: in use"));
    }
}
