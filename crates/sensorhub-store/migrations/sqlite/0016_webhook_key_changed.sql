-- sensorhub schema, version 16 (issue 27): the access generation also
-- moves when a webhook key is revoked, removed, or changed in place.
--
-- A server in webhook ingest mode keeps each webhook key's answer (its
-- account, and the generations read with it) between requests, and
-- writes a reading sent with a kept key only if the access and device
-- generations read in the reading's own transaction are still those: a
-- key revoked, by the CLI, `apply`, SQL or another instance, is refused
-- at the next reading. Keys were looked up at every request before, so no
-- change of theirs moved the generation.
--
-- An `INSERT OR REPLACE` replaces a row without firing its delete or
-- update triggers: a key inserted (new, or replacing one revoked or given
-- to another account by SQL) moves it too, and so does an API key
-- inserted, which the kept API keys of public windows missed the same way.
CREATE TRIGGER access_webhook_key_changed AFTER UPDATE ON webhook_keys
    WHEN OLD.revoked IS NOT NEW.revoked OR OLD.account_id IS NOT NEW.account_id OR OLD.digest IS NOT NEW.digest
    BEGIN UPDATE access_generation SET generation = generation + 1; END;
CREATE TRIGGER access_webhook_key_removed AFTER DELETE ON webhook_keys
    BEGIN UPDATE access_generation SET generation = generation + 1; END;
CREATE TRIGGER access_webhook_key_added AFTER INSERT ON webhook_keys
    BEGIN UPDATE access_generation SET generation = generation + 1; END;
CREATE TRIGGER access_key_added AFTER INSERT ON api_keys
    BEGIN UPDATE access_generation SET generation = generation + 1; END;
