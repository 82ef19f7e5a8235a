//! `kurir tokens create|list|revoke`: named operator tokens through `/v1/tokens` (an admin's
//! commands), and `kurir whoami`: which token the CLI is using, and its role.

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{json, Map, Value};

use super::client::{insert_given, Client, ClientArgs};
use super::output::{self, out};

/// `kurir tokens …`
#[derive(Debug, Args)]
pub struct TokensArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: TokensCommand,
    /// Where the admin API is.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Token commands.
#[derive(Debug, Subcommand)]
pub enum TokensCommand {
    /// Create a named token; prints it once (kurir keeps only its hash).
    Create(CreateArgs),
    /// List the tokens, newest first, revoked and expired ones too (never their secrets).
    List(ListArgs),
    /// Revoke a token: every kurir process sharing the database refuses it from now on.
    Revoke {
        /// Token id (`tok_…`, from `kurir tokens list`).
        id: String,
    },
}

/// Arguments of `tokens create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Who or what holds it (`alice`, `deploy-bot`); the audit records it.
    #[arg(long)]
    pub name: String,
    /// `admin` (everything), `operator` (everything but tokens) or `viewer` (reads only).
    #[arg(long)]
    pub role: String,
    /// When it stops working: RFC 3339, or a duration from now such as 90d.
    #[arg(long, value_parser = parse_expiry)]
    pub expires: Option<String>,
}

/// Arguments of `tokens list`.
#[derive(Debug, Args)]
pub struct ListArgs {
    /// Rows per page (1 to 200).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Continue from a previous page.
    #[arg(long)]
    pub cursor: Option<String>,
}

/// Parses `--expires`: an RFC 3339 time, or a duration from now such as `12h` or `90d`.
fn parse_expiry(s: &str) -> Result<String, String> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Ok(t.with_timezone(&chrono::Utc).to_rfc3339());
    }
    let ahead = humantime::parse_duration(s).map_err(|_| {
        format!("'{s}' is neither an RFC 3339 time nor a duration such as 12h or 90d")
    })?;
    let ahead = chrono::Duration::from_std(ahead).map_err(|e| e.to_string())?;
    Ok((chrono::Utc::now() + ahead).to_rfc3339())
}

/// Runs a token command.
pub async fn run(args: TokensArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client)?;
    let as_json = args.client.json;
    match args.command {
        TokensCommand::Create(c) => {
            let mut body = Map::new();
            body.insert("name".into(), json!(c.name));
            body.insert("role".into(), json!(c.role));
            insert_given(&mut body, "expires_at", c.expires.map(Value::from));
            let (_, created) = client
                .call(Method::POST, "/v1/tokens", &Value::Object(body))
                .await?;
            output::shown(&created, as_json, show_created);
        }
        TokensCommand::List(l) => {
            let query = [
                ("limit", l.limit.map(|n| n.to_string())),
                ("cursor", l.cursor),
            ];
            let page = client.get_query("/v1/tokens", &query).await?;
            output::shown(&page, as_json, list_table);
        }
        TokensCommand::Revoke { id } => {
            let path = format!("/v1/tokens/{id}");
            client.call(Method::DELETE, &path, &Value::Null).await?;
            if as_json {
                output::json(&json!({ "revoked": id }));
            } else {
                out!("revoked token {id}: it no longer works anywhere");
            }
        }
    }
    Ok(())
}

fn show_created(t: &Value) {
    output::fields(t, &["id", "name", "role", "expires_at"]);
    out!("token: {}", output::cell(&t["token"]));
    out!("(kurir shows the token only now: hand it to its holder, who sets KURIR_TOKEN)");
}

fn list_table(page: &Value) {
    output::objects(
        &page["data"],
        &[
            ("ID", "id"),
            ("NAME", "name"),
            ("ROLE", "role"),
            ("STATUS", "status"),
            ("CREATED", "created_at"),
            ("BY", "created_by"),
            ("EXPIRES", "expires_at"),
            ("REVOKED", "revoked_at"),
        ],
    );
    output::next_page(page);
}

/// `kurir whoami`
#[derive(Debug, Args)]
pub struct WhoAmIArgs {
    /// Where the admin API is.
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `kurir whoami`: the name and role of the token the CLI sends.
pub async fn whoami(args: WhoAmIArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.client)?;
    let me = client.get("/v1/whoami").await?;
    output::shown(&me, args.client.json, |me| {
        output::fields(me, &["name", "role", "token_id"]);
    });
    Ok(())
}
