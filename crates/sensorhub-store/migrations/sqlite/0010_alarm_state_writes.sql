-- sensorhub schema, version 10 (issue 25): a count of alarm state writes.
--
-- Every transaction that writes alarm states adds one to `state_writes`
-- (the one statement that writes them does), so that a store that keeps
-- the states in memory between its transactions learns, from this one
-- row, whether anyone else has written them since: another process (an
-- `apply`, an `import`, the CLI) or another instance on the same
-- PostgreSQL database.
ALTER TABLE alarm_generation ADD COLUMN state_writes INTEGER NOT NULL DEFAULT 0;
