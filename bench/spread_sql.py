"""The outbox log's spread, schema 16 against 17, in SQL alone (issue 27,
the twenty-second step in RESULTS.md): 20,000 log rows of one reading
owed to three subscriptions, moved into `outbox` and deleted, three runs
each. Run: python3 bench/spread_sql.py (Python's own sqlite3, in memory)."""
import sqlite3, os, time, json
def setup(new):
    c=sqlite3.connect(':memory:')
    c.executescript("""
CREATE TABLE subscriptions(id TEXT PRIMARY KEY);
CREATE TABLE outbox(id INTEGER PRIMARY KEY, subscription_id, device_pk, message_id, body, created_at, next_attempt, state TEXT DEFAULT 'pending');
CREATE INDEX outbox_due ON outbox(next_attempt) WHERE state='pending';
CREATE TABLE outbox_owed (id INTEGER PRIMARY KEY, subs TEXT NOT NULL UNIQUE) STRICT;
""")
    subs=['sub_'+os.urandom(20).hex() for _ in range(3)]
    for s in subs: c.execute("insert into subscriptions values(?)",(s,))
    body='{"event":"sensor-data","device_id":"REF-0001","timestamp":"2026-11-29T08:00:00Z","data":{"sensors":[{"id":"REF-wl","value":123.456,"unit":"cm"}]}}'
    if new:
        c.execute("CREATE TABLE outbox_log (id INTEGER PRIMARY KEY, device_pk INTEGER NOT NULL, n INTEGER NOT NULL, cum INTEGER NOT NULL, created_at INTEGER NOT NULL, owed INTEGER NOT NULL, nonce BLOB NOT NULL, ids TEXT, body TEXT NOT NULL) STRICT")
        c.execute("insert into outbox_owed(subs) values(?)",(json.dumps(subs,separators=(',',':')),))
        for i in range(20000):
            c.execute("insert into outbox_log(device_pk,n,cum,created_at,owed,nonce,ids,body) values(1,3,?,5,1,?,NULL,?)",(i*3,os.urandom(48),body))
    else:
        c.execute("CREATE TABLE outbox_log (id INTEGER PRIMARY KEY, device_pk INTEGER NOT NULL, n INTEGER NOT NULL, cum INTEGER NOT NULL, created_at INTEGER NOT NULL, owed TEXT NOT NULL, body TEXT NOT NULL) STRICT")
        p='msg_'+os.urandom(20).hex()
        for i in range(20000):
            owed=json.dumps([[s,f"{p}_{i}"] for s in subs],separators=(',',':'))
            c.execute("insert into outbox_log(device_pk,n,cum,created_at,owed,body) values(1,3,?,5,?,?)",(i*3,owed,body))
    c.commit()
    return c
NEW="""INSERT INTO outbox (subscription_id, device_pk, message_id, body, created_at, next_attempt)
         SELECT j.value, l.device_pk,
                coalesce(json_extract(l.ids, '$[' || j.key || ']'),
                         'msg_' || lower(hex(substr(l.nonce, j.key * 16 + 1, 16)))),
                l.body, l.created_at, l.created_at
         FROM outbox_log l JOIN outbox_owed w ON w.id = l.owed, json_each(w.subs) j
         WHERE l.id <= ?1 AND EXISTS (SELECT 1 FROM subscriptions s WHERE s.id = j.value)
         ORDER BY l.id"""
OLD="""INSERT INTO outbox (subscription_id, device_pk, message_id, body, created_at, next_attempt)
         SELECT json_extract(j.value, '$[0]'), l.device_pk, json_extract(j.value, '$[1]'), l.body, l.created_at,
                l.created_at
         FROM outbox_log l, json_each(l.owed) j
         WHERE l.id <= ?1 AND EXISTS (SELECT 1 FROM subscriptions s WHERE s.id = json_extract(j.value, '$[0]'))
         ORDER BY l.id"""
for rnd in range(3):
  for new in (False, True):
    c=setup(new)
    size=c.execute("select sum(length(CAST(owed AS BLOB)))+sum(length(nonce)) from outbox_log" if new else "select sum(length(owed)) from outbox_log").fetchone()[0]
    t=time.perf_counter()
    c.execute(NEW if new else OLD,(20000,))
    c.execute("delete from outbox_log where id<=20000")
    dt=time.perf_counter()-t
    print('new' if new else 'old', f"{dt*1000:.1f} ms for 60000 deliveries; owed bytes/row {size/20000:.0f}", c.execute("select message_id from outbox limit 1").fetchone())
