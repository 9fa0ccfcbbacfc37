"""Task logic of the Rewind DAGs, by domain; each task calls into ``rewind``, which decides."""
