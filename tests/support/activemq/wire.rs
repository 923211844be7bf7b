//! The test side's own few STOMP frames, on blocking std sockets (independent of
//! `gearlb::stomp`): read one frame, check that a broker answers, and [`Observer`], a
//! plain STOMP 1.0 subscriber (no escaping, no heart-beats, auto-ack).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A frame as read: headers as they came (STOMP 1.0: not escaped).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawFrame {
    pub command: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawFrame {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// `ERROR (message)` or the command, for an error text.
    pub fn describe(&self) -> String {
        match self.get("message") {
            Some(m) => format!("{} ({m})", self.command),
            None => self.command.clone(),
        }
    }
}

/// One frame from `s` (EOLs before it skipped), `buf` holding what was read beyond it.
/// Honours `content-length`. Fails on the socket's read timeout or EOF.
pub fn read_frame(s: &mut TcpStream, buf: &mut Vec<u8>) -> Result<RawFrame, String> {
    loop {
        while buf.first().is_some_and(|&b| b == b'\n' || b == b'\r') {
            buf.remove(0);
        }
        if let Some(frame) = parse(buf)? {
            return Ok(frame);
        }
        let mut chunk = [0u8; 8192];
        let n = s.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err(format!(
                "connection closed; had {:?}",
                String::from_utf8_lossy(buf)
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// A whole frame at the start of `buf`, taken out of it.
fn parse(buf: &mut Vec<u8>) -> Result<Option<RawFrame>, String> {
    let Some(head_end) = buf.windows(2).position(|w| w == b"\n\n") else {
        return Ok(None);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.lines();
    let command = lines.next().unwrap_or("").to_string();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    let start = head_end + 2;
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map(|(_, v)| {
            v.parse::<usize>()
                .map_err(|e| format!("content-length {v}: {e}"))
        })
        .transpose()?;
    let end = match length {
        Some(n) if buf.len() > start + n => start + n,
        Some(_) => return Ok(None),
        None => match buf[start..].iter().position(|&b| b == 0) {
            Some(p) => start + p,
            None => return Ok(None),
        },
    };
    let body = buf[start..end].to_vec();
    buf.drain(..=end);
    Ok(Some(RawFrame {
        command,
        headers,
        body,
    }))
}

fn connect(
    addr: SocketAddr,
    credentials: Option<(&str, &str)>,
) -> Result<(TcpStream, Vec<u8>), String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("connect {addr}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut connect = String::from("CONNECT\n");
    if let Some((user, pass)) = credentials {
        connect.push_str(&format!("login:{user}\npasscode:{pass}\n"));
    }
    connect.push_str("\n\0");
    s.write_all(connect.as_bytes()).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let answer = read_frame(&mut s, &mut buf)?;
    if answer.command != "CONNECTED" {
        return Err(format!("CONNECT answered by {}", answer.describe()));
    }
    Ok((s, buf))
}

/// CONNECT answered by CONNECTED, then DISCONNECT: the broker is up.
pub fn ping(addr: SocketAddr, credentials: Option<(&str, &str)>) -> Result<(), String> {
    let (mut s, _) = connect(addr, credentials)?;
    let _ = s.write_all(b"DISCONNECT\n\n\0");
    Ok(())
}

/// A subscriber of one destination, `ack:auto`, seeing what the broker dispatches.
pub struct Observer {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Observer {
    /// Subscribe and wait for the SUBSCRIBE's receipt.
    pub fn subscribe(
        addr: SocketAddr,
        credentials: Option<(&str, &str)>,
        destination: &str,
    ) -> Result<Observer, String> {
        let (mut s, mut buf) = connect(addr, credentials)?;
        let sub =
            format!("SUBSCRIBE\nid:0\ndestination:{destination}\nack:auto\nreceipt:sub\n\n\0");
        s.write_all(sub.as_bytes()).map_err(|e| e.to_string())?;
        let answer = read_frame(&mut s, &mut buf)?;
        if answer.command != "RECEIPT" {
            return Err(format!("SUBSCRIBE answered by {}", answer.describe()));
        }
        Ok(Observer { s, buf })
    }

    /// The next MESSAGE within `wait`, or `None`.
    pub fn next(&mut self, wait: Duration) -> Option<RawFrame> {
        let timeout = wait.max(Duration::from_millis(1));
        self.s.set_read_timeout(Some(timeout)).unwrap();
        match read_frame(&mut self.s, &mut self.buf) {
            Ok(f) if f.command == "MESSAGE" => Some(f),
            Ok(f) => panic!("observer got {}", f.describe()),
            // The read timeout.
            Err(e) if e.starts_with("read:") => None,
            Err(e) => panic!("observer: {e}"),
        }
    }
}
