"""The tests' shared harness: stream processes and their waits (``processes``), the sink tests' tables and
rows (``sink_data``), a sink writer in a child process (``sink_child``), and the crash scenario
(``crash``). Test modules import from here, never from each other."""
