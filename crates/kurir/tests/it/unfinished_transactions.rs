//! A pooled connection whose transaction a failed statement ended (issue 32, a full disk on
//! SQLite) goes back to work rolled back, never still counted inside its old transaction.

use kurir::store::Store;
use sqlx::{Connection, Executor};

use crate::on_both_backends;
use crate::support::TestDb;

on_both_backends!(a_connection_whose_transaction_failed_is_handed_out_again_rolled_back);

/// Inside a transaction on the pooled connection `$conn`: a row into `filler`, then a statement
/// that fails, then the transaction dropped as a `?` drops it, and the connection given back.
macro_rules! fail_a_transaction {
    ($conn:expr, $begin:expr, $failing:expr) => {{
        let mut conn = $conn;
        let mut tx = conn.begin_with($begin).await.unwrap();
        tx.execute("INSERT INTO filler VALUES ('0')").await.unwrap();
        tx.execute($failing).await.expect_err("the statement fails");
    }};
}

/// Every connection the pool can hold, held at once so each is a different one: each starts
/// and commits a transaction, and none sees the failed transaction's row.
macro_rules! every_connection_begins {
    ($pool:expr, $begin:expr) => {{
        let pool = $pool;
        let mut held = Vec::new();
        for _ in 0..pool.options().get_max_connections() {
            held.push(pool.acquire().await.unwrap());
        }
        for (n, conn) in held.iter_mut().enumerate() {
            let mut tx = conn
                .begin_with($begin)
                .await
                .unwrap_or_else(|e| panic!("connection {n} of the pool cannot begin: {e}"));
            let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM filler")
                .fetch_one(&mut *tx)
                .await
                .unwrap();
            assert_eq!(
                rows, 0,
                "connection {n}: the failed transaction was rolled back"
            );
            tx.commit().await.unwrap();
        }
    }};
}

async fn a_connection_whose_transaction_failed_is_handed_out_again_rolled_back(db: TestDb) {
    match &db.store {
        Store::Sqlite(s) => {
            let pool = s.pool();
            pool.execute("CREATE TABLE filler (b BLOB)").await.unwrap();
            // The disk as good as full: `max_page_count` (this connection's only) lets the
            // file grow no further, so a row larger than a page fails with SQLITE_FULL, and
            // SQLite rolls back the whole transaction, not only the statement.
            let mut conn = pool.acquire().await.unwrap();
            let pages: i64 = sqlx::query_scalar("PRAGMA page_count")
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            conn.execute(&*format!("PRAGMA max_page_count = {pages}"))
                .await
                .unwrap();
            fail_a_transaction!(
                conn,
                "BEGIN IMMEDIATE",
                "INSERT INTO filler VALUES (zeroblob(100000))"
            );
            every_connection_begins!(pool, "BEGIN IMMEDIATE");
        }
        // On the servers a failed statement leaves the transaction open (PostgreSQL: aborted,
        // refusing all but ROLLBACK); the connection must come back with it rolled back.
        Store::Postgres(s) => {
            let pool = s.pool();
            pool.execute("CREATE TABLE filler (b TEXT)").await.unwrap();
            fail_a_transaction!(
                pool.acquire().await.unwrap(),
                "BEGIN",
                "INSERT INTO no_such_table VALUES (1)"
            );
            every_connection_begins!(pool, "BEGIN");
        }
        Store::Mysql(s) => {
            let pool = s.pool();
            pool.execute("CREATE TABLE filler (b TEXT)").await.unwrap();
            fail_a_transaction!(
                pool.acquire().await.unwrap(),
                "BEGIN",
                "INSERT INTO no_such_table VALUES (1)"
            );
            every_connection_begins!(pool, "BEGIN");
        }
    }
}
