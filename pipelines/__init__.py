"""PySpark jobs over commitlog segments: rebuild consume queues and index files, export, find."""
