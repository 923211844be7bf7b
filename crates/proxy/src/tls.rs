//! The optional HTTPS listener's certificates: loading, SNI selection and hot reload.
//!
//! Owns turning `[tls]` into a rustls server configuration (ring provider, TLS 1.2 and
//! 1.3, ALPN `h2` when h2c is on and `http/1.1`, the server's cipher-suite order, not
//! the client's). Certificates come from one pair (`cert` + `key`: the default
//! certificate) and/or a directory of pairs (`dir`: `<name>.pem` with `<name>.key`),
//! chosen by the SNI name a client sends, as HAProxy chooses: a certificate answers
//! for every DNS name in its subject alternative names (`*.example.com` for one label)
//! and for its file name `<name>` (the name takes precedence); exact names before
//! wildcards. The pair named `default` (else the `cert`/`key` pair, else the only pair)
//! answers clients that send no name or an unknown one. A DER OCSP response in
//! `<cert file>.ocsp` beside a certificate (HAProxy's convention) is stapled.
//!
//! Runtime alias certificates ([`AliasCerts`]: uploaded by applications' owners,
//! checked and decrypted by [`crate::certs`]) come before all of these: an SNI name
//! that is an alias with a certificate of its own (exact name, any case) gets it; any
//! other name is chosen as above, so an alias without one gets the platform's wildcard
//! or the default. Setting or removing one swaps a map that handshakes read lock-free:
//! no reload, no restart, and connections already open keep their certificate. The map
//! is shared by every configuration built with it, so reloads keep it.
//!
//! Resumption ([`Resumption`]): TLS 1.2 and 1.3 session tickets under keys that rotate
//! every six hours, and a session cache of [`SESSION_CACHE`] entries; both outlive
//! reloads, so a reload does not force every client through a full handshake.
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
use rustls::server::{ClientHello, ProducesTickets, ResolvesServerCert, StoresServerSessions};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;

/// Sessions kept for TLS 1.2 resumption by id (HAProxy's `tune.ssl.cachesize`).
pub const SESSION_CACHE: usize = 20_000;
/// Largest OCSP response stapled.
const MAX_OCSP: u64 = 64 * 1024;

/// What lets clients resume sessions, kept across reloads.
#[derive(Clone)]
pub struct Resumption {
    cache: Arc<dyn StoresServerSessions>,
    ticketer: Arc<dyn ProducesTickets>,
}

impl std::fmt::Debug for Resumption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resumption").finish_non_exhaustive()
    }
}

impl Resumption {
    /// Tickets only this process opens (no application secret to share).
    pub fn new() -> Result<Resumption, rustls::Error> {
        Ok(Resumption {
            cache: rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE),
            ticketer: rustls::crypto::ring::Ticketer::new()?,
        })
    }

    /// Tickets every balancer of `application` opens: keys from its `secret` on a
    /// schedule they all keep ([`crate::tickets`]).
    pub fn shared(application: &str, secret: &[u8]) -> Resumption {
        Resumption {
            cache: rustls::server::ServerSessionMemoryCache::new(SESSION_CACHE),
            ticketer: std::sync::Arc::new(crate::tickets::SharedTicketer::new(application, secret)),
        }
    }
}

use gearlb_core::config::{Problem, TlsConfig};

/// Alias certificates set at runtime (uploaded by an application's owner, checked by
/// [`crate::certs::alias_cert`]): lower-case alias → certificate. Cheap to clone (the
/// clones share one map); handshakes read it lock-free, and a change is a new map
/// swapped in, so connections already open keep their certificate. Every
/// configuration [`load_with`] builds consults the same map, so a reload of `[tls]`
/// keeps the aliases.
#[derive(Clone, Default)]
pub struct AliasCerts {
    map: Arc<ArcSwap<HashMap<String, Arc<CertifiedKey>>>>,
}

impl std::fmt::Debug for AliasCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let map = self.map.load();
        let mut names: Vec<&String> = map.keys().collect();
        names.sort();
        f.debug_struct("AliasCerts")
            .field("aliases", &names)
            .finish()
    }
}

impl AliasCerts {
    /// No alias certificates.
    pub fn new() -> AliasCerts {
        AliasCerts::default()
    }

    /// Serve `cert` to clients that ask for `alias` (any case), in place of the one it
    /// had, from the next handshake on.
    pub fn set(&self, alias: &str, cert: Arc<CertifiedKey>) {
        let alias = alias.to_ascii_lowercase();
        self.map.rcu(|m| {
            let mut m = HashMap::clone(m);
            m.insert(alias.clone(), cert.clone());
            m
        });
    }

    /// Stop serving `alias`'s own certificate (its name gets the configured ones
    /// again); whether it had one.
    pub fn remove(&self, alias: &str) -> bool {
        let alias = alias.to_ascii_lowercase();
        let mut had = false;
        self.map.rcu(|m| {
            let mut m = HashMap::clone(m);
            had = m.remove(&alias).is_some();
            m
        });
        had
    }

    /// Serve exactly `certs` (alias → certificate; aliases in any case).
    pub fn replace_all(&self, certs: HashMap<String, Arc<CertifiedKey>>) {
        let map = certs
            .into_iter()
            .map(|(alias, cert)| (alias.to_ascii_lowercase(), cert))
            .collect();
        self.map.store(Arc::new(map));
    }

    /// The certificate of alias `name` (any case), if it has one of its own.
    pub fn get(&self, name: &str) -> Option<Arc<CertifiedKey>> {
        let map = self.map.load();
        match map.get(name) {
            Some(c) => Some(c.clone()),
            None if name.bytes().any(|b| b.is_ascii_uppercase()) => {
                map.get(&name.to_ascii_lowercase()).cloned()
            }
            None => None,
        }
    }

    /// How many aliases have a certificate of their own.
    pub fn len(&self) -> usize {
        self.map.load().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Certificates by SNI name, with a default.
#[derive(Debug)]
struct SniCerts {
    /// Runtime alias certificates: consulted first.
    aliases: AliasCerts,
    /// Lower-case server name (or `*.domain`) → certificate.
    by_name: HashMap<String, Arc<CertifiedKey>>,
    default: Option<Arc<CertifiedKey>>,
}

impl ResolvesServerCert for SniCerts {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        if let Some(name) = hello.server_name() {
            let name = name.to_ascii_lowercase();
            if let Some(c) = self.aliases.get(&name) {
                return Some(c);
            }
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

/// The OCSP response to staple with `cert`: the DER file `<cert>.ocsp` beside it, if any.
fn read_ocsp(cert: &Path, what: &str, problems: &mut Vec<Problem>) -> Option<Vec<u8>> {
    let mut path = cert.as_os_str().to_owned();
    path.push(".ocsp");
    let path = PathBuf::from(path);
    let meta = std::fs::metadata(&path).ok()?;
    let bad = |message: String| Problem {
        path: what.to_string(),
        message,
    };
    if meta.len() == 0 || meta.len() > MAX_OCSP {
        problems.push(bad(format!(
            "{}: {} bytes is not an OCSP response (1 to {MAX_OCSP})",
            path.display(),
            meta.len()
        )));
        return None;
    }
    match std::fs::read(&path) {
        // A DER OCSPResponse is a SEQUENCE; one past its nextUpdate is not stapled (a
        // client that checks would refuse the certificate), and is picked up again
        // when the file changes ([`staples`]).
        Ok(der) if der.first() == Some(&0x30) => match crate::ocsp::next_update(&der) {
            Ok(Some(next)) if next <= gearlb_core::time::unix_secs() => {
                tracing::warn!(file = %path.display(), "OCSP response past its nextUpdate: not stapled");
                None
            }
            _ => Some(der),
        },
        Ok(_) => {
            problems.push(bad(format!("{}: not a DER OCSP response", path.display())));
            None
        }
        Err(e) => {
            problems.push(bad(format!("cannot read {}: {e}", path.display())));
            None
        }
    }
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
    let ocsp = read_ocsp(cert, what_cert, problems);
    match CertifiedKey::from_der(chain, key_der, provider) {
        Ok(mut ck) => {
            ck.ocsp = ocsp;
            Some(Arc::new(ck))
        }
        Err(e) => {
            problems.push(problem(
                what_key,
                format!("{} does not go with {}: {e}", key.display(), cert.display()),
            ));
            None
        }
    }
}

/// What decides the stapled OCSP responses of `cfg`'s certificates: each `.ocsp` file's
/// size and modification time, and whether its response is past `nextUpdate` now. When
/// it changes, the certificates are loaded again (the application checks it every
/// minute).
pub fn staples(cfg: &TlsConfig) -> Vec<(PathBuf, u64, Option<std::time::SystemTime>, bool)> {
    let mut certs: Vec<PathBuf> = cfg.cert.iter().cloned().collect();
    if let Some(dir) = &cfg.dir {
        certs.extend(pem_files(dir).unwrap_or_default());
    }
    certs.sort();
    let now = gearlb_core::time::unix_secs();
    certs
        .into_iter()
        .filter_map(|cert| {
            let mut path = cert.into_os_string();
            path.push(".ocsp");
            let path = PathBuf::from(path);
            let meta = std::fs::metadata(&path).ok()?;
            let expired = std::fs::read(&path)
                .ok()
                .and_then(|der| crate::ocsp::next_update(&der).ok().flatten())
                .is_some_and(|next| next <= now);
            Some((path, meta.len(), meta.modified().ok(), expired))
        })
        .collect()
}

/// The DNS names (and `*.domain` wildcards) a certificate's subject alternative names
/// cover, lower-cased.
fn dns_names(ck: &CertifiedKey) -> Vec<String> {
    let Some(leaf) = ck.cert.first() else {
        return Vec::new();
    };
    match webpki::EndEntityCert::try_from(leaf) {
        Ok(ee) => ee.valid_dns_names().map(str::to_ascii_lowercase).collect(),
        Err(_) => Vec::new(),
    }
}

/// The pairs of a certificate directory: `<name>.pem` + `<name>.key`, by file name.
/// The certificate files (`*.pem`) of `tls.dir`, sorted.
fn pem_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut pems: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "pem"))
        .collect();
    pems.sort();
    Ok(pems)
}

fn load_dir(
    dir: &Path,
    provider: &CryptoProvider,
    problems: &mut Vec<Problem>,
) -> Vec<(String, Arc<CertifiedKey>)> {
    let mut out = Vec::new();
    let pems = match pem_files(dir) {
        Ok(p) => p,
        Err(e) => {
            problems.push(Problem {
                path: "tls.dir".into(),
                message: format!("cannot read directory {}: {e}", dir.display()),
            });
            return out;
        }
    };
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
            out.push((name, ck));
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

/// The names each certificate answers for: its file name first, then the names in it
/// (the first certificate, in file-name order, to claim a name keeps it).
fn index(named: &[(String, Arc<CertifiedKey>)]) -> HashMap<String, Arc<CertifiedKey>> {
    let mut by_name = HashMap::new();
    for (name, ck) in named {
        by_name.insert(name.clone(), ck.clone());
    }
    for (_, ck) in named {
        for n in dns_names(ck) {
            by_name.entry(n).or_insert_with(|| ck.clone());
        }
    }
    by_name
}

/// Build the server configuration from `[tls]`; every problem listed. (`gearlb check`;
/// the listener uses [`load_with`] to keep its sessions across reloads.)
pub fn load(cfg: &TlsConfig, h2: bool) -> Result<Arc<ServerConfig>, Vec<Problem>> {
    let resumption = Resumption::new().map_err(|e| {
        vec![Problem {
            path: "tls".into(),
            message: format!("session tickets: {e}"),
        }]
    })?;
    load_with(cfg, h2, &resumption, &AliasCerts::new())
}

/// As [`load`], resuming sessions with `resumption` and serving `aliases`' runtime
/// certificates before the configured ones.
pub fn load_with(
    cfg: &TlsConfig,
    h2: bool,
    resumption: &Resumption,
    aliases: &AliasCerts,
) -> Result<Arc<ServerConfig>, Vec<Problem>> {
    let provider = provider();
    let mut problems = Vec::new();
    let mut default = match (&cfg.cert, &cfg.key) {
        (Some(cert), Some(key)) => {
            load_pair(cert, key, "tls.cert", "tls.key", &provider, &mut problems)
        }
        _ => None,
    };
    let mut named = match &cfg.dir {
        Some(dir) => load_dir(dir, &provider, &mut problems),
        None => Vec::new(),
    };
    if let Some(i) = named.iter().position(|(n, _)| n == "default") {
        default = Some(named.remove(i).1);
    }
    if default.is_none() && named.len() == 1 {
        default = Some(named[0].1.clone());
    }
    if default.is_none() && named.is_empty() && problems.is_empty() {
        problems.push(Problem {
            path: "tls".into(),
            message: "no certificate: set tls.cert and tls.key, or tls.dir".into(),
        });
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut by_name = index(&named);
    // The default certificate answers for its own names too (after the directory's).
    if let Some(d) = &default {
        for n in dns_names(d) {
            by_name.entry(n).or_insert_with(|| d.clone());
        }
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
        .with_cert_resolver(Arc::new(SniCerts {
            aliases: aliases.clone(),
            by_name,
            default,
        }));
    sc.alpn_protocols = if h2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    // The server's order of cipher suites (strongest first), as HAProxy's
    // `prefer-server-ciphers`.
    sc.ignore_client_order = true;
    sc.session_storage = resumption.cache.clone();
    sc.ticketer = resumption.ticketer.clone();
    Ok(Arc::new(sc))
}

/// The HTTPS listener's current configuration; swapped on reload.
pub struct TlsAcceptor {
    config: ArcSwap<ServerConfig>,
    resumption: Resumption,
    aliases: AliasCerts,
}

impl TlsAcceptor {
    /// `config` must come from [`load_with`] with `resumption` and `aliases`.
    pub fn new(config: Arc<ServerConfig>, resumption: Resumption, aliases: AliasCerts) -> Self {
        TlsAcceptor {
            config: ArcSwap::new(config),
            resumption,
            aliases,
        }
    }

    /// What a reloaded configuration resumes sessions with.
    pub fn resumption(&self) -> &Resumption {
        &self.resumption
    }

    /// The runtime alias certificates: change them here, for new handshakes at once;
    /// a reloaded configuration serves them too (pass them to [`load_with`]).
    pub fn aliases(&self) -> &AliasCerts {
        &self.aliases
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
