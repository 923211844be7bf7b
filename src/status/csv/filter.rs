//! The row filter of `show stat` (`<iid> <type> <sid>`, `up`, `no-maint`) and of the
//! HTTP page's `;up` and `;no-maint`.

use super::fields::{TYPE_BACKEND, TYPE_FRONTEND, TYPE_SERVER};
use crate::routing::BackendState;

/// Which rows a document holds: HAProxy's `show stat [<iid> <type> <sid>] [up|no-maint]`
/// and the HTTP page's `;up` and `;no-maint`. The header line is always there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    /// Only this proxy (`iid`); `None`: every proxy.
    pub iid: Option<u32>,
    /// Row types, [`TYPE_FRONTEND`] | [`TYPE_BACKEND`] | [`TYPE_SERVER`].
    pub types: u32,
    /// Only this server (`sid`); `None`: every server.
    pub sid: Option<u32>,
    /// Leave out servers that are down or in maintenance (`up`).
    pub hide_down: bool,
    /// Leave out servers in maintenance (`no-maint`).
    pub hide_maint: bool,
}

impl Default for Filter {
    fn default() -> Self {
        Filter {
            iid: None,
            types: TYPE_FRONTEND | TYPE_BACKEND | TYPE_SERVER,
            sid: None,
            hide_down: false,
            hide_maint: false,
        }
    }
}

impl Filter {
    pub(super) fn shows(&self, iid: u32, row_type: u32) -> bool {
        self.iid.is_none_or(|i| i == iid) && self.types & row_type != 0
    }

    pub(super) fn shows_server(&self, iid: u32, sid: u32, state: BackendState) -> bool {
        let maint = state == BackendState::Drained;
        self.shows(iid, TYPE_SERVER)
            && self.sid.is_none_or(|s| s == sid)
            && !(self.hide_maint && maint)
            && !(self.hide_down && (maint || state == BackendState::Down))
    }
}
