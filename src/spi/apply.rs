//! One routing event, from delivery to acknowledgment ([`Spi::handle`]): a redelivery
//! is recognised by its id and changes nothing; the body is parsed and checked (an
//! `add_ssl`'s certificate is decrypted and matched to its key); the table is changed,
//! the event journaled (fsync), and what the table routes published. Only then does
//! the handler return, and the consumer acknowledge the event. An event that cannot be
//! applied (a malformed body, a bad certificate) is logged with its reason, recorded in
//! the report and acknowledged too: it must not hold back the ones behind it, and a
//! NACK would dead-letter it. A crash anywhere before the acknowledgment redelivers the
//! event, and applying it again changes nothing.

use std::sync::atomic::Ordering;

use tracing::{debug, info, warn};

use gearlb_core::spi::{Action, Table};

use super::parts::Spi;
use super::store::Entry;
use crate::report::spi::Failure;
use crate::stomp::{Delivery, Handled};

#[async_trait::async_trait]
impl crate::stomp::Handler for Spi {
    async fn handle(&self, d: Delivery) -> Handled {
        // Nothing is applied before the table is bootstrapped (a peer's, the REST
        // API's): the broker holds the events meanwhile.
        let mut gate = self.gate.subscribe();
        tokio::select! {
            r = gate.wait_for(|open| *open) => if r.is_err() { return Handled::Keep },
            // Stopping before the table is ready: the broker keeps it for next time.
            _ = self.stop.cancelled() => return Handled::Keep,
        }
        self.counters.received.fetch_add(1, Ordering::Relaxed);
        let id = d.message_id.clone();
        let mut table = self.table.lock().await;
        table.current_ms = crate::time::unix_ms();
        if table.seen(&id) {
            self.counters.duplicates.fetch_add(1, Ordering::Relaxed);
            info!(message_id = %id, "routing event delivered again: it was applied already");
            return Handled::Ack;
        }
        let failure = |action: &str, service: String, reason: String| Failure {
            at_ms: crate::time::unix_ms(),
            message_id: id.clone(),
            action: action.to_string(),
            service,
            reason,
        };
        let ev = match gearlb_core::spi::parse(&d.body) {
            Ok(ev) => ev,
            Err(reason) => {
                warn!(message_id = %id, %reason, "routing event refused: acknowledged, nothing changed");
                self.failed(failure("", String::new(), reason));
                return self.remember_failed(&mut table, &id).await;
            }
        };
        if let Action::Other(name) = &ev.action {
            self.counters.ignored.fetch_add(1, Ordering::Relaxed);
            let first = self
                .logged_actions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(name.clone());
            if first {
                info!(action = %name, deprecated = ev.deprecated, "routing event with an action that is not a routing change: acknowledged and left alone (logged once)");
            } else {
                debug!(action = %name, "routing event left alone");
            }
            return self.remember_failed(&mut table, &id).await;
        }
        let service = ev.service();
        let cert = match (&ev.action, &ev.alias, &ev.ssl) {
            (Action::AddSsl, Some(alias), Some(ssl)) => {
                // Decrypting may take up to a second (PBKDF2, scrypt): off the runtime.
                let (a, c, k, p) = (
                    alias.clone(),
                    ssl.cert.clone(),
                    ssl.key.clone(),
                    ssl.pass_phrase.clone(),
                );
                let checked = tokio::task::spawn_blocking(move || {
                    gearlb_proxy::certs::alias_cert(&a, &c, &k, p.as_deref())
                })
                .await
                .unwrap_or_else(|e| Err(format!("alias {alias}: the check failed: {e}")));
                match checked {
                    Ok(c) => Some(gearlb_core::spi::table::Cert {
                        cert_pem: ssl.cert.clone(),
                        key_pem: c.plain_key_pem.clone(),
                        fingerprint: c.fingerprint.clone(),
                        active: true,
                    }),
                    Err(reason) => {
                        warn!(message_id = %id, %service, %alias, %reason, "certificate refused: the alias keeps the default certificate; acknowledged");
                        self.failed(failure("add_ssl", service, reason));
                        return self.remember_failed(&mut table, &id).await;
                    }
                }
            }
            _ => None,
        };
        // Saved first: an event the disk refuses is not applied here, and not
        // acknowledged (its journal line replays it at the next start if it did land).
        let entry = Entry {
            id: id.clone(),
            body: journal_body(&ev, &d.body),
            cert: cert.clone(),
        };
        let mut next = table.clone();
        let applied = next.apply(&ev, cert);
        next.remember(&id);
        if !self.journal_until_saved(entry, &next).await {
            return Handled::Keep;
        }
        *table = next;
        if applied.changed {
            self.publish(&table).await;
        } else {
            self.applied.store(table.applied, Ordering::Relaxed);
        }
        self.counters.applied.fetch_add(1, Ordering::Relaxed);
        info!(message_id = %id, action = %ev.action.name(), %service, changed = applied.changed, "routing event applied: {}", applied.note);
        Handled::Ack
    }
}

/// What the journal keeps of an event's body: the body, but for an `add_ssl`, whose key
/// as uploaded and pass phrase are never written down (its checked certificate, with the
/// key decrypted, is the journal entry's own `cert`): the same event without them.
fn journal_body(ev: &gearlb_core::spi::Event, raw: &[u8]) -> String {
    match (&ev.action, &ev.alias) {
        (Action::AddSsl, Some(alias)) => format!(
            "---\n:action: :add_ssl\n:app_name: {}\n:namespace: {}\n:alias: {alias}\n\
             :ssl: see cert\n:private_key: see cert\n",
            ev.app, ev.namespace
        ),
        _ => String::from_utf8_lossy(raw).into_owned(),
    }
}

impl Spi {
    /// Journal an applied event, trying again (with backoff, logged once) while the
    /// disk refuses: the event is not acknowledged before it is saved, and the broker
    /// keeps the ones behind it meanwhile. Gives up only when the balancer stops.
    async fn journal_until_saved(&self, entry: Entry, table: &Table) -> bool {
        let mut wait = std::time::Duration::from_millis(250);
        let mut warned = false;
        loop {
            let e = Entry {
                id: entry.id.clone(),
                body: entry.body.clone(),
                cert: entry.cert.clone(),
            };
            match self.journal(e, table).await {
                Ok(()) => {
                    if warned {
                        info!(message_id = %entry.id, "routing table saved again: events are acknowledged again");
                    }
                    return true;
                }
                Err(e) => {
                    if !warned {
                        warn!(message_id = %entry.id, error = %e, "routing table cannot be saved: the event is not acknowledged until it is (trying again)");
                        warned = true;
                    }
                }
            }
            tokio::select! {
                _ = self.stop.cancelled() => return false,
                _ = tokio::time::sleep(wait) => {}
            }
            wait = (wait * 2).min(std::time::Duration::from_secs(30));
        }
    }

    /// Journal an applied event (and fold the journal into a snapshot when due), off
    /// the runtime's threads, durably before it returns.
    async fn journal(&self, entry: Entry, table: &Table) -> Result<(), String> {
        let store = self.store.clone();
        let due = tokio::task::spawn_blocking(move || {
            let mut s = store.lock().unwrap_or_else(|p| p.into_inner());
            s.append(&entry).map(|()| s.due())
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        if due {
            self.write_snapshot(table).await?;
        }
        Ok(())
    }

    /// An event that changed nothing (refused, or not a routing change) is remembered
    /// by its id, so that its redelivery is not reported again; journaled like any.
    async fn remember_failed(&self, table: &mut Table, id: &str) -> Handled {
        let entry = Entry {
            id: id.to_string(),
            body: String::new(),
            cert: None,
        };
        let mut next = table.clone();
        next.remember(id);
        if !self.journal_until_saved(entry, &next).await {
            return Handled::Keep;
        }
        table.remember(id);
        self.applied.store(table.applied, Ordering::Relaxed);
        Handled::Ack
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_add_ssl_is_journaled_without_its_key_or_pass_phrase() {
        let raw = "---\n:action: :add_ssl\n:app_name: myapp\n:namespace: ns1\n:alias: www.example.org\n\
                   :ssl: |\n  -----BEGIN CERTIFICATE-----\n  MIIB\n  -----END CERTIFICATE-----\n\
                   :private_key: |\n  -----BEGIN RSA PRIVATE KEY-----\n  SECRETKEY\n  -----END RSA PRIVATE KEY-----\n\
                   :pass_phrase: s3cret-phrase\n";
        let ev = gearlb_core::spi::parse(raw.as_bytes()).unwrap();
        let body = journal_body(&ev, raw.as_bytes());
        assert!(
            !body.contains("SECRETKEY") && !body.contains("s3cret-phrase"),
            "{body}"
        );
        // It replays as the same event (its checked certificate comes with the entry).
        let again = gearlb_core::spi::parse(body.as_bytes()).unwrap();
        assert_eq!(again.service(), ev.service());
        assert_eq!((again.action, again.alias), (ev.action, ev.alias));
        let other =
            "---\n:action: :add_alias\n:app_name: myapp\n:namespace: ns1\n:alias: a.example.org\n";
        let ev = gearlb_core::spi::parse(other.as_bytes()).unwrap();
        assert_eq!(journal_body(&ev, other.as_bytes()), other);
    }
}
