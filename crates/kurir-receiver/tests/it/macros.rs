//! `both_backends!` runs one async test body once on each backend: SQLite, PostgreSQL and
//! MySQL/MariaDB, as `<test>::sqlite`, `<test>::postgres` and `<test>::mysql` (the shape of
//! ripgrep's `tests/macros.rs`).

/// Defines a module named after the test with one `#[tokio::test]` per backend; the body gets a
/// fresh, migrated [`crate::db::TestDb`] (with `empty`, an unmigrated one).
macro_rules! both_backends {
    (@with $sqlite:ident, $postgres:ident, $mysql:ident; $(#[$meta:meta])* async fn $name:ident($db:ident) $body:block) => {
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            async fn body($db: $crate::db::TestDb) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                body($crate::db::TestDb::$sqlite().await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn postgres() {
                if let Some(db) = $crate::db::TestDb::$postgres().await {
                    body(db).await;
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn mysql() {
                if let Some(db) = $crate::db::TestDb::$mysql().await {
                    body(db).await;
                }
            }
        }
    };
    ($(#[$meta:meta])* async fn $name:ident($db:ident) $body:block) => {
        both_backends!(@with sqlite, postgres, mysql; $(#[$meta])* async fn $name($db) $body);
    };
    // The database is created but not migrated.
    ($(#[$meta:meta])* empty async fn $name:ident($db:ident) $body:block) => {
        both_backends!(@with sqlite_empty, postgres_empty, mysql_empty; $(#[$meta])* async fn $name($db) $body);
    };
}
