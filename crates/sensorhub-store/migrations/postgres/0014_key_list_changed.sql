-- sensorhub schema, version 14 (issue 27): the access generation also
-- moves when a row of a scoped API key's device list is changed in place.
--
-- A server keeps the device a raw window names, as the caller's scope
-- sees it, between requests, trusted only while the access and device
-- generations are those it was read at. A key's list narrowed by deleting
-- a row moved the generation already (schema 8), and emptied by TRUNCATE
-- (schema 13); one narrowed by an UPDATE that points a row at another
-- device, or at another key, did not.
CREATE TRIGGER access_key_device_changed AFTER UPDATE ON api_key_devices FOR EACH ROW
    WHEN (OLD.key_id IS DISTINCT FROM NEW.key_id OR OLD.device_pk IS DISTINCT FROM NEW.device_pk)
    EXECUTE FUNCTION sensorhub_access_changed();
