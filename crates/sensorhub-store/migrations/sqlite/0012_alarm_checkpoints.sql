-- sensorhub schema, version 12 (issue 25): alarm states written at checkpoints.
--
-- A device's row in `alarm_states` is a checkpoint: `through` is the
-- newest reading second evaluated into it (NULL: none), and every stored
-- reading of the device after it is replayed, in time order, into the
-- level and rate rules when the states are loaded. The writer keeps states
-- in memory and writes the row only when a transition is recorded, every
-- 64 readings of the device, or when a reading is late or a backfill
-- (where a replay in time order would differ from what was evaluated).
-- Rows written before this version are exact as of every stored reading.
--
-- `latest.stored_at` is when (by the server's clock) the entry was
-- written: a silence rule's last data is the later of its row and this,
-- so that an instance that did not write the readings never raises early.
ALTER TABLE alarm_states ADD COLUMN through INTEGER;
UPDATE alarm_states SET through = (SELECT max(second) FROM latest WHERE latest.device_pk = alarm_states.device_pk);
ALTER TABLE latest ADD COLUMN stored_at INTEGER NOT NULL DEFAULT 0;
