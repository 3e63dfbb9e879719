-- sensorhub schema, version 8 (issue 23): what long-lived things need to
-- keep access decisions true while they live.
--
-- `access_generation` holds one number that grows with every change that
-- may take access away: a password or disabled flag changed, an account,
-- key or device removed, a key revoked or its scope changed, a device
-- taken from an account or from a scoped key's list. Triggers bump it in
-- the changing transaction, whoever changes it (a command, `apply`,
-- another instance), so nothing that writes these tables can forget to.
-- A server reads it once a second; when it moved, open streams check
-- their caller again.
CREATE TABLE access_generation (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL
) STRICT;
INSERT INTO access_generation (id, generation) VALUES (1, 0);

CREATE TRIGGER access_account_changed AFTER UPDATE OF password_hash, disabled ON accounts
    WHEN OLD.password_hash IS NOT NEW.password_hash OR OLD.disabled IS NOT NEW.disabled
    BEGIN UPDATE access_generation SET generation = generation + 1; END;
CREATE TRIGGER access_account_removed AFTER DELETE ON accounts
    BEGIN UPDATE access_generation SET generation = generation + 1; END;
CREATE TRIGGER access_key_changed AFTER UPDATE OF revoked, scoped, account_id ON api_keys
    WHEN OLD.revoked IS NOT NEW.revoked OR OLD.scoped IS NOT NEW.scoped OR OLD.account_id IS NOT NEW.account_id
    BEGIN UPDATE access_generation SET generation = generation + 1; END;
CREATE TRIGGER access_key_removed AFTER DELETE ON api_keys
    BEGIN UPDATE access_generation SET generation = generation + 1; END;
CREATE TRIGGER access_account_device_removed AFTER DELETE ON account_devices
    BEGIN UPDATE access_generation SET generation = generation + 1; END;
CREATE TRIGGER access_key_device_removed AFTER DELETE ON api_key_devices
    BEGIN UPDATE access_generation SET generation = generation + 1; END;
CREATE TRIGGER access_device_removed AFTER DELETE ON devices
    BEGIN UPDATE access_generation SET generation = generation + 1; END;

-- Each delivery names the device of its reading, so that a claim can
-- check that the subscription's account still sees it. Rows written
-- before this version get it from their envelope.
ALTER TABLE outbox ADD COLUMN device_pk INTEGER;
UPDATE outbox SET device_pk = (SELECT d.id FROM devices d WHERE d.device_id = json_extract(outbox.body, '$.device_id'));

-- Facts about this installation, made once: `id` is 128 random bits, the
-- part of the default MQTT client id that nobody can guess.
CREATE TABLE installation (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) STRICT;
INSERT INTO installation (key, value) VALUES ('id', lower(hex(randomblob(16))));
