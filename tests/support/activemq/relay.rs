//! A TCP relay on 127.0.0.1 between a consumer and a broker, whose connections a test
//! can cut (both ends closed at once, as a network failure or a broker dropping the
//! connection would).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Relays each connection it accepts to `to`; [`Relay::cut`] closes those open.
pub struct Relay {
    pub addr: SocketAddr,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Relay {
    pub async fn start(to: SocketAddr) -> Relay {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let list = conns.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = l.accept().await {
                list.lock().unwrap().push(tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                }));
            }
        });
        Relay { addr, conns }
    }

    /// Close every connection through it (both ends).
    pub fn cut(&self) {
        self.conns.lock().unwrap().drain(..).for_each(|h| h.abort());
    }
}
