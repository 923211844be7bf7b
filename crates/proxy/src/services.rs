//! Services on one listener: which service a request is for ([`Services`], a pure
//! `gearlb_core::routing::routes::RouteTable` beside each service's [`Router`] and
//! settings), swapped whole (arc-swap) by the control plane. A listener with no
//! [`Services`] (one service: the cartridge, a plain `[[backends]]` file) routes every
//! request to its context's router without a lookup.

use std::sync::Arc;

use gearlb_core::routing::routes::RouteTable;

use crate::health::EjectSender;
use crate::router::Router;
use crate::settings::Settings;

/// One service as the request path sees it.
pub struct Service {
    pub name: Arc<str>,
    pub router: Arc<Router>,
    /// The proxy settings with the service's own (sticky cookie, timeouts, queue).
    pub settings: Arc<Settings>,
    /// Where the request path reports a backend for passive ejection: the service's
    /// health supervisor.
    pub ejections: EjectSender,
}

/// Every service routed on a listener, by host and path.
pub struct Services {
    routes: RouteTable,
    /// One per service of `routes`, in the same order.
    services: Vec<Arc<Service>>,
}

impl Services {
    /// `services` are those `routes` names, in any order; a route to a service not
    /// given is dropped (the caller builds both from one list).
    pub fn new(routes: RouteTable, services: &[Arc<Service>]) -> Self {
        let by_name: std::collections::HashMap<&str, &Arc<Service>> =
            services.iter().map(|s| (&*s.name, s)).collect();
        let services = routes
            .services()
            .iter()
            .map(|name| by_name.get(name.as_str()).map(|s| Arc::clone(s)))
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default();
        let routes = if services.len() == routes.services().len() {
            routes
        } else {
            RouteTable::default()
        };
        Services { routes, services }
    }

    /// The service of a request to `host` and `path`; `None`: no route (a 404).
    pub fn lookup(&self, host: &str, path: &str) -> Option<&Arc<Service>> {
        self.routes
            .lookup_index(host, path)
            .and_then(|i| self.services.get(i))
    }

    /// The service of a TLS connection by its server name (`None`: no name, or
    /// `unknown_default` and a name no service claims: the service claiming every
    /// host, if any).
    pub fn lookup_sni(&self, name: Option<&str>, unknown_default: bool) -> Option<&Arc<Service>> {
        let found = name.and_then(|n| self.routes.lookup_index(n, "/"));
        let i = match found {
            Some(i) => Some(i),
            None if unknown_default => self.routes.lookup_any("/"),
            None => None,
        };
        i.and_then(|i| self.services.get(i))
    }

    pub fn routes(&self) -> &RouteTable {
        &self.routes
    }

    pub fn services(&self) -> &[Arc<Service>] {
        &self.services
    }
}
