//! The health settings in force (swapped on reload).

use std::time::Duration;

use crate::config::HealthConfig;

/// Health settings in force (swapped on reload).
#[derive(Clone, Debug)]
pub struct HealthSettings {
    pub enabled: bool,
    pub uri: String,
    pub expect: regex_lite::Regex,
    pub interval: Duration,
    pub timeout: Duration,
    pub fall: u32,
    pub rise: u32,
}

impl HealthSettings {
    /// From a validated configuration (`config` checked the expression compiles).
    pub fn from_config(c: &HealthConfig) -> Self {
        HealthSettings {
            enabled: c.enabled,
            uri: c.uri.clone(),
            expect: regex_lite::Regex::new(&c.expect)
                .unwrap_or_else(|_| regex_lite::Regex::new("^[23]..$|^401$").expect("static")),
            interval: c.interval,
            timeout: c.timeout,
            fall: c.fall,
            rise: c.rise,
        }
    }
}
