//! SQL written once for both backends. Where SQLite and PostgreSQL agree on
//! a statement (subscriptions, the outbox's
//! bookkeeping, the admin reads, alarms; provisioning's beside its seam in
//! `write/provision_tx.rs`), it is written here once, with
//! PostgreSQL's `$1` placeholders, and run through [`Sql`]: each backend
//! only executes it (SQLite reads `$1` as `?1`) and converts its rows to
//! [`Row`]s. What really differs stays in the backend's own module: the
//! hours' keys and `COPY`, lists as arrays or JSON, locks, pragmas.
//!
//! Parameters are typed as the PostgreSQL column they meet ([`Param`]):
//! PostgreSQL checks every one, SQLite takes them as they come.

pub(crate) mod access;
pub(crate) mod alarms;
mod by_keys;
pub(crate) mod copy;
pub(crate) mod outbox;
pub(crate) mod retention;
pub(crate) mod subscriptions;

use crate::{StoreError, StoreResult};

/// A statement's parameter, typed as the PostgreSQL column it meets.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Param<'a> {
    /// `bigint` (SQLite `INTEGER`).
    Int(Option<i64>),
    /// `integer`.
    Int4(Option<i32>),
    /// `smallint`.
    Int2(Option<i16>),
    /// `double precision` (SQLite `REAL`).
    Real(Option<f64>),
    /// `boolean` (SQLite 0 or 1).
    Bool(Option<bool>),
    /// `text`.
    Text(Option<&'a str>),
    /// `bytea` (SQLite `BLOB`).
    Bytes(Option<&'a [u8]>),
}

macro_rules! param_from {
    ($($t:ty => $variant:ident),* $(,)?) => {$(
        impl From<$t> for Param<'_> {
            fn from(v: $t) -> Self {
                Param::$variant(Some(v))
            }
        }
        impl From<Option<$t>> for Param<'_> {
            fn from(v: Option<$t>) -> Self {
                Param::$variant(v)
            }
        }
    )*};
}

param_from!(i64 => Int, i32 => Int4, i16 => Int2, f64 => Real, bool => Bool);

impl<'a> From<&'a str> for Param<'a> {
    fn from(v: &'a str) -> Self {
        Param::Text(Some(v))
    }
}

impl<'a> From<Option<&'a str>> for Param<'a> {
    fn from(v: Option<&'a str>) -> Self {
        Param::Text(v)
    }
}

impl<'a> From<&'a String> for Param<'a> {
    fn from(v: &'a String) -> Self {
        Param::Text(Some(v))
    }
}

impl<'a> From<&'a [u8]> for Param<'a> {
    fn from(v: &'a [u8]) -> Self {
        Param::Bytes(Some(v))
    }
}

impl<'a> From<Option<&'a [u8]>> for Param<'a> {
    fn from(v: Option<&'a [u8]>) -> Self {
        Param::Bytes(v)
    }
}

/// A column's value as read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    Null,
    Int(i64),
    Real(f64),
    Bool(bool),
    Text(String),
    Bytes(Vec<u8>),
}

/// A row as read, its columns in the statement's order.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Row(pub Vec<Value>);

impl Row {
    /// Column `i` as a `T`; a type the column does not hold is an error
    /// (a statement and its reader disagree).
    pub(crate) fn get<T: FromValue>(&self, i: usize) -> StoreResult<T> {
        let value = self.0.get(i).unwrap_or(&Value::Null);
        T::from_value(value).ok_or_else(|| {
            StoreError::Backend(format!("column {i} holds {value:?}, not a {}", std::any::type_name::<T>()).into())
        })
    }
}

impl Row {
    /// Column `i` as text, borrowed; a column that holds no text is an error.
    pub(crate) fn text(&self, i: usize) -> StoreResult<&str> {
        match self.0.get(i) {
            Some(Value::Text(s)) => Ok(s),
            value => Err(StoreError::Backend(format!("column {i} holds {value:?}, not text").into())),
        }
    }
}

/// What a column's [`Value`] may be read as.
pub(crate) trait FromValue: Sized {
    /// `value` as this type, if it is one.
    fn from_value(value: &Value) -> Option<Self>;
}

impl FromValue for i64 {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Int(n) => Some(*n),
            _ => None,
        }
    }
}

macro_rules! narrower_int {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(value: &Value) -> Option<Self> {
                i64::from_value(value).and_then(|n| <$t>::try_from(n).ok())
            }
        }
    )*};
}

narrower_int!(i32, i16, u32, u16, u64, usize);

impl FromValue for f64 {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Real(x) => Some(*x),
            Value::Int(n) => Some(*n as f64),
            _ => None,
        }
    }
}

impl FromValue for bool {
    /// PostgreSQL's `boolean`, or SQLite's 0 and 1.
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Bool(b) => Some(*b),
            Value::Int(n) => Some(*n != 0),
            _ => None,
        }
    }
}

impl FromValue for String {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Text(s) => Some(s.clone()),
            _ => None,
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Bytes(b) => Some(b.clone()),
            _ => None,
        }
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: &Value) -> Option<Self> {
        match value {
            Value::Null => Some(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// Runs statements written once ([`self`]) on one backend's connection,
/// inside a transaction or not.
pub(crate) trait Sql {
    /// The rows of `sql` with `params`.
    async fn query(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<Vec<Row>>;

    /// Runs `sql` with `params`; how many rows it changed.
    async fn execute(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<u64>;

    /// The first row of `sql`, if it returns one.
    async fn query_opt(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<Option<Row>> {
        Ok(self.query(sql, params).await?.into_iter().next())
    }

    /// The one row `sql` returns.
    async fn query_one(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<Row> {
        self.query_opt(sql, params)
            .await?
            .ok_or_else(|| StoreError::Backend(format!("no row where one was expected: {sql}").into()))
    }
}

/// A connection (or transaction) that also reads one device's stored
/// hours from an hour on: the one read the alarms' replay needs
/// ([`crate::write::checkpoint`]), apart because each backend keys `hours`
/// its own way.
pub(crate) trait DeviceHours: Sql {
    /// Device `pk`'s stored hours from hour `first` on, oldest first.
    async fn hours_from(&self, pk: i64, first: i64) -> StoreResult<Vec<crate::decide::HourRow>>;
}

/// `sql` with SQLite's placeholders: `$1` becomes `?1` (the statements
/// here hold no `$` but their placeholders).
pub(crate) fn sqlite_placeholders(sql: &str) -> String {
    sql.replace('$', "?")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_what_they_hold() {
        let row = Row(vec![Value::Int(7), Value::Int(1), Value::Bool(false), Value::Null, Value::Text("x".into())]);
        assert_eq!(
            (row.get::<i64>(0).ok(), row.get::<i16>(0).ok(), row.get::<bool>(1).ok()),
            (Some(7), Some(7), Some(true))
        );
        assert_eq!(row.get::<bool>(2).ok(), Some(false));
        assert_eq!(row.get::<Option<String>>(3).ok(), Some(None));
        assert_eq!(row.get::<Option<String>>(4).ok(), Some(Some("x".into())));
        assert!(row.get::<String>(0).is_err() && row.get::<i64>(3).is_err() && row.get::<i64>(9).is_err());
        assert_eq!(sqlite_placeholders("WHERE a = $1 AND b = $12"), "WHERE a = ?1 AND b = ?12");
    }
}
