//! The node's calling convention, as every action meets it: where the cartridge keeps
//! things ([`Paths`]), the gear's environment with what `start` adds to it, the node's
//! one-word arguments, and the output lines with the node's `CLIENT_*` prefixes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::node;
use crate::config::{self, Config, Env};

/// The process environment with some variables added (those `start` computes).
pub(super) struct Overlay<'a> {
    pub(super) base: &'a dyn Env,
    pub(super) extra: &'a BTreeMap<String, String>,
}

impl Env for Overlay<'_> {
    fn var(&self, name: &str) -> Option<String> {
        self.extra
            .get(name)
            .cloned()
            .filter(|v| !v.is_empty())
            .or_else(|| self.base.var(name))
    }
}

/// Where the cartridge keeps things.
pub(super) struct Paths {
    /// The cartridge directory (`$OPENSHIFT_GEARLB_DIR`).
    pub(super) dir: PathBuf,
    pub(super) conf: PathBuf,
    pub(super) pidfile: PathBuf,
    pub(super) log_dir: PathBuf,
}

impl Paths {
    pub(super) fn find(env: &dyn Env) -> Result<Paths, String> {
        let dir = match env.var("OPENSHIFT_GEARLB_DIR") {
            Some(d) => PathBuf::from(d),
            None => std::env::current_exe()
                .ok()
                .and_then(|exe| Some(exe.parent()?.parent()?.to_path_buf()))
                .ok_or(
                    "OPENSHIFT_GEARLB_DIR is not set and the cartridge directory cannot be found",
                )?,
        };
        let log_dir = env
            .var("OPENSHIFT_GEARLB_LOG_DIR")
            .or_else(|| env.var("OPENSHIFT_LOG_DIR"))
            .map(PathBuf::from)
            .unwrap_or_else(|| dir.join("logs"));
        Ok(Paths {
            conf: dir.join("conf").join("gearlb.toml"),
            pidfile: dir.join("run").join("gearlb.pid"),
            log_dir,
            dir,
        })
    }

    pub(super) fn conf(&self) -> Option<&Path> {
        self.conf.exists().then_some(self.conf.as_path())
    }
}

/// Lines for the node, collected and printed once (stdout: the node logs it and hands
/// `CLIENT_*` lines to the user).
#[derive(Default)]
pub(super) struct Out(pub(super) Vec<String>);

impl Out {
    pub(super) fn result(&mut self, s: impl AsRef<str>) {
        self.prefixed("CLIENT_RESULT", s.as_ref());
    }
    pub(super) fn message(&mut self, s: impl AsRef<str>) {
        self.prefixed("CLIENT_MESSAGE", s.as_ref());
    }
    pub(super) fn error(&mut self, s: impl AsRef<str>) {
        self.prefixed("CLIENT_ERROR", s.as_ref());
    }
    pub(super) fn plain(&mut self, s: impl Into<String>) {
        self.0.push(s.into());
    }
    fn prefixed(&mut self, prefix: &str, s: &str) {
        for line in s.lines().filter(|l| !l.trim().is_empty()) {
            self.0.push(format!("{prefix}: {line}"));
        }
    }
    pub(super) fn print(&self) {
        for l in &self.0 {
            println!("{l}");
        }
    }
}

/// The variables `start` (and `reload`) add to the gear's environment: the local web
/// server and the advertised address (see [`node`]).
pub(super) fn additions(env: &dyn Env) -> BTreeMap<String, String> {
    let mut extra = BTreeMap::new();
    if env.var("GEARLB_LOCAL_GEAR").is_none() {
        if let Some(a) = node::local_gear(env) {
            extra.insert("GEARLB_LOCAL_GEAR".to_string(), a);
        }
    }
    if env.var("GEARLB_GOSSIP_ADVERTISE").is_none() {
        if let Some((a, _)) = node::advertise(env) {
            extra.insert("GEARLB_GOSSIP_ADVERTISE".to_string(), a.to_string());
        }
    }
    extra
}

pub(super) fn load_config(
    paths: &Paths,
    env: &dyn Env,
    extra: &BTreeMap<String, String>,
    out: &mut Out,
) -> Result<Config, String> {
    let overlay = Overlay { base: env, extra };
    config::load(paths.conf(), &overlay).map_err(|e| {
        out.error("gearlb configuration has problems:");
        for p in &e.0 {
            out.error(format!("  {p}"));
        }
        "fix them in conf/gearlb.toml or the gear's environment".to_string()
    })
}

/// The words of the node's one-word argument (or of several words).
pub(super) fn words(args: &[String]) -> Vec<String> {
    args.iter()
        .flat_map(|a| a.split_whitespace())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nodes_one_word_and_many_words_are_the_same() {
        assert_eq!(
            words(&["persist 5a1e01 5a1e02".into()]),
            vec!["persist", "5a1e01", "5a1e02"]
        );
        assert_eq!(
            words(&["persist".into(), "5a1e01".into()]),
            vec!["persist", "5a1e01"]
        );
        assert!(words(&["".into()]).is_empty(), "the node's '' is no word");
        assert!(words(&[]).is_empty());
    }

    #[test]
    fn output_lines_carry_the_nodes_prefixes() {
        let mut out = Out::default();
        out.result("started");
        out.error("two\nlines\n\n");
        out.plain("{\"status\":\"success\"}");
        assert_eq!(
            out.0,
            vec![
                "CLIENT_RESULT: started",
                "CLIENT_ERROR: two",
                "CLIENT_ERROR: lines",
                "{\"status\":\"success\"}"
            ]
        );
    }
}
