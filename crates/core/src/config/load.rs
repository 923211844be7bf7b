//! Loading: defaults, then the file (if any), then the environment, then the checks
//! across keys; every problem of every step is returned together.

use std::path::Path;

use super::env::{apply_env, Env};
use super::file::read_file;
use super::problem::{ConfigErrors, Problem};
use super::reader::parse;
use super::schema::Config;
use super::validate::validate;

/// Load and validate: defaults, then the file (if any), then the environment.
pub fn load(file: Option<&Path>, env: &dyn Env) -> Result<Config, ConfigErrors> {
    let text = match file {
        None => None,
        Some(p) => match std::fs::read_to_string(p) {
            Ok(t) => Some(t),
            Err(e) => {
                return Err(ConfigErrors(vec![Problem {
                    path: p.display().to_string(),
                    message: format!("cannot read: {e}"),
                }]))
            }
        },
    };
    // Problems of the file name it (those of the environment say `env NAME`).
    let mut cfg = from_toml(text.as_deref().unwrap_or(""), env).map_err(|mut e| {
        if let Some(f) = file {
            for p in e.0.iter_mut().filter(|p| !p.path.starts_with("env ")) {
                p.path = format!("{}: {}", f.display(), p.path);
            }
        }
        e
    })?;
    cfg.file = file.map(Path::to_path_buf);
    Ok(cfg)
}

/// Build a config from TOML text and an environment.
pub fn from_toml(text: &str, env: &dyn Env) -> Result<Config, ConfigErrors> {
    let table = parse(text)?;
    let mut problems = Vec::new();
    let mut cfg = Config::default();
    read_file(&table, &mut cfg, &mut problems);
    apply_env(env, &mut cfg, &mut problems);
    validate(&cfg, &mut problems);
    if problems.is_empty() {
        Ok(cfg)
    } else {
        Err(ConfigErrors(problems))
    }
}
