//! The one placeholder rule: MySQL's text is written with PostgreSQL's numbered `$n`
//! placeholders, and [`positional`] turns each into MySQL's `?`, with the number of the bind it
//! takes. The binds are then given once each, in number order, on every dialect; a value used
//! twice in a statement (`$1 IS NULL OR a = $1`) is bound twice on MySQL by the runner, not by the
//! caller.
//!
//! Only placeholders outside quotes are rewritten: a `$` inside a string literal (`'$1'`, a JSON
//! path such as `'$[0]'`), a quoted identifier (`` `a$1` ``, `"a$1"`) or not followed by a digit
//! stays as written.

/// MySQL's `?` placeholders from a statement written with `$n` ones: its text, and for each `?`
/// the index (from 0) of the bind it takes.
///
/// Quotes are MySQL's: `'…'` and `"…"` are strings (a doubled quote or a backslash escapes the
/// next character), `` `…` `` an identifier. `$0` is not a placeholder and stays as written.
pub fn positional(sql: &str) -> (String, Vec<usize>) {
    let mut text = String::with_capacity(sql.len());
    let mut order = Vec::new();
    let mut chars = sql.chars().peekable();
    // The quote we are inside of, if any.
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        if let Some(q) = quote {
            text.push(c);
            if c == '\\' && q != '`' {
                text.extend(chars.next());
            } else if c == q {
                // A doubled quote is one quote character inside the literal.
                if chars.peek() == Some(&q) {
                    text.extend(chars.next());
                } else {
                    quote = None;
                }
            }
            continue;
        }
        if matches!(c, '\'' | '"' | '`') {
            quote = Some(c);
            text.push(c);
            continue;
        }
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
#[cfg(feature = "mysql")]
pub type MysqlBind<'a> =
    &'a dyn Fn(&mut sqlx::mysql::MySqlArguments) -> Result<(), sqlx::error::BoxDynError>;

/// The arguments of a MySQL statement from [`positional`]'s order: `binds[i]` adds bind `i`, as
/// many times as the statement uses it (each bind borrows its value, so a value used twice is
/// never moved). A number with no bind is an error naming it.
#[cfg(feature = "mysql")]
pub fn arguments(
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

/// `column IN (?, …)` with one placeholder per value, for [`bind_all`] to fill: the server reads
/// those rows by key, so a locking statement locks them and no others. `n` must not be 0.
pub fn in_list(column: &str, n: usize) -> String {
    format!("{column} IN ({})", vec!["?"; n].join(", "))
}

/// Binds each of `values` in order (the placeholders of [`in_list`]).
#[cfg(feature = "mysql")]
pub fn bind_all<'q, T>(
    mut q: sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>,
    values: &'q [T],
) -> sqlx::query::Query<'q, sqlx::MySql, sqlx::mysql::MySqlArguments>
where
    T: sqlx::Encode<'q, sqlx::MySql> + sqlx::Type<sqlx::MySql> + Sync,
{
    for v in values {
        q = q.bind(v);
    }
    q
}

#[cfg(test)]
mod tests {
    use super::positional;

    #[test]
    fn a_bind_used_twice_is_taken_twice_and_ten_is_not_one() {
        let (text, order) =
            positional("WHERE ($1 IS NULL OR a = $1) AND b < $2 AND c = $10 AND d = $11");
        assert_eq!(
            text,
            "WHERE (? IS NULL OR a = ?) AND b < ? AND c = ? AND d = ?"
        );
        assert_eq!(order, [0, 0, 1, 9, 10]);
    }

    #[test]
    fn quoted_dollars_stay_as_written() {
        let (text, order) = positional(
            "SELECT x FROM JSON_TABLE($3, '$[*]' COLUMNS (x INT PATH '$[0]')) AS t \
             WHERE a = '$1' AND b = \"$2\" AND `c$1` = $1 AND d = 'it''s $1' \
             AND e = 'back\\'slash $1' AND f = $2",
        );
        assert_eq!(
            text,
            "SELECT x FROM JSON_TABLE(?, '$[*]' COLUMNS (x INT PATH '$[0]')) AS t \
             WHERE a = '$1' AND b = \"$2\" AND `c$1` = ? AND d = 'it''s $1' \
             AND e = 'back\\'slash $1' AND f = ?"
        );
        assert_eq!(order, [2, 0, 1]);
    }

    #[test]
    fn a_dollar_without_a_number_and_dollar_zero_are_text() {
        let (text, order) = positional("SELECT '$' AS a, $ AS b, $0 AS c, $x, $1$2");
        assert_eq!(text, "SELECT '$' AS a, $ AS b, $0 AS c, $x, ??");
        assert_eq!(order, [0, 1]);
    }

    #[test]
    fn question_marks_written_by_hand_pass_through_unbound() {
        // Not the rule: such a statement would be short of binds, which `arguments` does not
        // see; this pins that the rewrite leaves them alone rather than renumbering them.
        let (text, order) = positional("a = ? AND b = $1");
        assert_eq!(text, "a = ? AND b = ?");
        assert_eq!(order, [0]);
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn a_number_with_no_bind_is_named() {
        let (_, order) = positional("a = $1 AND b = $3");
        let one: super::MysqlBind<'_> =
            &|a: &mut sqlx::mysql::MySqlArguments| sqlx::Arguments::add(a, 1_i64);
        let err = super::arguments(&order, &[one]).unwrap_err();
        assert!(err.to_string().contains("no bind $3"), "{err}");
    }
}
