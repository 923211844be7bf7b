//! Notes: short messages from one balancer straight to another, in the same
//! authenticated frames and over the same connections as gossip, but outside it.
//!
//! Gossip spreads what every balancer must know; a note is for the one balancer that
//! waits for it. Today that is a rotation acknowledgment ([`Note::Ack`]): the balancer
//! that took a rotate command waits for every live peer's, and a peer used to send it
//! by opening a gossip exchange with that balancer, whose answer carried every other
//! acknowledgment it had gathered so far — O(M) messages of O(M) keys for one
//! rotation, on the one process everybody waits for. A note is one small frame. The
//! acknowledgment is still published in gossip (`ack:` keys) for everyone else, and
//! for the waiting balancer too should the note be lost.
//!
//! A note's message starts with [`NOTE_MAGIC`], which no chitchat message does (those
//! start with chitchat's own magic number), then JSON. A balancer that does not know
//! notes counts one as a malformed gossip message and drops it.

use std::net::SocketAddr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::outbound::Outbound;
use gearlb_core::rotation::register::Ack;

/// The first bytes of every note.
pub const NOTE_MAGIC: &[u8; 4] = b"GLBN";

/// Notes received from peers: each with the gossip address its frame came from.
pub type NoteInbox = tokio::sync::mpsc::Receiver<(SocketAddr, Vec<u8>)>;

/// The longest note read (an acknowledgment is a few hundred bytes).
const MAX_NOTE: usize = 16 * 1024;

/// What one balancer tells another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "note", rename_all = "lowercase")]
pub enum Note {
    /// `from`'s acknowledgment of the op in force on `gear`, for the balancer that
    /// took the command.
    Ack {
        from: String,
        gear: String,
        ack: Ack,
    },
}

impl Note {
    /// The note as a frame's message.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = NOTE_MAGIC.to_vec();
        // A note is plain data: serializing it cannot fail.
        out.extend(serde_json::to_vec(self).unwrap_or_default());
        out
    }

    /// The note in a frame's message, if it is a well-formed one.
    pub fn decode(message: &[u8]) -> Option<Note> {
        let body = message.strip_prefix(NOTE_MAGIC.as_slice())?;
        if body.len() > MAX_NOTE {
            return None;
        }
        serde_json::from_slice(body).ok()
    }
}

/// Whether a frame's message is a note rather than a chitchat message.
pub fn is_note(message: &[u8]) -> bool {
    message.starts_with(NOTE_MAGIC)
}

/// Sends notes over the transport's connections.
#[derive(Clone)]
pub struct Notes {
    outbound: Arc<Outbound>,
}

impl Notes {
    pub(super) fn new(outbound: Arc<Outbound>) -> Self {
        Notes { outbound }
    }

    /// Send `note` to the balancer whose gossip address is `to` (queued: a lost note
    /// costs only time, the same acknowledgment travels by gossip).
    pub async fn send(&self, to: SocketAddr, note: &Note) {
        self.outbound.send(to, &note.encode()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gearlb_core::rotation::register::AckState;

    #[test]
    fn notes_round_trip_and_are_told_from_chitchat_messages() {
        let note = Note::Ack {
            from: "a".repeat(32),
            gear: "g1-ns".into(),
            ack: Ack {
                epoch: "12.lb1".into(),
                state: AckState::Drained,
                inflight: 0,
                forced: 1,
            },
        };
        let bytes = note.encode();
        assert!(is_note(&bytes));
        assert_eq!(Note::decode(&bytes), Some(note));
        // chitchat's messages start with its magic number 45 139, little endian.
        assert!(!is_note(&[0x53, 0xb0, 0, 2, 0]));
        assert_eq!(Note::decode(b"GLBN{not json"), None);
        assert_eq!(Note::decode(b"GLB"), None);
        let mut huge = NOTE_MAGIC.to_vec();
        huge.extend(vec![b' '; MAX_NOTE + 1]);
        assert_eq!(Note::decode(&huge), None);
    }
}
