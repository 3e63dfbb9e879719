-- sensorhub schema, version 13 (issue 27): the access generation also
-- moves when a device changes owner or a grant's write permission changes.
--
-- A server keeps each webhook caller's answer to "which device is this,
-- and may I write it?" between requests, trusted only while both this
-- generation and the devices' one are those it was read at (the webhook
-- key's lookup reads them in the same statement). Taking a device from an
-- account or removing it moved the generation already (schema 8); moving
-- its owner or narrowing a grant in place did not.
CREATE TRIGGER access_device_owner_changed AFTER UPDATE OF owner_id ON devices FOR EACH ROW
    WHEN (OLD.owner_id IS DISTINCT FROM NEW.owner_id)
    EXECUTE FUNCTION sensorhub_access_changed();
CREATE TRIGGER access_grant_changed AFTER UPDATE ON account_devices FOR EACH ROW
    WHEN (OLD.can_write IS DISTINCT FROM NEW.can_write OR OLD.account_id IS DISTINCT FROM NEW.account_id
          OR OLD.device_pk IS DISTINCT FROM NEW.device_pk)
    EXECUTE FUNCTION sensorhub_access_changed();
-- A grant inserted moves it too (for each row inserted: a statement that
-- inserts none, `ON CONFLICT DO NOTHING` when re-applying a file, moves
-- nothing), and so does emptying a table with `TRUNCATE` (which fires no
-- delete trigger): grants, devices, sensors.
CREATE TRIGGER access_grant_added AFTER INSERT ON account_devices FOR EACH ROW
    EXECUTE FUNCTION sensorhub_access_changed();
CREATE TRIGGER access_grants_truncated AFTER TRUNCATE ON account_devices FOR EACH STATEMENT
    EXECUTE FUNCTION sensorhub_access_changed();
CREATE TRIGGER access_devices_truncated AFTER TRUNCATE ON devices FOR EACH STATEMENT
    EXECUTE FUNCTION sensorhub_access_changed();
CREATE TRIGGER device_generation_devices_truncated AFTER TRUNCATE ON devices FOR EACH STATEMENT
    EXECUTE FUNCTION sensorhub_devices_changed();
CREATE TRIGGER device_generation_sensors_truncated AFTER TRUNCATE ON sensors FOR EACH STATEMENT
    EXECUTE FUNCTION sensorhub_devices_changed();
-- Emptying accounts, API keys or their device lists takes access away
-- too (schema 8 moved the generation only on their rows' deletes).
CREATE TRIGGER access_accounts_truncated AFTER TRUNCATE ON accounts FOR EACH STATEMENT
    EXECUTE FUNCTION sensorhub_access_changed();
CREATE TRIGGER access_keys_truncated AFTER TRUNCATE ON api_keys FOR EACH STATEMENT
    EXECUTE FUNCTION sensorhub_access_changed();
CREATE TRIGGER access_key_devices_truncated AFTER TRUNCATE ON api_key_devices FOR EACH STATEMENT
    EXECUTE FUNCTION sensorhub_access_changed();
