//! Statements written once ([`crate::sql`]) on a PostgreSQL connection:
//! their parameters and columns converted, and [`On`], a connection or
//! transaction that runs them.

use crate::sql::{Param, Row, Sql, Value};
use crate::{StoreError, StoreResult};
use bytes::BytesMut;
use deadpool_postgres::GenericClient;
use tokio_postgres::types::{IsNull, ToSql, Type};

impl ToSql for Param<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Param::Int(v) => v.to_sql(ty, out),
            Param::Int4(v) => v.to_sql(ty, out),
            Param::Int2(v) => v.to_sql(ty, out),
            Param::Real(v) => v.to_sql(ty, out),
            Param::Bool(v) => v.to_sql(ty, out),
            Param::Text(v) => v.to_sql(ty, out),
            Param::Bytes(v) => v.to_sql(ty, out),
        }
    }

    /// Each variant checks its own type against the column's.
    fn accepts(_: &Type) -> bool {
        true
    }

    fn to_sql_checked(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Param::Int(v) => v.to_sql_checked(ty, out),
            Param::Int4(v) => v.to_sql_checked(ty, out),
            Param::Int2(v) => v.to_sql_checked(ty, out),
            Param::Real(v) => v.to_sql_checked(ty, out),
            Param::Bool(v) => v.to_sql_checked(ty, out),
            Param::Text(v) => v.to_sql_checked(ty, out),
            Param::Bytes(v) => v.to_sql_checked(ty, out),
        }
    }
}

/// Column `i` of `row` as [`Row`]s hold it.
fn value(row: &tokio_postgres::Row, i: usize) -> StoreResult<Value> {
    let ty = row.columns()[i].type_().clone();
    let v = match ty {
        Type::INT8 => row.try_get::<_, Option<i64>>(i)?.map(Value::Int),
        Type::INT4 => row.try_get::<_, Option<i32>>(i)?.map(|n| Value::Int(n.into())),
        Type::INT2 => row.try_get::<_, Option<i16>>(i)?.map(|n| Value::Int(n.into())),
        Type::FLOAT8 => row.try_get::<_, Option<f64>>(i)?.map(Value::Real),
        Type::BOOL => row.try_get::<_, Option<bool>>(i)?.map(Value::Bool),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => row.try_get::<_, Option<String>>(i)?.map(Value::Text),
        Type::BYTEA => row.try_get::<_, Option<Vec<u8>>>(i)?.map(Value::Bytes),
        other => {
            return Err(StoreError::Backend(format!("column {i} is of type {other}, which Row does not hold").into()));
        }
    };
    Ok(v.unwrap_or(Value::Null))
}

/// A PostgreSQL connection or transaction running statements written once ([`crate::sql`]).
pub(super) struct On<'a, C>(pub &'a C);

impl<C: GenericClient + Sync> Sql for On<'_, C> {
    async fn query(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<Vec<Row>> {
        let stmt = self.0.prepare_cached(sql).await?;
        rows_of(&self.0.query(&stmt, &refs(params)).await?)
    }

    async fn execute(&self, sql: &str, params: &[Param<'_>]) -> StoreResult<u64> {
        let stmt = self.0.prepare_cached(sql).await?;
        Ok(self.0.execute(&stmt, &refs(params)).await?)
    }
}

/// Parameters as tokio-postgres takes them.
pub(super) fn refs<'p>(params: &'p [Param<'_>]) -> Vec<&'p (dyn ToSql + Sync)> {
    params.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

/// Rows as [`crate::sql`] reads them.
pub(super) fn rows_of(rows: &[tokio_postgres::Row]) -> StoreResult<Vec<Row>> {
    rows.iter().map(|r| Ok(Row((0..r.len()).map(|i| value(r, i)).collect::<StoreResult<_>>()?))).collect()
}
