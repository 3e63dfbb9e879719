"""What SQLite writes to its WAL when a stored hour's row is rewritten
(issue 27, the twenty-second step in RESULTS.md): a 22 KB blob (the open
hour of a station reporting once a second) updated 100 times in its own
commits, either growing by 8 bytes each time or keeping its size with
only bytes near its end changed, with and without auto_vacuum. Run:
python3 bench/blob_update_sql.py (Python's own sqlite3; prints WAL pages
a commit)."""
import os, sqlite3, tempfile
def run(mode, av):
    p=os.path.join(tempfile.mkdtemp(), 'ow.db')
    for s in ('','-wal','-shm'):
        try: os.remove(p+s)
        except FileNotFoundError: pass
    c=sqlite3.connect(p, isolation_level=None)
    c.execute(f'pragma auto_vacuum={av}')
    c.execute('pragma journal_mode=wal'); c.execute('pragma wal_autocheckpoint=0')
    c.execute('create table hours(key integer primary key, data blob not null)')
    base=bytearray(os.urandom(22000))
    for k in range(1,50): c.execute('insert into hours values(?,?)',(k,os.urandom(3000)))
    c.execute('insert into hours values(1000,?)',(bytes(base),))
    c.execute('pragma wal_checkpoint(truncate)')
    w0=os.path.getsize(p+'-wal')
    n=100
    for i in range(n):
        if mode=='same':
            base[21000+i*8:21000+i*8+8]=os.urandom(8); data=bytes(base)
        elif mode=='grow':
            data=bytes(base)+os.urandom(8*(i+1))
        c.execute('begin'); c.execute('update hours set data=? where key=1000',(data,)); c.execute('commit')
    print(mode, 'auto_vacuum', av, round((os.path.getsize(p+'-wal')-w0)/n/4120,1), 'pages a commit')
for av in (0,2):
    for m in ('grow','same'): run(m,av)
