//! The README's PHP snippets, run as written with `php` (Debian's `php-cli` and `php-mysql`)
//! against a MariaDB test database: each writes an order's change and its event in one
//! transaction, and kurir delivers each event with the payload PHP encoded, byte for byte.
//!
//! The snippets are read from the README at test time, so the two cannot drift apart. Laravel is
//! not installed: a stand-in `DB` class does what Laravel's facade does on a PDO connection
//! (`beginTransaction`, the closure, `commit`, or `rollBack` and rethrow; one prepared statement
//! per `DB::insert`).

use std::process::Command;

use kurir::endpoint::NewEndpoint;
use kurir::store::Store;

use crate::support::receiver::Receiver;
use crate::support::{test_delivery_config, TestDb, TestServer};

/// The README's ```php block that follows the line starting with `heading`.
fn readme_php(heading: &str) -> String {
    let readme = include_str!("../../../../README.md");
    let after = readme
        .split_once(&format!("\n{heading}"))
        .unwrap_or_else(|| panic!("the README has a section {heading}"))
        .1;
    let block = after
        .split_once("```php\n")
        .and_then(|(_, rest)| rest.split_once("\n```"))
        .unwrap_or_else(|| panic!("a ```php block follows {heading}"))
        .0;
    block.to_owned()
}

/// What the snippets run with: the connection, Laravel's `DB` stand-in and an order model.
const PRELUDE: &str = r#"<?php
$pdo = new PDO(getenv('KURIR_PHP_DSN'), getenv('KURIR_PHP_USER'), getenv('KURIR_PHP_PASSWORD'),
    [PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION]);

final class DB {
    public static PDO $pdo;

    public static function transaction(callable $work) {
        self::$pdo->beginTransaction();
        try {
            $result = $work();
            self::$pdo->commit();
            return $result;
        } catch (Throwable $e) {
            self::$pdo->rollBack();
            throw $e;
        }
    }

    public static function insert(string $query, array $bindings = []): bool {
        return self::$pdo->prepare($query)->execute($bindings);
    }
}
DB::$pdo = $pdo;

final class Order {
    public function __construct(public int $id, public int $total) {}

    public function update(array $values): bool {
        return DB::$pdo->prepare('UPDATE orders SET status = ? WHERE id = ?')
            ->execute([$values['status'], $this->id]);
    }
}
"#;

/// `php`, from `KURIR_PHP` or the PATH; `None` (after a notice) when missing outside CI.
fn php() -> Option<String> {
    let php = std::env::var("KURIR_PHP").unwrap_or_else(|_| "php".into());
    let modules = Command::new(&php).arg("-m").output();
    match modules {
        Ok(out)
            if String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|m| m == "pdo_mysql") =>
        {
            Some(php)
        }
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI is set but `{php}` with pdo_mysql is missing (apt-get install php-cli php-mysql)")
        }
        _ => {
            eprintln!("notice: no `{php}` with pdo_mysql; skipping the README's PHP snippets");
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_php_snippets_write_events_kurir_delivers_on_mariadb() {
    let Some(db) = TestDb::mysql().await else {
        return;
    };
    let Some(php) = php() else { return };
    let Store::Mysql(my) = &db.store else {
        unreachable!()
    };
    for sql in [
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, status VARCHAR(16) NOT NULL, total BIGINT)",
        "INSERT INTO orders VALUES (98765, 'new', 250000), (98766, 'new', 120000)",
    ] {
        sqlx::query(sql).execute(my.pool()).await.unwrap();
    }
    let receiver = Receiver::ok().await;
    db.store
        .create_endpoint(NewEndpoint::new(receiver.url("/hook")))
        .await
        .unwrap();

    let script = format!(
        "{PRELUDE}\n$order = new Order(98765, 250000);\n{laravel}\n\n\
         $orderId = 98766;\n$total = 120000;\n{pdo}\n",
        laravel = readme_php("**PHP: Laravel"),
        pdo = readme_php("**PHP: PDO"),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("snippets.php");
    std::fs::write(&path, script).unwrap();
    let url = url::Url::parse(&db.url).unwrap();
    let dsn = format!(
        "mysql:host={};port={};dbname={};charset=utf8mb4",
        url.host_str().unwrap(),
        url.port().unwrap_or(3306),
        url.path().trim_start_matches('/'),
    );
    let out = Command::new(&php)
        .arg(&path)
        .env("KURIR_PHP_DSN", dsn)
        .env("KURIR_PHP_USER", url.username())
        .env("KURIR_PHP_PASSWORD", url.password().unwrap_or(""))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "php: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    let paid: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders WHERE status = 'paid'")
        .fetch_one(my.pool())
        .await
        .unwrap();
    assert_eq!(paid, 2, "each order changed in its event's transaction");
    let server = TestServer::start(&db, test_delivery_config()).await;
    receiver.wait_for(2).await;
    let bodies: Vec<String> = receiver
        .requests()
        .iter()
        .map(|r| String::from_utf8(r.body.to_vec()).unwrap())
        .collect();
    for body in &bodies {
        assert!(body.contains(r#""event_type":"order.paid""#), "{body}");
    }
    for payload in [
        r#""data":{"order_id":"98765","total":250000}"#,
        r#""data":{"order_id":"98766","total":120000}"#,
    ] {
        let with = bodies.iter().filter(|b| b.contains(payload)).count();
        assert_eq!(
            with, 1,
            "one delivery carries {payload} as PHP wrote it: {bodies:?}"
        );
    }
    server.stop().await;
}
