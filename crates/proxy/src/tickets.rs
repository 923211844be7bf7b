//! TLS session tickets every balancer of an application can open: keys derived from the
//! application's secret (HKDF-SHA256) for each period of [`PERIOD`] seconds of Unix time,
//! so that balancers agree on them without talking, and a session resumes on whichever
//! balancer a router sends the client to (HAProxy shares its `tls-ticket-keys` file for
//! the same reason).
//!
//! A ticket is `period (8 bytes, big-endian) | nonce (12) | ChaCha20-Poly1305 of the
//! session state`. It is sealed with the current period's key and opened with the key of
//! the period it names when that is the current one, the previous one (a ticket's
//! lifetime) or the next one (a balancer whose clock is a little ahead). Keys of older
//! periods are never derived again, so a ticket ages out after at most two periods.
//! Whoever holds the application's secret can open tickets of any period, as with a
//! shared ticket-key file: the secret is the one gossip already relies on.

use chacha20poly1305::aead::{Aead, AeadCore, KeyInit, OsRng};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use gearlb_core::time::unix_secs;
use rustls::server::ProducesTickets;
use sha2::Sha256;

/// Seconds per ticket key: a ticket is good for one period (the lifetime clients are
/// told), and is still opened during the next.
pub const PERIOD: u64 = 6 * 3600;

const HEADER: usize = 8 + 12;

/// Tickets sealed with keys every balancer of the application derives alike.
pub struct SharedTicketer {
    /// HKDF-SHA256 pseudorandom key of the secret (and application id).
    prk: hkdf::Hkdf<Sha256>,
}

impl std::fmt::Debug for SharedTicketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedTicketer(<redacted>)")
    }
}

impl SharedTicketer {
    /// Keys from the application's `secret`, apart for each `application` id.
    pub fn new(application: &str, secret: &[u8]) -> Self {
        let salt = format!("gearlb tls tickets {application}");
        SharedTicketer {
            prk: hkdf::Hkdf::<Sha256>::new(Some(salt.as_bytes()), secret),
        }
    }

    fn cipher(&self, period: u64) -> ChaCha20Poly1305 {
        let mut key = [0u8; 32];
        // 32 bytes is far below HKDF-SHA256's output limit: expand cannot fail.
        let _ = self.prk.expand(&period.to_be_bytes(), &mut key);
        ChaCha20Poly1305::new(Key::from_slice(&key))
    }

    fn seal_at(&self, now: u64, plain: &[u8]) -> Option<Vec<u8>> {
        let period = now / PERIOD;
        let nonce = ChaCha20Poly1305::generate_nonce(&mut OsRng);
        let sealed = self.cipher(period).encrypt(&nonce, plain).ok()?;
        let mut out = Vec::with_capacity(HEADER + sealed.len());
        out.extend_from_slice(&period.to_be_bytes());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&sealed);
        Some(out)
    }

    fn open_at(&self, now: u64, ticket: &[u8]) -> Option<Vec<u8>> {
        if ticket.len() < HEADER + 16 {
            return None;
        }
        let (head, sealed) = ticket.split_at(HEADER);
        let period = u64::from_be_bytes(head[..8].try_into().ok()?);
        let current = now / PERIOD;
        if period + 1 < current || period > current + 1 {
            return None;
        }
        let nonce = Nonce::from_slice(&head[8..]);
        self.cipher(period).decrypt(nonce, sealed).ok()
    }
}

impl ProducesTickets for SharedTicketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        PERIOD as u32
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.seal_at(unix_secs(), plain)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        self.open_at(unix_secs(), cipher)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balancers_of_one_application_open_each_others_tickets_for_two_periods() {
        let a = SharedTicketer::new("app1", b"secret-0123456789");
        let b = SharedTicketer::new("app1", b"secret-0123456789");
        let t0 = 1_800_000_000;
        let ticket = a.seal_at(t0, b"session state").unwrap();
        assert_eq!(b.open_at(t0, &ticket).unwrap(), b"session state");
        // Still within the next period; gone after it.
        assert!(b.open_at(t0 + PERIOD, &ticket).is_some());
        assert!(b.open_at(t0 + 2 * PERIOD + PERIOD, &ticket).is_none());
        // A balancer whose clock is a period behind still opens it.
        assert!(b.open_at(t0 - PERIOD, &ticket).is_some());
        // Another application, another secret, or a flipped byte: refused.
        let other = SharedTicketer::new("app2", b"secret-0123456789");
        assert!(other.open_at(t0, &ticket).is_none());
        let stranger = SharedTicketer::new("app1", b"another-secret");
        assert!(stranger.open_at(t0, &ticket).is_none());
        for i in 0..ticket.len() {
            let mut bad = ticket.clone();
            bad[i] ^= 1;
            assert!(b.open_at(t0, &bad).is_none(), "byte {i}");
        }
        assert!(b.open_at(t0, &ticket[..HEADER + 15]).is_none());
        assert!(b.open_at(t0, &[]).is_none());
        // Two tickets of the same state differ (fresh nonces).
        assert_ne!(ticket, a.seal_at(t0, b"session state").unwrap());
    }
}
