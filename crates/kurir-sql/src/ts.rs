//! [`Ts`]: one timestamp type that every dialect binds and reads, however it keeps time.

use chrono::{DateTime, SecondsFormat, Utc};
#[allow(unused_imports)] // which are used depends on the dialects built
use sqlx::{encode::IsNull, error::BoxDynError, Decode, Encode, Type};

/// A stored timestamp: PostgreSQL's `timestamptz`; SQLite's text in the fixed-width form
/// [`sqlite_ts`] writes (read in any form [`parse_sqlite_ts`] takes, for rows written by hand);
/// MySQL's `DATETIME(3)` in UTC (the sessions' time zone is `+00:00`, sqlx's default). Bound as a
/// parameter it is written the same way, so one bind serves every dialect, and one row type
/// decodes every dialect's rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ts(pub DateTime<Utc>);

impl From<Ts> for DateTime<Utc> {
    fn from(ts: Ts) -> Self {
        ts.0
    }
}

/// The fixed-width text form of a timestamp in SQLite, `YYYY-MM-DDTHH:MM:SS.sssZ`: comparing two
/// as strings compares the instants.
pub fn sqlite_ts(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Reads a SQLite timestamp: [`sqlite_ts`]'s form, any RFC 3339, or SQLite's own
/// `YYYY-MM-DD HH:MM:SS` (what `CURRENT_TIMESTAMP` writes, for rows inserted by hand) taken as
/// UTC.
pub fn parse_sqlite_ts(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S%.f")
                .ok()
                .map(|n| n.and_utc())
        })
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use sqlx::Postgres;

    impl Type<Postgres> for Ts {
        fn type_info() -> sqlx::postgres::PgTypeInfo {
            <DateTime<Utc> as Type<Postgres>>::type_info()
        }
        fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
            <DateTime<Utc> as Type<Postgres>>::compatible(ty)
        }
    }

    impl<'r> Decode<'r, Postgres> for Ts {
        fn decode(value: sqlx::postgres::PgValueRef<'r>) -> Result<Self, BoxDynError> {
            <DateTime<Utc> as Decode<Postgres>>::decode(value).map(Ts)
        }
    }

    impl<'q> Encode<'q, Postgres> for Ts {
        fn encode_by_ref(
            &self,
            buf: &mut sqlx::postgres::PgArgumentBuffer,
        ) -> Result<IsNull, BoxDynError> {
            <DateTime<Utc> as Encode<Postgres>>::encode_by_ref(&self.0, buf)
        }
    }
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use sqlx::Sqlite;

    impl Type<Sqlite> for Ts {
        fn type_info() -> sqlx::sqlite::SqliteTypeInfo {
            <String as Type<Sqlite>>::type_info()
        }
        fn compatible(ty: &sqlx::sqlite::SqliteTypeInfo) -> bool {
            <String as Type<Sqlite>>::compatible(ty)
        }
    }

    impl<'r> Decode<'r, Sqlite> for Ts {
        fn decode(value: sqlx::sqlite::SqliteValueRef<'r>) -> Result<Self, BoxDynError> {
            let raw = <&str as Decode<Sqlite>>::decode(value)?;
            parse_sqlite_ts(raw)
                .map(Ts)
                .ok_or_else(|| format!("'{raw}' is not a timestamp").into())
        }
    }

    impl<'q> Encode<'q, Sqlite> for Ts {
        fn encode_by_ref(
            &self,
            buf: &mut Vec<sqlx::sqlite::SqliteArgumentValue<'q>>,
        ) -> Result<IsNull, BoxDynError> {
            <String as Encode<Sqlite>>::encode(sqlite_ts(self.0), buf)
        }
    }
}

#[cfg(feature = "mysql")]
mod mysql {
    use super::*;
    use sqlx::MySql;

    /// MySQL's `DATETIME`, UTC in the sessions (time zone `+00:00`).
    impl Type<MySql> for Ts {
        fn type_info() -> sqlx::mysql::MySqlTypeInfo {
            <chrono::NaiveDateTime as Type<MySql>>::type_info()
        }
        fn compatible(ty: &sqlx::mysql::MySqlTypeInfo) -> bool {
            <DateTime<Utc> as Type<MySql>>::compatible(ty)
        }
    }

    impl<'r> Decode<'r, MySql> for Ts {
        fn decode(value: sqlx::mysql::MySqlValueRef<'r>) -> Result<Self, BoxDynError> {
            <DateTime<Utc> as Decode<MySql>>::decode(value).map(Ts)
        }
    }

    /// Bound as a `DATETIME` (`NaiveDateTime`): sqlx sends a `DateTime<Utc>` as a `TIMESTAMP`,
    /// whose range ends in 2038 and turns year 9999 (the receiver's "never") into NULL.
    impl<'q> Encode<'q, MySql> for Ts {
        fn encode_by_ref(&self, buf: &mut Vec<u8>) -> Result<IsNull, BoxDynError> {
            <chrono::NaiveDateTime as Encode<MySql>>::encode_by_ref(&self.0.naive_utc(), buf)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_timestamps_are_fixed_width_and_round_trip() {
        let at = DateTime::parse_from_rfc3339("2026-06-11T08:15:30Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(sqlite_ts(at), "2026-06-11T08:15:30.000Z");
        assert_eq!(parse_sqlite_ts(&sqlite_ts(at)), Some(at));
        assert_eq!(parse_sqlite_ts("2026-06-11 08:15:30"), Some(at));
        assert_eq!(parse_sqlite_ts("yesterday"), None);
        let last = DateTime::from_timestamp_millis(253_402_300_799_999).unwrap();
        assert_eq!(sqlite_ts(last), "9999-12-31T23:59:59.999Z");
        assert_eq!(parse_sqlite_ts(&sqlite_ts(last)), Some(last));
    }
}
