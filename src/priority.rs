//! [`Priority`]: how much a call matters when its dependency is under
//! pressure. The dependency's reserved share (`dependency/priority.rs`) and
//! the throttle (`limit/throttle.rs`) both read it.

/// How much a call matters when its dependency is under pressure
/// ([`CallBuilder::priority`](crate::CallBuilder::priority)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "snake_case"))]
pub enum Priority {
    /// Refused first: admitted only while it would not queue (a worker
    /// outside the reserved share is free).
    Sheddable,
    /// The default: may queue, but never into the share reserved for
    /// critical calls.
    #[default]
    Normal,
    /// May take the reserved share
    /// ([`DependencyBuilder::reserved_for_critical`](crate::DependencyBuilder::reserved_for_critical)).
    Critical,
}

impl Priority {
    /// Its label: `"critical"`, `"normal"` or `"sheddable"`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Priority::Sheddable => "sheddable",
            Priority::Normal => "normal",
            Priority::Critical => "critical",
        }
    }
}
