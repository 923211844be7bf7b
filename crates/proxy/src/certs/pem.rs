//! PEM text as uploaded: its blocks, each with its label, its RFC 1421 headers
//! (`Proc-Type`, `DEK-Info` of OpenSSL's legacy encrypted keys, which rustls's PEM
//! reader drops) and its DER body; and PEM written back.
//!
//! Tolerant of what people paste: CRLF line ends, surrounding whitespace, text between
//! blocks. Strict where it matters: a block without its END line, or a body that is not
//! base64, is an error. The caller bounds the input's size; nothing here panics.

use base64::Engine;
use zeroize::Zeroizing;

/// One `-----BEGIN <label>-----` … `-----END <label>-----` block.
pub struct Block {
    pub label: String,
    /// `Name: value` lines before the body, in order.
    pub headers: Vec<(String, String)>,
    /// The decoded body (a key's may be secret: wiped when dropped).
    pub der: Zeroizing<Vec<u8>>,
}

impl Block {
    /// The value of header `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// A block being read: its label, headers and base64 body so far.
type Open = (String, Vec<(String, String)>, Zeroizing<String>);

/// Every PEM block of `text`, in order.
pub fn blocks(text: &str) -> Result<Vec<Block>, String> {
    let mut out = Vec::new();
    let mut open: Option<Open> = None;
    for line in text.lines() {
        let line = line.trim();
        match &mut open {
            None => {
                if let Some(label) = line
                    .strip_prefix("-----BEGIN ")
                    .and_then(|l| l.strip_suffix("-----"))
                {
                    open = Some((label.to_string(), Vec::new(), Zeroizing::new(String::new())));
                }
            }
            Some((label, headers, body)) => {
                if let Some(end) = line
                    .strip_prefix("-----END ")
                    .and_then(|l| l.strip_suffix("-----"))
                {
                    if end != label.as_str() {
                        return Err(format!("PEM block {label} ends with END {end}"));
                    }
                    let der = base64::engine::general_purpose::STANDARD
                        .decode(body.as_bytes())
                        .map_err(|_| format!("PEM block {label}: its body is not base64"))?;
                    out.push(Block {
                        label: std::mem::take(label),
                        headers: std::mem::take(headers),
                        der: Zeroizing::new(der),
                    });
                    open = None;
                } else if line.starts_with("-----") {
                    return Err(format!("PEM block {label} has no END line"));
                } else if body.is_empty() && line.contains(':') {
                    if let Some((name, value)) = line.split_once(':') {
                        headers.push((name.trim().to_string(), value.trim().to_string()));
                    }
                } else {
                    body.push_str(line);
                }
            }
        }
    }
    match open {
        Some((label, _, _)) => Err(format!("PEM block {label} has no END line")),
        None => Ok(out),
    }
}

/// `der` as a PEM block labelled `label` (64 columns, LF line ends), in a string that
/// is wiped when dropped.
pub fn encode(label: &str, der: &[u8]) -> Zeroizing<String> {
    let b64 = Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(der));
    let mut out = Zeroizing::new(String::with_capacity(b64.len() + b64.len() / 64 + 64));
    out.push_str("-----BEGIN ");
    out.push_str(label);
    out.push_str("-----\n");
    // Base64 is ASCII: every 64-byte chunk is a valid str.
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).unwrap_or_default());
        out.push('\n');
    }
    out.push_str("-----END ");
    out.push_str(label);
    out.push_str("-----\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn certs_pem_blocks_headers_crlf_and_errors() {
        let text = "junk\r\n  -----BEGIN EC PARAMETERS-----\r\nBggqhkjOPQMBBw==\r\n-----END EC PARAMETERS-----\r\n\
                    -----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\nAAEC\nAw==\n-----END RSA PRIVATE KEY-----\n";
        let b = blocks(text).unwrap();
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].label, "EC PARAMETERS");
        assert_eq!(b[1].label, "RSA PRIVATE KEY");
        assert_eq!(b[1].header("dek-info"), Some("AES-128-CBC,00"));
        assert_eq!(b[1].header("proc-type"), Some("4,ENCRYPTED"));
        assert_eq!(&b[1].der[..], &[0, 1, 2, 3]);
        assert!(blocks("-----BEGIN X-----\nAAAA\n").is_err());
        assert!(blocks("-----BEGIN X-----\nAAAA\n-----END Y-----\n").is_err());
        assert!(blocks("-----BEGIN X-----\n!!!!\n-----END X-----\n").is_err());
        assert!(blocks("no pem here").unwrap().is_empty());
        let pem = encode("PRIVATE KEY", &[7u8; 100]);
        let back = blocks(&pem).unwrap();
        assert_eq!(back[0].label, "PRIVATE KEY");
        assert_eq!(&back[0].der[..], &[7u8; 100]);
        assert!(pem.lines().all(|l| l.len() <= 64 || l.starts_with("-----")));
    }
}
