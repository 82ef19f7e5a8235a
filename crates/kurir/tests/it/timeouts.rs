//! The connect and response timeouts are separate: connecting (here, to a listener whose
//! accept queue is full, so the kernel drops the first SYN and the client sends it again a
//! second later) counts against the connect timeout only, and the response timeout starts when
//! the request goes out.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use kurir::webhook_client::{PostError, Timeouts, WebhookClient};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

use crate::support::eventually;
use crate::support::receiver::Receiver;

fn client() -> WebhookClient {
    WebhookClient::new(kurir::config::parse_networks("127.0.0.0/8").unwrap(), 4)
}

async fn post(client: &WebhookClient, url: &str, timeouts: Timeouts) -> Result<u16, PostError> {
    let body = br#"{"hello":"world"}"#.to_vec();
    client
        .post(
            url,
            &[("content-type", "application/json".into())],
            body,
            timeouts,
        )
        .await
        .map(|r| r.status)
}

/// A listener on 127.0.0.1:0 that accepts nothing, with its accept queue full: a new
/// connection's SYN is dropped until room is made. Returns it with the connections filling it.
async fn full_listener() -> (TcpListener, SocketAddr, Vec<TcpStream>) {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut queued = Vec::new();
    // On loopback a connection with room completes at once; one that does not is dropped.
    while let Ok(Ok(stream)) =
        tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await
    {
        queued.push(stream);
    }
    (listener, addr, queued)
}

/// Whether a connection to `port` waits in `SYN_SENT`: its SYN was dropped.
fn syn_sent_to(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table.lines().skip(1).any(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let remote_port = fields
            .get(2)
            .and_then(|a| a.rsplit(':').next())
            .and_then(|p| u16::from_str_radix(p, 16).ok());
        remote_port == Some(port) && fields.get(3) == Some(&"02")
    })
}

/// Issue 11, item 6: reqwest's per-request timeout counted connecting too, so a receiver slow
/// to accept failed with a response timeout although it answered at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_slowly_does_not_use_up_the_response_timeout() {
    let (listener, addr, queued) = full_listener().await;
    let client = client();
    let timeouts = Timeouts {
        connect: Duration::from_secs(5),
        response: Duration::from_millis(500),
    };
    let url = format!("http://{addr}/hook");
    let started = Instant::now();
    let sending = tokio::spawn(async move { post(&client, &url, timeouts).await });
    eventually("the SYN to be dropped", || async {
        syn_sent_to(addr.port()).then_some(())
    })
    .await;
    // Room for one more: the SYN sent again (after a second) is taken. Then answer everything.
    drop(queued);
    let app = axum::Router::new().fallback(|| async { StatusCode::OK });
    tokio::spawn(async move { axum::serve(listener, app).await });
    let answered = sending.await.unwrap();
    let took = started.elapsed();
    assert_eq!(
        answered.unwrap(),
        200,
        "answered within the response timeout"
    );
    assert!(took > timeouts.response, "connecting took {took:?}");
}

/// Connecting is bounded by the connect timeout, whatever the response timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_never_accepts_fails_after_the_connect_timeout() {
    let (_listener, addr, _queued) = full_listener().await;
    let timeouts = Timeouts {
        connect: Duration::from_millis(300),
        response: Duration::from_secs(30),
    };
    let started = Instant::now();
    let failed = post(&client(), &format!("http://{addr}/hook"), timeouts).await;
    let took = started.elapsed();
    match failed {
        Err(PostError::Timeout(message)) => assert!(message.contains("connect"), "{message}"),
        other => panic!("expected a connect timeout, got {other:?}"),
    }
    assert!(took < Duration::from_secs(5), "gave up after {took:?}");
}

/// A receiver that accepts at once and never answers fails after the response timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_that_answers_late_fails_after_the_response_timeout() {
    let held = Receiver::holding().await;
    let timeouts = Timeouts {
        connect: Duration::from_secs(30),
        response: Duration::from_millis(300),
    };
    let started = Instant::now();
    let failed = post(&client(), &held.url("/held"), timeouts).await;
    let took = started.elapsed();
    match failed {
        Err(PostError::Timeout(message)) => assert!(message.contains("response"), "{message}"),
        other => panic!("expected a response timeout, got {other:?}"),
    }
    assert!(
        took >= timeouts.response && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert_eq!(held.requests().len(), 1, "the request itself went out");
    held.release(1);
}
