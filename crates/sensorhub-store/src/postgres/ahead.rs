//! Writes sent ahead on PostgreSQL: a write whose answer the step does not
//! use (an hour's row, the `latest` index, the outbox) goes out at once and
//! its answer is read before the transaction's next statement that waits
//! for one, or with its `COMMIT`. The server runs statements in the order
//! they were sent, and once one has failed every later one fails (its
//! transaction is aborted; a `COMMIT` then rolls back), so nothing is
//! written that would not have been, and the first failure is the one
//! reported ([`reported`]). A group of webhook readings so costs two
//! round trips, not six (issue 27).

use crate::{StoreError, StoreResult};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use tokio_postgres::Statement;
use tokio_postgres::types::ToSql;

/// A write's parameters, owned: the write outlives the call that made it.
pub(super) type Params = Vec<Box<dyn ToSql + Sync + Send>>;

/// A write on its way: its answer not read yet.
type Sent<'c> = Pin<Box<dyn Future<Output = StoreResult<()>> + Send + 'c>>;

/// Where a transaction's writes go ahead ([`super::tx::PgTx::sending_ahead`]).
/// A trait object, so that the transaction that holds it stays covariant
/// in its lifetime (the steps are closures over any transaction's).
pub(super) trait SendAhead: Sync {
    /// Sends the prepared `stmt`; its answer is read by [`Self::settle`].
    fn send(&self, stmt: Statement, params: Params) -> StoreResult<()>;

    /// Reads the answers of the writes sent; the first failure, if any.
    fn settle(&self) -> Pin<Box<dyn Future<Output = StoreResult<()>> + Send + '_>>;
}

/// The writes sent ahead on one connection.
pub(super) struct Ahead<'c> {
    c: &'c tokio_postgres::Client,
    sent: Mutex<Vec<Sent<'c>>>,
}

impl<'c> Ahead<'c> {
    /// None sent yet, on `c`.
    pub(super) fn new(c: &'c tokio_postgres::Client) -> Self {
        Self { c, sent: Mutex::new(Vec::new()) }
    }
}

impl SendAhead for Ahead<'_> {
    fn send(&self, stmt: Statement, params: Params) -> StoreResult<()> {
        let c = self.c;
        let mut write: Sent<'_> = Box::pin(async move {
            c.execute_raw(&stmt, params).await?;
            Ok(())
        });
        // Its first poll encodes the statement and hands it to the
        // connection (it is prepared: nothing waits before that); the
        // answer is read by whoever settles, who wakes it again.
        match write.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(done) => done,
            Poll::Pending => {
                self.sent.lock().unwrap_or_else(PoisonError::into_inner).push(write);
                Ok(())
            }
        }
    }

    fn settle(&self) -> Pin<Box<dyn Future<Output = StoreResult<()>> + Send + '_>> {
        let sent = std::mem::take(&mut *self.sent.lock().unwrap_or_else(PoisonError::into_inner));
        Box::pin(async move {
            if sent.is_empty() {
                return Ok(());
            }
            let answers = futures_util::future::join_all(sent).await;
            match reported(answers.into_iter().filter_map(Result::err).collect()) {
                Some(e) => Err(e),
                None => Ok(()),
            }
        })
    }
}

/// Whether `e` is only the echo of an earlier failure in its transaction
/// ("current transaction is aborted").
fn is_echo(e: &StoreError) -> bool {
    let StoreError::Backend(e) = e else { return false };
    let code = e.downcast_ref::<tokio_postgres::Error>().and_then(tokio_postgres::Error::code);
    code == Some(&tokio_postgres::error::SqlState::IN_FAILED_SQL_TRANSACTION)
}

/// Of errors in the order their statements were sent, the one to report:
/// the first that is not an echo, unless one is [`StoreError::Busy`]
/// ([`StoreError::cause`]).
pub(super) fn reported(errors: Vec<StoreError>) -> Option<StoreError> {
    let first = errors.iter().position(|e| !is_echo(e)).unwrap_or(0);
    let mut errors = errors.into_iter();
    let mut before: Vec<StoreError> = errors.by_ref().take(first).collect();
    let cause = errors.next()?;
    before.extend(errors);
    Some(StoreError::cause(cause, before))
}
