//! Alarms: rules that watch a device's readings (river warning levels,
//! fast rises, silent stations), the state each keeps per device, and the
//! transitions between states. Pure: the store evaluates them in each
//! reading's own transaction and records what they produce.

mod eval;
pub mod rule;
pub mod state;

pub use rule::{AlarmRule, Direction, Level, LevelRule, RateRule, RuleKind, RuleSpec, SilenceRule, check_rules};
pub use state::{AlarmState, Memo, NotActive, Transition, TransitionKind};

#[cfg(test)]
mod tests;
