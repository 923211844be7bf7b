//! Telling systemd how the service is (`sd_notify(3)`), for a unit of `Type=notify`:
//! `READY=1` once the balancer serves (a router: once its table is loaded and
//! served), `RELOADING=1` then `READY=1` around a reload (SIGHUP, `systemctl reload`),
//! `STOPPING=1` when it stops. A datagram to `$NOTIFY_SOCKET` (a path, or `@` for the
//! abstract namespace); without the variable nothing is sent. Failures are logged at
//! debug level only: a balancer serves whether or not systemd hears it.

use std::os::unix::net::UnixDatagram;

/// Send one notification (`READY=1`, `STATUS=…`); true when it was sent.
pub fn notify(state: &str) -> bool {
    notify_to(std::env::var_os("NOTIFY_SOCKET").as_deref(), state)
}

/// Send `state` to the socket `path` (`$NOTIFY_SOCKET`'s value).
fn notify_to(path: Option<&std::ffi::OsStr>, state: &str) -> bool {
    let Some(path) = path else {
        return false;
    };
    let sent = (|| -> std::io::Result<()> {
        let sock = UnixDatagram::unbound()?;
        let bytes = path.as_encoded_bytes();
        if let Some(name) = bytes.strip_prefix(b"@") {
            use std::os::linux::net::SocketAddrExt;
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            sock.send_to_addr(state.as_bytes(), &addr)?;
        } else {
            sock.send_to(state.as_bytes(), std::path::Path::new(&path))?;
        }
        Ok(())
    })();
    match sent {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(error = %e, "systemd notification not sent");
            false
        }
    }
}

/// `RELOADING=1` with the monotonic time systemd asks for (`Type=notify-reload`).
pub fn reloading() -> bool {
    notify(&reloading_state())
}

fn reloading_state() -> String {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let usec = now.tv_sec as u64 * 1_000_000 + now.tv_nsec as u64 / 1_000;
    format!("RELOADING=1\nMONOTONIC_USEC={usec}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notifications_reach_the_socket_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let rx = UnixDatagram::bind(&path).unwrap();
        let to = Some(path.as_os_str());
        assert!(notify_to(to, "READY=1"));
        assert!(notify_to(to, &reloading_state()));
        let mut buf = [0u8; 256];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        let n = rx.recv(&mut buf).unwrap();
        let text = std::str::from_utf8(&buf[..n]).unwrap();
        assert!(text.starts_with("RELOADING=1\nMONOTONIC_USEC="), "{text}");
        assert!(!notify_to(None, "READY=1"));
        // The abstract namespace (`@name`).
        let name = format!("gearlb-notify-test-{}", std::process::id());
        use std::os::linux::net::SocketAddrExt;
        let abs = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let rx = UnixDatagram::bind_addr(&abs).unwrap();
        assert!(notify_to(
            Some(std::ffi::OsStr::new(&format!("@{name}"))),
            "STOPPING=1"
        ));
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }
}
