-- sensorhub schema, version 15 (issue 27): the access generation also
-- moves when a webhook key is revoked, removed, or changed in place.
--
-- A server in webhook ingest mode keeps each webhook key's answer (its
-- account, and the generations read with it) between requests, and
-- writes a reading sent with a kept key only if the access and device
-- generations read in the reading's own transaction are still those: a
-- key revoked, by the CLI, `apply`, SQL or another instance, is refused
-- at the next reading. Keys were looked up at every request before, so no
-- change of theirs moved the generation.
CREATE TRIGGER access_webhook_key_changed AFTER UPDATE ON webhook_keys FOR EACH ROW
    WHEN (OLD.revoked IS DISTINCT FROM NEW.revoked OR OLD.account_id IS DISTINCT FROM NEW.account_id
          OR OLD.digest IS DISTINCT FROM NEW.digest)
    EXECUTE FUNCTION sensorhub_access_changed();
CREATE TRIGGER access_webhook_key_removed AFTER DELETE ON webhook_keys FOR EACH STATEMENT
    EXECUTE FUNCTION sensorhub_access_changed();
CREATE TRIGGER access_webhook_keys_truncated AFTER TRUNCATE ON webhook_keys FOR EACH STATEMENT
    EXECUTE FUNCTION sensorhub_access_changed();
