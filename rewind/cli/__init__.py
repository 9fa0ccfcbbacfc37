"""The ``rewind`` command line: one parser, one exit-code mapping, one module per command group."""
