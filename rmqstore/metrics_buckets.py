"""Histogram buckets the services' metrics share."""

# Put/flush latencies: 100 µs (async put in page cache) .. 10 s (a stalled disk).
IO_LATENCY_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
# Query latencies: 500 µs (one consume-queue read) .. 30 s (a budget-bound key scan).
QUERY_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
)
# Hash-chain lengths and hops: powers of two up to RocketMQ's default max hits scale.
CHAIN_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 16384, 65536)
# Records per dispatch batch / results per query.
COUNT_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384)
