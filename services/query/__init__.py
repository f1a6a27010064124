"""The read-only query service: lookups by key, id, queue offset and time."""
