-- sensorhub schema, version 9 (issue 25): alarms.
--
-- `alarm_rules` holds each device's rules, in order, as written (the JSON
-- of a rule spec); `alarm_states` the states the rules keep, one row per
-- device (what the API shows and what the next reading is judged against,
-- with the memory a rule keeps between readings: a JSON object by rule
-- name, and how many of them are active; one row, not one per rule, so
-- that a reading costs one state write however many rules watch it); `alarm_events` every
-- transition, written in the transaction of the reading (or timer, or
-- acknowledgement) that caused it, with its outbox rows. A change of the
-- rules bumps `alarm_generation`, whoever makes it, so that a running
-- server's silence watch reloads them within seconds.
CREATE TABLE alarm_rules (
    device_pk INTEGER NOT NULL REFERENCES devices(id),
    position  INTEGER NOT NULL,
    name      TEXT    NOT NULL,
    spec      TEXT    NOT NULL,
    PRIMARY KEY (device_pk, name)
) STRICT;

CREATE TABLE alarm_states (
    device_pk INTEGER PRIMARY KEY REFERENCES devices(id),
    active    INTEGER NOT NULL,
    states    TEXT    NOT NULL
) STRICT;
CREATE INDEX alarm_states_active ON alarm_states (device_pk) WHERE active > 0;

CREATE TABLE alarm_events (
    id         INTEGER PRIMARY KEY,
    device_pk  INTEGER NOT NULL REFERENCES devices(id),
    rule       TEXT    NOT NULL,
    transition TEXT    NOT NULL,
    level      TEXT,
    value      REAL,
    timestamp  INTEGER,
    at         INTEGER NOT NULL
) STRICT;
CREATE INDEX alarm_events_by_device ON alarm_events (device_pk, at);

CREATE TABLE alarm_generation (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    generation INTEGER NOT NULL
) STRICT;
INSERT INTO alarm_generation (id, generation) VALUES (1, 0);

CREATE TRIGGER alarm_rules_added AFTER INSERT ON alarm_rules
    BEGIN UPDATE alarm_generation SET generation = generation + 1; END;
CREATE TRIGGER alarm_rules_changed AFTER UPDATE ON alarm_rules
    BEGIN UPDATE alarm_generation SET generation = generation + 1; END;
CREATE TRIGGER alarm_rules_removed AFTER DELETE ON alarm_rules
    BEGIN UPDATE alarm_generation SET generation = generation + 1; END;
