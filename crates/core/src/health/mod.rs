//! Backend health, the pure part: the state machine ([`Machine`]: `fall` consecutive
//! failures → down, `rise` consecutive successful checks → up) and the check settings
//! ([`HealthSettings`]) read from the configuration. The checks themselves and their
//! supervisor are the data plane's (`gearlb_proxy::health`).

mod machine;
mod settings;

pub use machine::{Machine, Transition};
pub use settings::HealthSettings;
