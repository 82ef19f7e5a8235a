//! A tiny HTTP/1.1 client over hyper: one connection per request, which is what a webhook sender
//! does anyway.

use std::net::SocketAddr;

use bytes::Bytes;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::TcpStream;

/// A response, its body parsed as JSON (`Null` if it is not).
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub json: Value,
    pub text: String,
}

impl Reply {
    /// The `status` field of a receipt answer.
    pub fn receipt(&self) -> &str {
        self.json["status"].as_str().unwrap_or("")
    }

    /// The `error.code` field of an error answer.
    pub fn error_code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }
}

/// `POST path` with `headers` and `body`.
pub async fn post(
    addr: SocketAddr,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Reply {
    let mut request = Request::builder().method(Method::POST).uri(path);
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    send(addr, request, Bytes::copy_from_slice(body)).await
}

/// `GET path`.
pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    send(addr, Request::builder().uri(path), Bytes::new()).await
}

async fn send(addr: SocketAddr, request: http::request::Builder, body: Bytes) -> Reply {
    let request = request
        .header("host", addr.to_string())
        .body(Full::new(body))
        .unwrap();
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let json = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Reply { status, json, text }
}
