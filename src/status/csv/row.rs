//! One CSV line: a [`Row`] filled column by column (by name), written with HAProxy's
//! quoting and its trailing comma.

use std::fmt::Display;

use super::fields::{COLUMNS, PROCESS_NUM};

/// One CSV line being filled, column by column.
pub(super) struct Row(Vec<String>);

impl Row {
    pub(super) fn new(pxname: &str, iid: u32, svname: &str) -> Row {
        let mut r = Row(vec![String::new(); COLUMNS.len()]);
        r.set("pxname", pxname);
        r.set("svname", svname);
        r.set("pid", PROCESS_NUM);
        r.set("iid", iid);
        r.set("mode", "http");
        r
    }

    pub(super) fn set(&mut self, column: &str, value: impl Display) {
        match COLUMNS.iter().position(|c| *c == column) {
            Some(i) => self.0[i] = value.to_string(),
            None => debug_assert!(false, "unknown CSV column {column}"),
        }
    }

    /// Empty a column again.
    pub(super) fn clear(&mut self, column: &str) {
        self.set(column, "");
    }

    pub(super) fn set_opt(&mut self, column: &str, value: Option<impl Display>) {
        if let Some(v) = value {
            self.set(column, v);
        }
    }

    pub(super) fn write(&self, out: &mut String) {
        for v in &self.0 {
            out.push_str(&field(v));
            out.push(',');
        }
        out.push('\n');
    }
}

/// A CSV field: quoted (quotes doubled) only when it holds a comma or a quote, as
/// HAProxy does; line breaks, which no parser of this format expects, become spaces.
pub(super) fn field(v: &str) -> String {
    let v: String = v
        .chars()
        .map(|c| if c == '\n' || c == '\r' { ' ' } else { c })
        .collect();
    if v.contains(',') || v.contains('"') {
        format!("\"{}\"", v.replace('"', "\"\""))
    } else {
        v
    }
}
