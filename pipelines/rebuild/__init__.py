"""Rebuild consume queues and index files from commitlog segments on Spark.

``source`` plans byte ranges of segments and decodes one range; ``consume_queue_sink`` and
``index_sink`` turn decoded ranges into files; ``staging`` writes into a fresh root that is
swapped into place; ``job`` runs it all on Spark.
"""
