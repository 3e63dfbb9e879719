-- sensorhub schema, version 13 (issue 27): the access generation also
-- moves when a device changes owner or a grant's write permission changes.
--
-- A server keeps each webhook caller's answer to "which device is this,
-- and may I write it?" between requests, trusted only while both this
-- generation and the devices' one are those it was read at (the webhook
-- key's lookup reads them in the same statement). Taking a device from an
-- account or removing it moved the generation already (schema 8); moving
-- its owner or narrowing a grant in place did not.
CREATE TRIGGER access_device_owner_changed AFTER UPDATE OF owner_id ON devices
    WHEN OLD.owner_id IS NOT NEW.owner_id
    BEGIN UPDATE access_generation SET generation = generation + 1; END;
CREATE TRIGGER access_grant_changed AFTER UPDATE ON account_devices
    WHEN OLD.can_write IS NOT NEW.can_write OR OLD.account_id IS NOT NEW.account_id
         OR OLD.device_pk IS NOT NEW.device_pk
    BEGIN UPDATE access_generation SET generation = generation + 1; END;
-- A grant inserted moves it too: `INSERT OR REPLACE` narrows a grant by
-- deleting the row, which fires no delete trigger.
CREATE TRIGGER access_grant_added AFTER INSERT ON account_devices
    BEGIN UPDATE access_generation SET generation = generation + 1; END;
