//! The egress proxy served in-process on 127.0.0.1, with real TCP: tunnels, forwarding,
//! refusals and the status file, the answers to bad requests, and the connection cap.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ninetrix_agentfile::egress::EgressRule;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

use super::proxy::{Limits, serve_with};
use super::status::EgressStatus;

/// A proxy serving in this test's runtime.
struct Proxy {
    addr: SocketAddr,
    status_file: PathBuf,
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl Proxy {
    async fn start(rules: &[String], limits: Limits) -> Proxy {
        let rules = rules
            .iter()
            .map(|r| EgressRule::parse(r).unwrap())
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let status_file = dir.path().join("egress.json");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let file = Some(status_file.clone());
        let task = tokio::spawn(serve_with(listener, rules, file, None, limits, async {
            let _ = stopped.await;
        }));
        // The proxy writes its first status as it starts serving.
        let deadline = Instant::now() + Duration::from_secs(10);
        while !status_file.exists() {
            assert!(Instant::now() < deadline, "no status file at start");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Proxy {
            addr,
            status_file,
            stop,
            task,
            _dir: dir,
        }
    }

    fn status(&self) -> EgressStatus {
        EgressStatus::read(&self.status_file).unwrap()
    }

    /// Stops the proxy and returns its last status.
    async fn stop(self) -> EgressStatus {
        let _ = self.stop.send(());
        self.task.await.unwrap();
        EgressStatus::read(&self.status_file).unwrap()
    }

    /// Sends `bytes` as one client and returns everything the proxy answers until it closes
    /// (a reset ends the answer: the test then sees what arrived before it).
    async fn exchange(&self, bytes: &[u8]) -> String {
        let mut client = TcpStream::connect(self.addr).await.unwrap();
        let _ = client.write_all(bytes).await;
        let mut answer = Vec::new();
        let _ = client.read_to_end(&mut answer).await;
        String::from_utf8_lossy(&answer).into_owned()
    }
}

fn allow(addr: SocketAddr) -> String {
    format!("127.0.0.1:{}", addr.port())
}

/// A TCP server that echoes every connection.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// An HTTP server that answers one request with `body` and reports the head it received.
async fn http_server(body: &'static str) -> (SocketAddr, oneshot::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (seen, heads) = oneshot::channel();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let (head, _) = read_head(&mut stream).await;
        let _ = seen.send(head);
        let answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        );
        stream.write_all(answer.as_bytes()).await.unwrap();
        let _ = stream.shutdown().await;
    });
    (addr, heads)
}

/// Reads up to the end of an HTTP head; returns it and whatever came after.
async fn read_head(stream: &mut TcpStream) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return (String::from_utf8(buf).unwrap(), rest);
        }
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed before the end of the head: {buf:?}");
        buf.extend_from_slice(&chunk[..n]);
    }
}

fn http_client(proxy: &Proxy) -> reqwest::Client {
    let proxy = reqwest::Proxy::http(format!("http://{}", proxy.addr))
        .unwrap()
        .basic_auth("agent", "secret");
    ninetrix_client::http::builder()
        .proxy(proxy)
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_connect_to_an_allowed_destination_tunnels_bytes_both_ways() {
    let echo = echo_server().await;
    let proxy = Proxy::start(&[allow(echo)], Limits::default()).await;
    assert_eq!(proxy.status(), EgressStatus::default(), "written at start");
    let mut client = TcpStream::connect(proxy.addr).await.unwrap();
    let port = echo.port();
    // Bytes sent right after the head (a TLS hello sent optimistically) go through too.
    let connect =
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\nearly ");
    client.write_all(connect.as_bytes()).await.unwrap();
    let (head, mut echoed) = read_head(&mut client).await;
    assert_eq!(head, "HTTP/1.1 200 Connection established\r\n\r\n");
    client.write_all(b"ping").await.unwrap();
    let mut chunk = [0u8; 64];
    while echoed.len() < b"early ping".len() {
        let n = client.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the tunnel closed after {echoed:?}");
        echoed.extend_from_slice(&chunk[..n]);
    }
    assert_eq!(echoed, b"early ping");
    drop(client);
    let status = proxy.stop().await;
    assert_eq!((status.allowed, status.refused), (1, 0));
}

#[tokio::test]
async fn a_connect_to_a_destination_not_on_the_list_is_refused_and_counted() {
    let echo = echo_server().await;
    let elsewhere = echo_server().await;
    let proxy = Proxy::start(&[allow(echo)], Limits::default()).await;
    let port = elsewhere.port();
    let answer = proxy
        .exchange(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(
        answer.contains("\r\nContent-Type: text/plain\r\n"),
        "{answer}"
    );
    assert!(answer.contains("\r\nConnection: close\r\n"), "{answer}");
    assert!(
        answer.ends_with(&format!(
            "\r\n\r\nninetrix egress proxy: 127.0.0.1:{port} is not on this agent's allow-list \
             (network.egress)\n"
        )),
        "{answer}"
    );
    // The status is written before the answer is sent.
    let status = proxy.status();
    assert_eq!((status.refused, status.allowed), (1, 0));
    let [refusal] = status.last_refused.as_slice() else {
        panic!("{status:?}")
    };
    assert_eq!(
        (refusal.host.as_str(), refusal.port, refusal.from.as_str()),
        ("127.0.0.1", port, "127.0.0.1")
    );
    assert!(refusal.at_ms > 0);
    // The allowed port on another address is not allowed either.
    let answer = proxy
        .exchange(format!("CONNECT 127.0.0.2:{} HTTP/1.1\r\n\r\n", echo.port()).as_bytes())
        .await;
    assert!(answer.starts_with("HTTP/1.1 403 "), "{answer}");
    let status = proxy.stop().await;
    assert_eq!(status.refused, 2);
    assert_eq!(status.last_refused[1].host, "127.0.0.2");
}

#[tokio::test]
async fn plain_http_reaches_an_allowed_server_in_origin_form() {
    let (server, heads) = http_server("hello from upstream").await;
    let proxy = Proxy::start(&[allow(server)], Limits::default()).await;
    let port = server.port();
    let response = http_client(&proxy)
        .get(format!("http://127.0.0.1:{port}/v1/items?x=1"))
        .header("x-test", "kept")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await.unwrap(), "hello from upstream");
    let head = heads.await.unwrap();
    assert!(head.starts_with("GET /v1/items?x=1 HTTP/1.1\r\n"), "{head}");
    let lower = head.to_ascii_lowercase();
    assert!(
        lower.contains(&format!("\r\nhost: 127.0.0.1:{port}\r\n")),
        "{head}"
    );
    assert!(lower.contains("\r\nx-test: kept\r\n"), "{head}");
    assert!(lower.contains("\r\nconnection: close\r\n"), "{head}");
    assert!(
        !lower.contains("proxy-"),
        "proxy headers are dropped: {head}"
    );
    assert_eq!(proxy.stop().await.allowed, 1);
}

#[tokio::test]
async fn plain_http_to_a_server_not_on_the_list_gets_403() {
    let (server, _) = http_server("never").await;
    let proxy = Proxy::start(&["example.com".to_string()], Limits::default()).await;
    let response = http_client(&proxy)
        .get(format!("http://127.0.0.1:{}/", server.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    let body = response.text().await.unwrap();
    assert!(
        body.contains(&format!(
            "127.0.0.1:{} is not on this agent's allow-list",
            server.port()
        )),
        "{body}"
    );
    assert_eq!(proxy.stop().await.refused, 1);
}

#[tokio::test]
async fn a_name_rule_resolves_the_name_through_the_system_resolver() {
    let echo = echo_server().await;
    let port = echo.port();
    let proxy = Proxy::start(&[format!("localhost:{port}")], Limits::default()).await;
    let mut client = TcpStream::connect(proxy.addr).await.unwrap();
    let connect = format!("CONNECT LOCALHOST:{port} HTTP/1.1\r\n\r\n");
    client.write_all(connect.as_bytes()).await.unwrap();
    let (head, _) = read_head(&mut client).await;
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    client.write_all(b"by name").await.unwrap();
    let mut echoed = [0u8; 7];
    client.read_exact(&mut echoed).await.unwrap();
    assert_eq!(&echoed, b"by name");
}

#[tokio::test]
async fn an_allowed_destination_nobody_listens_on_gets_502() {
    let gone = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let proxy = Proxy::start(&[allow(gone)], Limits::default()).await;
    let answer = proxy
        .exchange(format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", gone.port()).as_bytes())
        .await;
    assert!(
        answer.starts_with("HTTP/1.1 502 Bad Gateway\r\n"),
        "{answer}"
    );
    assert!(
        answer.contains(&format!(
            "ninetrix egress proxy: cannot connect to 127.0.0.1:{}",
            gone.port()
        )),
        "{answer}"
    );
}

#[tokio::test]
async fn an_oversized_head_gets_400() {
    let proxy = Proxy::start(&[], Limits::default()).await;
    let mut request = b"GET http://127.0.0.1:1/ HTTP/1.1\r\nX-Big: ".to_vec();
    request.extend(std::iter::repeat_n(b'a', 20 * 1024));
    let answer = proxy.exchange(&request).await;
    assert!(
        answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{answer}"
    );
    assert!(
        answer.contains("the request head is over 16384 bytes"),
        "{answer}"
    );
}

#[tokio::test]
async fn requests_that_are_not_proxy_requests_get_400() {
    let proxy = Proxy::start(&[], Limits::default()).await;
    let answer = proxy
        .exchange(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        .await;
    assert!(
        answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
        "{answer}"
    );
    assert!(answer.contains("is not a proxy request"), "{answer}");
    let answer = proxy.exchange(b"\x16\x03\x01 hello\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    // A client that stops sending part way through its head.
    let mut client = TcpStream::connect(proxy.addr).await.unwrap();
    client
        .write_all(b"GET http://127.0.0.1:1/ HTTP/1.1\r\nHost")
        .await
        .unwrap();
    client.shutdown().await.unwrap();
    let mut answer = String::new();
    client.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains("the request head ended early"), "{answer}");
    let status = proxy.stop().await;
    assert_eq!((status.allowed, status.refused), (0, 0));
}

#[tokio::test]
async fn a_head_that_does_not_arrive_in_time_gets_408() {
    let limits = Limits {
        head_timeout: Duration::from_millis(100),
        ..Limits::default()
    };
    let proxy = Proxy::start(&[], limits).await;
    let mut client = TcpStream::connect(proxy.addr).await.unwrap();
    client
        .write_all(b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    client.read_to_string(&mut answer).await.unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"),
        "{answer}"
    );
}

#[tokio::test]
async fn clients_beyond_the_cap_are_closed_until_a_slot_frees() {
    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    let proxy = Proxy::start(&[], limits).await;
    let holder = TcpStream::connect(proxy.addr).await.unwrap();
    let mut over = TcpStream::connect(proxy.addr).await.unwrap();
    let _ = over.write_all(b"GET /x HTTP/1.1\r\n\r\n").await;
    let mut answer = Vec::new();
    let _ = over.read_to_end(&mut answer).await;
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    drop(holder);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = proxy.exchange(b"GET /x HTTP/1.1\r\n\r\n").await;
        if answer.starts_with("HTTP/1.1 400 ") {
            break;
        }
        assert!(Instant::now() < deadline, "the slot was never freed");
        tokio::task::yield_now().await;
    }
}
