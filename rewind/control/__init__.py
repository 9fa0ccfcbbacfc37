"""The shared control state of a stream: what two processes of Rewind, on any hosts, must agree on.

``store`` is the contract (read, conditional create and replace), ``directory`` and ``s3`` keep it,
``location`` picks one for a stream, ``lease`` decides who may drive a stream (pure) and ``leases``
takes and renews that lease. The documents themselves are written by their owners: the stream's
status (``rewind.control.status``), the supervisor's memory (``rewind.supervision.failures``), the
proof cursor, the replay guard, the standby.
"""
