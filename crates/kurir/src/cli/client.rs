//! The admin API client behind the operator commands: where the API is, which token to send,
//! and turning API errors into one readable line. Every request says it comes from the CLI
//! ([`crate::access::CLIENT_HEADER`]), so the audit records `cli` as where an action came from.

use crate::redact::Sensitive;
use std::path::PathBuf;

use anyhow::{anyhow, Context};
use clap::Args;
use reqwest::{Method, StatusCode};
use serde_json::Value;

/// How to reach the admin API; shared by every operator command.
#[derive(Clone, Debug, Args)]
pub struct ClientArgs {
    /// Base URL of kurir's HTTP server.
    #[arg(
        long,
        env = "KURIR_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub url: String,
    /// Data directory of a local `kurir serve`, whose generated admin-token file is used when
    /// neither KURIR_TOKEN nor KURIR_ADMIN_TOKEN is set.
    #[arg(
        long,
        env = "KURIR_DATA_DIR",
        default_value = "./kurir-data",
        global = true
    )]
    pub data_dir: PathBuf,
    /// Print the API's JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
}

/// A connection to the admin API.
#[derive(Debug)]
pub struct Client {
    base: reqwest::Url,
    token: Sensitive,
    http: reqwest::Client,
}

impl Client {
    /// A client for `args`; the token comes from `KURIR_TOKEN` (a named token), else
    /// `KURIR_ADMIN_TOKEN`, else the data directory's generated admin token.
    pub fn new(args: &ClientArgs) -> anyhow::Result<Self> {
        let base = reqwest::Url::parse(&args.url)
            .with_context(|| format!("--url / KURIR_URL: '{}' is not a URL", args.url))?;
        let set = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|t| t.trim().to_owned())
                .filter(|t| !t.is_empty())
        };
        let token = match set("KURIR_TOKEN").or_else(|| set("KURIR_ADMIN_TOKEN")) {
            Some(token) => token,
            None => crate::admin_token::read_file(&args.data_dir)?.ok_or_else(|| {
                anyhow!(
                    "no token: set KURIR_TOKEN (a named token) or KURIR_ADMIN_TOKEN, or run where \
                     `kurir serve` generated {} (or point --data-dir / KURIR_DATA_DIR at its data \
                     directory)",
                    args.data_dir.join(crate::admin_token::TOKEN_FILE).display()
                )
            })?,
        };
        let http = reqwest::Client::builder()
            .user_agent(format!("kurir-cli/{}", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self {
            base,
            token: token.into(),
            http,
        })
    }

    /// The URL of `path` (which may carry a query string) under the base URL.
    pub fn url(&self, path: &str) -> anyhow::Result<reqwest::Url> {
        let base = self.base.as_str().trim_end_matches('/');
        reqwest::Url::parse(&format!("{base}{path}")).with_context(|| format!("bad path {path}"))
    }

    /// The URL of the path made of `segments`, each percent-encoded: for ids chosen by the
    /// sender (a subscriber's may hold `/`, `?`, `#` or `%`).
    /// `.` and `..` are refused: a URL cannot carry them as a segment (they mean "here" and "up"
    /// in a path, percent-encoded too).
    pub fn url_of(&self, segments: &[&str]) -> anyhow::Result<reqwest::Url> {
        if let Some(dots) = segments.iter().find(|s| matches!(**s, "." | "..")) {
            anyhow::bail!(
                "the id '{dots}' cannot be used in a URL path; the API cannot address it"
            );
        }
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| anyhow!("--url / KURIR_URL: '{}' cannot have a path", self.base))?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    /// Sends a request; returns the status and the JSON body (`Null` when empty). An error
    /// answer becomes an error whose message is the API's.
    pub async fn send(
        &self,
        method: Method,
        url: reqwest::Url,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<(StatusCode, Value)> {
        let body = body.map(Value::to_string);
        let (status, text) = self.send_text(method, url, body, headers).await?;
        Ok((status, parsed(&text)))
    }

    /// [`Client::send`] with the body as the bytes to send, answering the body as it came:
    /// for payloads, whose keys and numbers a trip through [`Value`] would rewrite.
    pub async fn send_text(
        &self,
        method: Method,
        url: reqwest::Url,
        body: Option<String>,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<(StatusCode, String)> {
        let mut req = self
            .http
            .request(method, url)
            .bearer_auth(self.token.expose())
            .header(crate::access::CLIENT_HEADER, crate::access::CLI_CLIENT)
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        if let Some(body) = body {
            req = req.body(body);
        }
        let resp = req.send().await.with_context(|| {
            format!(
                "cannot reach kurir at {} (set by --url or KURIR_URL); is `kurir serve` running?",
                self.base
            )
        })?;
        let status = resp.status();
        let text = String::from_utf8_lossy(&resp.bytes().await?).into_owned();
        if status.is_client_error() || status.is_server_error() {
            let value = parsed(&text);
            let message = value["error"]["message"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| value.to_string());
            let code = value["error"]["code"].as_str().unwrap_or("error");
            return Err(Refusal {
                status,
                text: format!("{message} ({code}, HTTP {})", status.as_u16()),
            }
            .into());
        }
        Ok((status, text))
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        Ok(self.send(Method::GET, self.url(path)?, None, &[]).await?.1)
    }

    /// `GET path`, its answer as it came (see [`Client::send_text`]).
    pub async fn get_text(&self, path: &str) -> anyhow::Result<String> {
        let url = self.url(path)?;
        Ok(self.send_text(Method::GET, url, None, &[]).await?.1)
    }

    /// `GET path?query` with the given (non-empty) parameters.
    pub async fn get_query(
        &self,
        path: &str,
        query: &[(&str, Option<String>)],
    ) -> anyhow::Result<Value> {
        let url = self.query_url(path, query)?;
        Ok(self.send(Method::GET, url, None, &[]).await?.1)
    }

    /// [`Client::get_query`], its answer as it came (see [`Client::send_text`]).
    pub async fn get_query_text(
        &self,
        path: &str,
        query: &[(&str, Option<String>)],
    ) -> anyhow::Result<String> {
        let url = self.query_url(path, query)?;
        Ok(self.send_text(Method::GET, url, None, &[]).await?.1)
    }

    fn query_url(
        &self,
        path: &str,
        query: &[(&str, Option<String>)],
    ) -> anyhow::Result<reqwest::Url> {
        Ok(with_query(self.url(path)?, query))
    }

    /// Fails with `no subscriber ID` when kurir has no subscriber of that id (a deleted one it
    /// has: its history is still listed). A listing filtered by a subscriber that does not exist
    /// is empty, like one whose subscriber has nothing yet; this tells a typo from the second.
    /// A token that may not read subscribers (a subscriber token, whose listings are confined to
    /// its own anyway) is not told: its empty list stands.
    pub async fn require_subscriber(&self, id: &str) -> anyhow::Result<()> {
        let url = self.url_of(&["v1", "subscribers", id])?;
        match self.send(Method::GET, url, None, &[]).await {
            Ok(_) => Ok(()),
            Err(e) => match e.downcast_ref::<Refusal>().map(|r| r.status) {
                Some(StatusCode::NOT_FOUND) => Err(anyhow!(
                    "no subscriber {id} (`kurir subscribers list` lists them)"
                )),
                Some(StatusCode::FORBIDDEN) => Ok(()),
                _ => Err(e),
            },
        }
    }

    /// After a listing filtered by `subscriber`: a `page` empty because no such subscriber exists
    /// is an error ([`Client::require_subscriber`]); an empty page of one that does, an answer.
    pub async fn check_filtered(
        &self,
        subscriber: Option<&str>,
        page: &Value,
    ) -> anyhow::Result<()> {
        match subscriber {
            Some(id) if page["data"].as_array().is_some_and(Vec::is_empty) => {
                self.require_subscriber(id).await
            }
            _ => Ok(()),
        }
    }

    /// `GET url` with the given (non-empty) parameters added to its query.
    pub async fn get_url_query(
        &self,
        url: reqwest::Url,
        query: &[(&str, Option<String>)],
    ) -> anyhow::Result<Value> {
        let url = with_query(url, query);
        Ok(self.send(Method::GET, url, None, &[]).await?.1)
    }

    /// `method path` with a JSON body.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: &Value,
    ) -> anyhow::Result<(StatusCode, Value)> {
        self.send(method, self.url(path)?, Some(body), &[]).await
    }
}

/// An error answer of the API: its status, and its message as one line.
#[derive(Debug)]
pub struct Refusal {
    /// The answer's status (4xx or 5xx).
    pub status: StatusCode,
    text: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::error::Error for Refusal {}

/// `url` with the given (non-empty) parameters appended to its query.
fn with_query(mut url: reqwest::Url, query: &[(&str, Option<String>)]) -> reqwest::Url {
    for (name, value) in query {
        if let Some(value) = value {
            url.query_pairs_mut().append_pair(name, value);
        }
    }
    url
}

/// An answer's body as JSON: `Null` when empty, a string when it is not JSON.
fn parsed(text: &str) -> Value {
    if text.is_empty() {
        return Value::Null;
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// Sets `key` in a request body when the option was given.
pub fn insert_given(body: &mut serde_json::Map<String, Value>, key: &str, value: Option<Value>) {
    if let Some(value) = value {
        body.insert(key.to_owned(), value);
    }
}

/// The time window and the page of a listing: `--since`, `--until`, `--limit`, `--cursor`.
#[derive(Debug, Args)]
pub struct Window {
    /// From this time on: RFC 3339, or a duration ago such as 2h.
    #[arg(long, value_parser = parse_time)]
    pub since: Option<String>,
    /// Before this time: RFC 3339, or a duration ago.
    #[arg(long, value_parser = parse_time)]
    pub until: Option<String>,
    /// Rows per page (1 to 200).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Continue from a previous page.
    #[arg(long)]
    pub cursor: Option<String>,
}

impl Window {
    /// The query of a listing: `filters`, then the window and the page.
    pub fn query<const N: usize>(
        self,
        filters: [(&'static str, Option<String>); N],
    ) -> Vec<(&'static str, Option<String>)> {
        let mut query = filters.to_vec();
        query.extend([
            ("since", self.since),
            ("until", self.until),
            ("limit", self.limit.map(|n| n.to_string())),
            ("cursor", self.cursor),
        ]);
        query
    }
}

/// Parses `--since`/`--until`: an RFC 3339 time, or a duration ago such as `90m` or `2d`.
pub fn parse_time(s: &str) -> Result<String, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&chrono::Utc).to_rfc3339());
    }
    let ago = humantime::parse_duration(s).map_err(|_| {
        format!("'{s}' is neither an RFC 3339 time nor a duration such as 90m or 2d")
    })?;
    let ago = chrono::Duration::from_std(ago).map_err(|e| e.to_string())?;
    Ok((chrono::Utc::now() - ago).to_rfc3339())
}

/// How to show a delivery's endpoint beside its id: its URL, which every delivery view carries
/// (joined by the API), marked when the endpoint was deleted. Read from the delivery itself:
/// the endpoint listing is paged, and one request per endpoint would not scale with the fan-out.
pub fn endpoint_name(delivery: &Value) -> Option<String> {
    let url = delivery["endpoint_url"].as_str()?;
    Some(match delivery["endpoint_deleted_at"].as_str() {
        Some(at) => format!("{url} (deleted {at})"),
        None => url.to_owned(),
    })
}
