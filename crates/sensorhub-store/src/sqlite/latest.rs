//! The `latest` index on SQLite, read by the `latest` endpoint: the newest
//! value of each sensor of each device (schema version 5), kept by every
//! write of readings in its own transaction ([`crate::write`]).

use super::tx::on;
use crate::decide::latest::entry;
use crate::sql::access;
use crate::{DeviceHandle, LatestValue, Scope, StoreResult};
use rusqlite::Connection;

/// The device `device_id` visible in `scope` with its entries, by idx.
pub(super) fn read(
    c: &mut Connection,
    scope: Scope,
    device_id: &str,
) -> StoreResult<Option<(DeviceHandle, Vec<LatestValue>)>> {
    let Some(device) = on(c, async |c| access::find_device(c, scope, device_id).await)? else { return Ok(None) };
    let mut stmt = c.prepare_cached("SELECT idx, second, value FROM latest WHERE device_pk = ?1 ORDER BY idx")?;
    let values =
        stmt.query_map([device.pk], |r| Ok(entry(r.get(0)?, r.get(1)?, r.get(2)?)))?.collect::<Result<_, _>>()?;
    Ok(Some((device, values)))
}
