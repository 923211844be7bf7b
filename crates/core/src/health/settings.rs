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
    /// The port checked when it is not the traffic port (a service's `health.port`).
    pub port: Option<u16>,
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
            port: None,
        }
    }

    /// These settings with a service's own check: path, expected status (a checked
    /// regular expression; a bad one keeps the balancer's), port.
    pub fn with_service(
        mut self,
        uri: Option<&str>,
        expect: Option<&str>,
        port: Option<u16>,
    ) -> Self {
        if let Some(u) = uri {
            self.uri = u.to_string();
        }
        if let Some(e) = expect.and_then(|e| regex_lite::Regex::new(e).ok()) {
            self.expect = e;
        }
        self.port = port;
        self
    }
}
