//! The application's one scaler, the pure part: who acts ([`elect`], `election`), when
//! the one acting must stand down ([`fence`]: its own stalls, its majority since it
//! resumed, other claims, handover), what it decides ([`policy`]), the scale event it
//! records ([`ScaleEvent`]) and how broker failures are reported ([`failures`]). The loop that acts and the broker client are
//! the application's (`gearlb::scaler`).

pub mod election;
pub mod event;
pub mod failures;
pub mod fence;
pub mod policy;

pub use election::{elect, park_local_gear, Candidate, Election};
pub use event::ScaleEvent;
