//! How a statement is written once per dialect and run on whichever the store is.
//!
//! A statement that differs only in its SQL text is a [`Sql`] constant (one field per dialect)
//! run with [`query_as_on!`] (or [`execute_on!`] for a write); the rows are the shared ones of
//! [`super::rows`], and the binds the same on every dialect ([`super::rows::Ts`] for
//! timestamps). A further dialect adds a field to [`Sql`] (the compiler then asks for its text in
//! every statement), an arm to [`query_as_on!`], [`execute_on!`] and `on_backend!`, and its
//! store type.

/// One statement's text in each dialect.
pub(crate) struct Sql {
    pub postgres: &'static str,
    pub sqlite: &'static str,
    /// Written with PostgreSQL's `$n` placeholders, which [`positional`] turns into MySQL's `?`
    /// (so a value used twice is bound once, as on the other dialects). Text columns are selected
    /// through `CAST(… AS CHAR)` (see [`super::rows`]).
    pub mysql: &'static str,
}

/// MySQL's `?` placeholders from a statement written with `$n` ones: its text, and for each `?`
/// the index of the bind it takes. A `$` not followed by a digit (a JSON path such as `'$[0]'`)
/// stays as it is.
pub(crate) fn positional(sql: &str) -> (String, Vec<usize>) {
    let mut text = String::with_capacity(sql.len());
    let mut order = Vec::new();
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        let mut digits = String::new();
        while c == '$' && chars.peek().is_some_and(char::is_ascii_digit) {
            digits.extend(chars.next());
        }
        match digits.parse::<usize>() {
            Ok(n) if n >= 1 => {
                text.push('?');
                order.push(n - 1);
            }
            _ => {
                text.push(c);
                text.push_str(&digits);
            }
        }
    }
    (text, order)
}

/// Adds one bind's value to a MySQL statement's arguments.
pub(crate) type MysqlBind<'a> =
    &'a dyn Fn(&mut sqlx::mysql::MySqlArguments) -> Result<(), sqlx::error::BoxDynError>;

/// The arguments of a MySQL statement from [`positional`]'s order: `binds[i]` adds bind `i`
/// (as many times as the statement uses it; each bind borrows its value, so a value used twice
/// is never moved).
pub(crate) fn mysql_arguments(
    order: &[usize],
    binds: &[MysqlBind<'_>],
) -> Result<sqlx::mysql::MySqlArguments, sqlx::Error> {
    let mut args = sqlx::mysql::MySqlArguments::default();
    for &i in order {
        let bind = binds
            .get(i)
            .ok_or_else(|| sqlx::Error::Protocol(format!("no bind ${}", i + 1)))?;
        bind(&mut args).map_err(sqlx::Error::Encode)?;
    }
    Ok(args)
}

/// `$sql`'s MySQL text with positional placeholders ([`positional`]) and its arguments, each
/// `$bind` (a reference) added where its number stands; `?` on a bind that does not encode.
macro_rules! mysql_args {
    ($sql:expr $(, $bind:expr)*) => {{
        let (text, order) = $crate::store::sql::positional($sql.mysql);
        let args = $crate::store::sql::mysql_arguments(&order, &[
            $(&|a: &mut sqlx::mysql::MySqlArguments| sqlx::Arguments::add(a, $bind)),*
        ])?;
        (text, args)
    }};
}

/// Runs `$sql` (a [`Sql`]) on `$store`'s pool with `$fetch` (`fetch_one`, `fetch_optional`,
/// `fetch_all`), binding each `$bind` in order, decoding rows with `sqlx::query_as`.
macro_rules! query_as_on {
    ($store:expr, $sql:expr, $fetch:ident $(, $bind:expr)* $(,)?) => {
        match $store {
            $crate::store::Store::Postgres(s) => {
                sqlx::query_as($sql.postgres)$(.bind($bind))*.$fetch(s.pool()).await
            }
            $crate::store::Store::Sqlite(s) => {
                sqlx::query_as($sql.sqlite)$(.bind($bind))*.$fetch(s.pool()).await
            }
            $crate::store::Store::Mysql(s) => {
                async {
                    let (text, args) = $crate::store::sql::mysql_args!($sql $(, &$bind)*);
                    sqlx::query_as_with(&text, args).$fetch(s.pool()).await
                }
                .await
            }
        }
    };
}
pub(crate) use query_as_on;

/// Runs `$sql` (a [`Sql`]) on `$store`'s pool as a write, binding each `$bind` in order; the
/// number of rows it touched.
macro_rules! execute_on {
    ($store:expr, $sql:expr $(, $bind:expr)* $(,)?) => {
        match $store {
            $crate::store::Store::Postgres(s) => {
                sqlx::query($sql.postgres)$(.bind($bind))*.execute(s.pool()).await
                    .map(|done| done.rows_affected())
            }
            $crate::store::Store::Sqlite(s) => {
                sqlx::query($sql.sqlite)$(.bind($bind))*.execute(s.pool()).await
                    .map(|done| done.rows_affected())
            }
            $crate::store::Store::Mysql(s) => {
                async {
                    let (text, args) = $crate::store::sql::mysql_args!($sql $(, &$bind)*);
                    sqlx::query_with(&text, args).execute(s.pool()).await
                        .map(|done| done.rows_affected())
                }
                .await
            }
        }
    };
}
pub(crate) use execute_on;

/// Runs `$sql`'s text for `$dialect` on transaction `$tx` with `$make` (`query`,
/// `query_scalar` or `query_as`) and `$run`, binding each `$bind` in order. MySQL's text has its `$n`
/// placeholders made positional ([`positional`]), so each bind is used where its
/// number stands, as on the other dialects.
macro_rules! run_in {
    ($tx:expr, mysql, $sql:expr, $make:ident, $run:ident $(, $bind:expr)*) => {{
        let (text, args) = $crate::store::sql::mysql_args!($sql $(, $bind)*);
        ($crate::store::sql::with_arguments!($make))(&text, args).$run(&mut *$tx).await
    }};
    ($tx:expr, $dialect:ident, $sql:expr, $make:ident, $run:ident $(, $bind:expr)*) => {
        sqlx::$make($sql.$dialect)$(.bind($bind))*.$run(&mut *$tx).await
    };
}

/// The `_with` form of a query constructor: the one taking its arguments built.
macro_rules! with_arguments {
    (query) => {
        sqlx::query_with
    };
    (query_scalar) => {
        sqlx::query_scalar_with
    };
    (query_as) => {
        sqlx::query_as_with
    };
}
pub(crate) use {mysql_args, run_in, with_arguments};

#[cfg(test)]
mod tests {
    use super::positional;

    #[test]
    fn mysql_placeholders_repeat_a_bind_used_twice_and_leave_json_paths_alone() {
        let (text, order) = positional(
            "SELECT x FROM JSON_TABLE($3, '$[*]' COLUMNS (x INT PATH '$[0]')) AS t \
             WHERE ($1 IS NULL OR a = $1) AND b < $2 AND c = $10",
        );
        assert_eq!(
            text,
            "SELECT x FROM JSON_TABLE(?, '$[*]' COLUMNS (x INT PATH '$[0]')) AS t \
             WHERE (? IS NULL OR a = ?) AND b < ? AND c = ?"
        );
        assert_eq!(order, [2, 0, 0, 1, 9]);
    }
}
