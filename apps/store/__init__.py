"""The event store (issue 69): the camera's tracks and events kept in SQLite (or a PostgreSQL
server), queried by ``edgert events query`` and the camera's ``/api/events`` and
``/api/tracks/ID``.

    schema.py     the tables and their migrations (``PRAGMA user_version``)
    records.py    the one adapter from the camera's event records to rows
    writer.py     the writer thread: batched transactions, the heartbeat, the write budget
    query.py      the filters (camera, label, zone, line, since, until, cursor paging)
    reconcile.py  rows and files agree: missing files marked, unknown files counted
    sink.py       the camera's ``--store`` (a sink of events) and its HTTP routes
    follow.py     MQTT publishes what the store committed
    postgres.py   the store on a PostgreSQL server many devices share (``postgresql://``)
    spool.py      the server's events kept on the device while it is away
"""
