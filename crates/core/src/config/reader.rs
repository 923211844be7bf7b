//! Typed access to the keys of one TOML table: each getter records the key as known and
//! turns a bad value into a [`Problem`] (keeping the default), so the file's reader lists
//! every problem and, at the end of a table, every unknown key.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::duration::{parse_duration, DURATION_RULE};
use super::problem::{ConfigErrors, Problem};
use super::schema::ForwardedHeaders;

/// Reads typed keys out of one TOML table, remembering which keys it was asked for so
/// that [`Reader::finish`] can report the rest as unknown.
pub(super) struct Reader<'a> {
    table: &'a toml::Table,
    path: String,
    known: Vec<&'static str>,
    problems: &'a mut Vec<Problem>,
}

impl<'a> Reader<'a> {
    pub(super) fn new(table: &'a toml::Table, path: &str, problems: &'a mut Vec<Problem>) -> Self {
        Reader {
            table,
            path: path.to_string(),
            known: Vec::new(),
            problems,
        }
    }

    pub(super) fn problem(&mut self, key: &str, message: impl Into<String>) {
        let path = self.key_path(key);
        self.problems.push(Problem {
            path,
            message: message.into(),
        });
    }

    /// A key's path in problems: `table.key`, or `key` in a top-level table.
    fn key_path(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// Where problems go: for the reader of a table inside this one.
    pub(super) fn problems(&mut self) -> &mut Vec<Problem> {
        self.problems
    }

    pub(super) fn get(&mut self, key: &'static str) -> Option<&'a toml::Value> {
        self.known.push(key);
        self.table.get(key)
    }

    pub(super) fn str_value(&mut self, key: &'static str) -> Option<String> {
        match self.get(key)? {
            toml::Value::String(s) => Some(s.clone()),
            other => {
                let t = other.type_str();
                self.problem(key, format!("expected a string, found {t}"));
                None
            }
        }
    }

    pub(super) fn required_string(&mut self, key: &'static str) -> Option<String> {
        let present = self.table.contains_key(key);
        let v = self.str_value(key);
        if !present {
            self.problem(key, "required");
        }
        v
    }

    pub(super) fn string(&mut self, key: &'static str, default: &str) -> String {
        self.str_value(key).unwrap_or_else(|| default.to_string())
    }

    pub(super) fn path(&mut self, key: &'static str, default: &Path) -> PathBuf {
        match self.str_value(key) {
            Some(s) if s.is_empty() => {
                self.problem(key, "must not be empty");
                default.to_path_buf()
            }
            Some(s) => PathBuf::from(s),
            None => default.to_path_buf(),
        }
    }

    pub(super) fn socket_addr(&mut self, key: &'static str, default: SocketAddr) -> SocketAddr {
        match self.str_value(key) {
            None => default,
            Some(s) => match s.parse() {
                Ok(a) => a,
                Err(_) => {
                    self.problem(key, format!("{s:?} is not an ip:port address"));
                    default
                }
            },
        }
    }

    /// A duration by the rule of every source ([`parse_duration`]): a string, or an
    /// integer of whole seconds (`server = 30`, as the README allows).
    pub(super) fn duration(&mut self, key: &'static str, default: Duration) -> Duration {
        let text = match self.table.get(key) {
            Some(toml::Value::Integer(i)) => {
                self.known.push(key);
                Some(i.to_string())
            }
            Some(toml::Value::String(_)) | None => self.str_value(key),
            Some(other) => {
                let t = other.type_str();
                self.known.push(key);
                self.problem(
                    key,
                    format!("expected a duration, found {t}: {DURATION_RULE}"),
                );
                None
            }
        };
        match text.map(|s| parse_duration(&s)) {
            None => default,
            Some(Ok(d)) => d,
            Some(Err(message)) => {
                self.problem(key, message);
                default
            }
        }
    }

    pub(super) fn uint(&mut self, key: &'static str, default: u64, min: u64, max: u64) -> u64 {
        match self.get(key) {
            None => default,
            Some(toml::Value::Integer(i))
                if (min as i128..=max as i128).contains(&(*i as i128)) =>
            {
                *i as u64
            }
            Some(toml::Value::Integer(i)) => {
                let i = *i;
                self.problem(key, format!("{i} is out of range {min}..={max}"));
                default
            }
            Some(other) => {
                let t = other.type_str();
                self.problem(key, format!("expected an integer, found {t}"));
                default
            }
        }
    }

    /// A list of forwarding header names; any bad entry keeps the default, whole.
    pub(super) fn forwarded_headers(
        &mut self,
        key: &'static str,
        default: ForwardedHeaders,
    ) -> ForwardedHeaders {
        let list = match self.get(key) {
            None => return default,
            Some(toml::Value::Array(list)) => list,
            Some(other) => {
                let t = other.type_str();
                self.problem(key, format!("expected a list of header names, found {t}"));
                return default;
            }
        };
        let mut set = ForwardedHeaders::NONE;
        let mut ok = true;
        for v in list {
            match v {
                toml::Value::String(name) if set.add(name) => {}
                other => {
                    let what = match other {
                        toml::Value::String(name) => format!("{name:?}"),
                        v => format!("{} value", v.type_str()),
                    };
                    let names = ForwardedHeaders::NAMES.join(", ");
                    self.problem(key, format!("{what} is not one of {names}"));
                    ok = false;
                }
            }
        }
        if ok {
            set
        } else {
            default
        }
    }

    pub(super) fn bool(&mut self, key: &'static str, default: bool) -> bool {
        match self.get(key) {
            None => default,
            Some(toml::Value::Boolean(b)) => *b,
            Some(other) => {
                let t = other.type_str();
                self.problem(key, format!("expected true or false, found {t}"));
                default
            }
        }
    }

    pub(super) fn finish(self) {
        let unknown: BTreeMap<&String, ()> = self
            .table
            .keys()
            .filter(|k| !self.known.contains(&k.as_str()))
            .map(|k| (k, ()))
            .collect();
        for k in unknown.keys() {
            let path = self.key_path(k);
            self.problems.push(Problem {
                path,
                message: format!("unknown key (known: {})", self.known.join(", ")),
            });
        }
    }
}

/// The file's text as a TOML table; a syntax error is one problem naming its line and
/// column.
pub(super) fn parse(text: &str) -> Result<toml::Table, ConfigErrors> {
    text.parse().map_err(|e: toml::de::Error| {
        let message = e.message().to_string();
        let path = match e.span() {
            Some(span) => {
                let before = text.get(..span.start).unwrap_or(text);
                let line = before.matches('\n').count() + 1;
                let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
                format!("line {line}, column {column}")
            }
            None => "file".to_string(),
        };
        ConfigErrors(vec![Problem {
            path,
            message: format!("not valid TOML: {message}"),
        }])
    })
}
