//! Queries of many keys at once (`… IN ($1, …)`), written once: a
//! transaction that touches 2,000 stations asks for them in a few
//! statements rather than one each.

use super::{Param, Row, Sql};
use crate::StoreResult;
use std::sync::OnceLock;

/// Keys in one statement of several ([`ByKeys::each`]): the statement is
/// the same for every chunk (the last padded), so it is prepared once.
pub(crate) const KEYS_AT_ONCE: usize = 128;

/// A query of many keys (`… IN ($1, …)`): its statement for one key, and
/// for [`KEYS_AT_ONCE`] (the last chunk padded), each written once, so
/// that either is prepared once.
pub(crate) struct ByKeys {
    head: &'static str,
    tail: &'static str,
    one: OnceLock<String>,
    many: OnceLock<String>,
}

impl ByKeys {
    pub(crate) const fn new(head: &'static str, tail: &'static str) -> Self {
        Self { head, tail, one: OnceLock::new(), many: OnceLock::new() }
    }

    /// The statement for `width` keys (1 or [`KEYS_AT_ONCE`]).
    fn sql(&self, width: usize) -> &str {
        if width == 1 {
            self.one.get_or_init(|| format!("{}$1{}", self.head, self.tail))
        } else {
            self.many.get_or_init(|| {
                let keys: Vec<String> = (1..=KEYS_AT_ONCE).map(|i| format!("${i}")).collect();
                format!("{}{}{}", self.head, keys.join(", "), self.tail)
            })
        }
    }

    /// Runs the query for `keys` (one statement for a single key, else a
    /// chunk at a time, the last padded with its last key: `IN` gives a
    /// row once however often its key is named) and hands each row to `each`.
    pub(crate) async fn each<'k, K>(
        &self,
        c: &impl Sql,
        keys: &'k [K],
        mut each: impl FnMut(&Row) -> StoreResult<()>,
    ) -> StoreResult<()>
    where
        K: Copy + Into<Param<'k>>,
    {
        if let [key] = keys {
            for row in c.query(self.sql(1), &[(*key).into()]).await? {
                each(&row)?;
            }
            return Ok(());
        }
        for chunk in keys.chunks(KEYS_AT_ONCE) {
            let Some(&last) = chunk.last() else { continue };
            let params: Vec<Param<'k>> =
                chunk.iter().copied().chain(std::iter::repeat(last)).take(KEYS_AT_ONCE).map(Into::into).collect();
            for row in c.query(self.sql(KEYS_AT_ONCE), &params).await? {
                each(&row)?;
            }
        }
        Ok(())
    }
}
