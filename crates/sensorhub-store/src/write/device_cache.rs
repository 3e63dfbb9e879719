//! Each device's key and sensors, kept between transactions so that a
//! transaction writing readings of 2,000 stations reads one row (the
//! generations) rather than every station with its sensors (a
//! fifth of MQTT ingest's time on a 10,000-station fleet).
//!
//! The stored rows stay the truth: triggers move `device_generation` on
//! any change of a device or a sensor, whoever makes it (schema 11), and
//! what is kept is trusted only at the generation it was read at. A
//! device id that names no device is not kept: a publisher inventing ids
//! cannot crowd the real stations out.

use crate::decide::{DeviceSensors, FastMap};
use crate::sql::Sql;
use crate::{Generations, StoreResult};
use std::sync::Mutex;

/// Bytes the kept devices may take, by [`cost`]'s estimate: about 700
/// bytes a device with five sensors (id, sensor ids and units, a hash
/// table), so some 20,000 devices; a device of 64 sensors takes ten times
/// that. Past it, the others are read per transaction as if nothing were
/// kept.
const KEPT_BYTES: usize = 14 << 20;

/// A kept device's estimated bytes: the map's entry and the device's
/// allocations (each with its bookkeeping), and its strings.
fn cost(id: &str, device: &DeviceSensors) -> usize {
    const ENTRY: usize = 160;
    const SENSOR: usize = 96;
    let sensors = device.table().iter().map(|(sensor_id, (_, unit))| SENSOR + sensor_id.len() + unit.len());
    ENTRY + id.len() + sensors.sum::<usize>()
}

/// A store's cache of devices by id.
#[derive(Default)]
pub(crate) struct DeviceCache {
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    /// The generation the devices were read at.
    generation: i64,
    /// The kept devices' estimated bytes ([`cost`]).
    bytes: usize,
    devices: FastMap<String, DeviceSensors>,
}

impl DeviceCache {
    /// The key device `id` had when it was kept, whatever the generation
    /// now: a guess, for lookups that may be sent before [`Self::load`]
    /// answers and are used only when the device it returns has that key.
    pub(crate) fn guessed_pk(&self, id: &str) -> Option<i64> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner()).devices.get(id).map(|d| d.pk)
    }

    /// Devices `ids` (each named once) in the same order, without their
    /// subscriptions: those kept, and the rest read (in a few queries)
    /// and kept; `None` for an id of no device. With the access and
    /// device generations they were read at.
    pub(crate) async fn load(
        &self,
        c: &impl Sql,
        ids: &[&str],
    ) -> StoreResult<(Vec<Option<DeviceSensors>>, Generations)> {
        let read_at = crate::sql::access::current_generations(c).await?;
        let generation = read_at.devices;
        let mut out = Vec::with_capacity(ids.len());
        let mut missing = Vec::new();
        {
            let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
            if kept.generation != generation {
                kept.devices.clear();
                kept.bytes = 0;
                kept.generation = generation;
            }
            for (i, id) in ids.iter().enumerate() {
                let device = kept.devices.get(*id).cloned();
                if device.is_none() {
                    missing.push(i);
                }
                out.push(device);
            }
        }
        if missing.is_empty() {
            return Ok((out, read_at));
        }
        let names: Vec<&str> = missing.iter().map(|&i| ids[i]).collect();
        let mut found = crate::sql::access::devices_with_sensors(c, &names).await?;
        let mut kept = self.kept.lock().unwrap_or_else(|e| e.into_inner());
        for i in missing {
            let Some((id, (pk, sensors))) = found.remove_entry(ids[i]) else { continue };
            let device = DeviceSensors::new(pk, sensors);
            let cost = cost(&id, &device);
            let fits = kept.generation == generation && kept.bytes + cost <= KEPT_BYTES;
            if fits && kept.devices.insert(id, device.clone()).is_none() {
                kept.bytes += cost;
            }
            out[i] = Some(device);
        }
        Ok((out, read_at))
    }
}
