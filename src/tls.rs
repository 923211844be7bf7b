//! The optional HTTPS listener's certificates: loading, SNI selection and hot reload.
//!
//! Owns turning `[tls]` into a rustls server configuration (ring provider, TLS 1.2 and
//! 1.3, ALPN `h2` when h2c is on and `http/1.1`). Certificates come from one pair
//! (`cert` + `key`: the default certificate) and/or a directory of pairs (`dir`:
//! `<name>.pem` with `<name>.key`) chosen by the SNI name a client sends:
//! `<name>` is the server name (`app-ns.example.com`), or a wildcard for one label
//! (`*.example.com`); the pair named `default` (else the `cert`/`key` pair, else the
//! only pair) answers clients that send no name or an unknown one.
//!
//! Every problem (unreadable file, no certificate, bad key, key not matching its
//! certificate) is reported with the key or file it comes from, all at once, as
//! configuration problems. [`TlsAcceptor`] holds the configuration in an `ArcSwap`:
//! a reload swaps it for new connections, connections already open keep theirs, and a
//! reload that fails keeps the old certificates.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

use crate::config::{Problem, TlsConfig};

/// Certificates by SNI name, with a default.
#[derive(Debug)]
struct SniCerts {
    /// Lower-case server name (or `*.domain`) → certificate.
    by_name: HashMap<String, Arc<CertifiedKey>>,
    default: Option<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for SniCerts {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if let Some(name) = hello.server_name() {
            let name = name.to_ascii_lowercase();
            if let Some(c) = self.by_name.get(&name) {
                return Some(c.clone());
            }
            if let Some((_, parent)) = name.split_once('.') {
                if let Some(c) = self.by_name.get(&format!("*.{parent}")) {
                    return Some(c.clone());
                }
            }
        }
        self.default.clone()
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Load one certificate chain and its key; problems are reported under `what_cert` /
/// `what_key` (key paths such as `tls.cert`, or file names).
fn load_pair(
    cert: &Path,
    key: &Path,
    what_cert: &str,
    what_key: &str,
    provider: &CryptoProvider,
    problems: &mut Vec<Problem>,
) -> Option<Arc<CertifiedKey>> {
    let problem = |path: &str, message: String| Problem {
        path: path.to_string(),
        message,
    };
    let chain: Result<Vec<CertificateDer<'static>>, _> = match std::fs::read(cert) {
        Err(e) => {
            problems.push(problem(
                what_cert,
                format!("cannot read {}: {e}", cert.display()),
            ));
            return None;
        }
        Ok(bytes) => CertificateDer::pem_slice_iter(&bytes).collect(),
    };
    let chain = match chain {
        Ok(c) if !c.is_empty() => c,
        Ok(_) => {
            problems.push(problem(
                what_cert,
                format!("{}: no PEM certificate in it", cert.display()),
            ));
            return None;
        }
        Err(e) => {
            problems.push(problem(
                what_cert,
                format!("{}: not a PEM certificate: {e}", cert.display()),
            ));
            return None;
        }
    };
    let key_der = match std::fs::read(key) {
        Err(e) => {
            problems.push(problem(
                what_key,
                format!("cannot read {}: {e}", key.display()),
            ));
            return None;
        }
        Ok(bytes) => match PrivateKeyDer::from_pem_slice(&bytes) {
            Ok(k) => k,
            Err(e) => {
                problems.push(problem(
                    what_key,
                    format!("{}: no usable PEM private key: {e}", key.display()),
                ));
                return None;
            }
        },
    };
    match CertifiedKey::from_der(chain, key_der, provider) {
        Ok(ck) => Some(Arc::new(ck)),
        Err(e) => {
            problems.push(problem(
                what_key,
                format!("{} does not go with {}: {e}", key.display(), cert.display()),
            ));
            None
        }
    }
}

/// The pairs of a certificate directory: `<name>.pem` + `<name>.key`.
fn load_dir(
    dir: &Path,
    provider: &CryptoProvider,
    problems: &mut Vec<Problem>,
) -> HashMap<String, Arc<CertifiedKey>> {
    let mut out = HashMap::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            problems.push(Problem {
                path: "tls.dir".into(),
                message: format!("cannot read directory {}: {e}", dir.display()),
            });
            return out;
        }
    };
    let mut pems: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "pem"))
        .collect();
    pems.sort();
    for cert in pems {
        let Some(name) = cert.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        let name = name.to_ascii_lowercase();
        let key = cert.with_extension("key");
        let what = format!("tls.dir {}", cert.display());
        if !key.exists() {
            problems.push(Problem {
                path: what,
                message: format!("no key file {} next to it", key.display()),
            });
            continue;
        }
        let what_key = format!("tls.dir {}", key.display());
        if let Some(ck) = load_pair(&cert, &key, &what, &what_key, provider, problems) {
            out.insert(name, ck);
        }
    }
    if out.is_empty() && problems.is_empty() {
        problems.push(Problem {
            path: "tls.dir".into(),
            message: format!(
                "no certificate pairs (<name>.pem + <name>.key) in {}",
                dir.display()
            ),
        });
    }
    out
}

/// Build the server configuration from `[tls]`; every problem listed.
pub fn load(cfg: &TlsConfig, h2: bool) -> Result<Arc<ServerConfig>, Vec<Problem>> {
    let provider = provider();
    let mut problems = Vec::new();
    let mut default = match (&cfg.cert, &cfg.key) {
        (Some(cert), Some(key)) => {
            load_pair(cert, key, "tls.cert", "tls.key", &provider, &mut problems)
        }
        _ => None,
    };
    let mut by_name = match &cfg.dir {
        Some(dir) => load_dir(dir, &provider, &mut problems),
        None => HashMap::new(),
    };
    if let Some(d) = by_name.remove("default") {
        default = Some(d);
    }
    if default.is_none() && by_name.len() == 1 {
        default = by_name.values().next().cloned();
    }
    if default.is_none() && by_name.is_empty() && problems.is_empty() {
        problems.push(Problem {
            path: "tls".into(),
            message: "no certificate: set tls.cert and tls.key, or tls.dir".into(),
        });
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut sc = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| {
            vec![Problem {
                path: "tls".into(),
                message: e.to_string(),
            }]
        })?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(SniCerts { by_name, default }));
    sc.alpn_protocols = if h2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(Arc::new(sc))
}

/// The HTTPS listener's current configuration; swapped on reload.
pub struct TlsAcceptor {
    config: ArcSwap<ServerConfig>,
}

impl TlsAcceptor {
    pub fn new(config: Arc<ServerConfig>) -> Self {
        TlsAcceptor {
            config: ArcSwap::new(config),
        }
    }

    /// The acceptor for a new connection (lock-free).
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.config.load_full())
    }

    /// Use `config` (from [`load`]) for new connections.
    pub fn replace(&self, config: Arc<ServerConfig>) {
        self.config.store(config);
    }
}
