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
    /// TCP backends' check (`[tcp] check`) instead of the HTTP one; `None`: HTTP.
    pub tcp: Option<crate::config::TcpCheck>,
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
            tcp: None,
        }
    }

    /// The settings of a configuration's own backends: `[health]`, or in TCP mode
    /// (`listen.mode`) the `[tcp] check`.
    pub fn of(c: &crate::config::Config) -> Self {
        Self::from_config(&c.health).for_mode(c.listen.mode, c.tcp.check)
    }

    /// These settings for backends of a listener in `mode` (TCP: `check`).
    pub fn for_mode(mut self, mode: crate::config::Mode, check: crate::config::TcpCheck) -> Self {
        self.tcp = (mode == crate::config::Mode::Tcp).then_some(check);
        self
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
