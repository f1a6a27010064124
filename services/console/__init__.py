"""The message console: read-only pages and a JSON API over the query service."""
