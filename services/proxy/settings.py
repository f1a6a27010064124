"""The Settings reply to a client's Telemetry settings: its own settings echoed, with what
the server decides filled in. Each field here is one some client needs (spec §5.1):

* producers: ``publishing.max_body_size`` (0 or absent fails every send) and an
  *exponential* ``backoff_policy`` (the Node.js producer dies without one);
* consumers: ``long_polling_timeout``, ``receive_batch_size``, ``fifo``, and a back-off the
  client's language reads: customized steps for Python, exponential for Node.js.
"""

from google.protobuf.duration_pb2 import Duration

from rmqstore.rocketmq import definition_pb2 as pb
from rmqstore.rocketmq import service_pb2 as spb
from services.proxy import status

# RocketMQ's producer default: 3 attempts, 10 ms doubling to 1 s
PRODUCER_BACKOFF = pb.RetryPolicy(
    max_attempts=3,
    exponential_backoff=pb.ExponentialBackoff(
        initial=Duration(nanos=10_000_000), max=Duration(seconds=1), multiplier=2.0
    ),
)
# consumer defaults (RocketMQ's group defaults: 16 retries, 4.9's retry levels)
CONSUMER_MAX_ATTEMPTS = 17
CONSUMER_STEPS_S = (1, 5, 10, 30, 60, 120, 180, 240, 300, 360, 420, 480, 540, 600, 1200, 1800,
                    3600, 7200)  # fmt: skip
LONG_POLLING_S = 20
RECEIVE_BATCH = 32


def consumer_backoff(language: int, max_attempts: int = CONSUMER_MAX_ATTEMPTS) -> pb.RetryPolicy:
    if language == pb.NODE_JS:
        return pb.RetryPolicy(
            max_attempts=max_attempts,
            exponential_backoff=pb.ExponentialBackoff(
                initial=Duration(seconds=1), max=Duration(seconds=7200), multiplier=2.0
            ),
        )
    return pb.RetryPolicy(
        max_attempts=max_attempts,
        customized_backoff=pb.CustomizedBackoff(
            next=[Duration(seconds=s) for s in CONSUMER_STEPS_S]
        ),
    )


def reply(
    client: pb.Settings, max_body_size: int, fifo_group: bool = False,
    max_attempts: int = CONSUMER_MAX_ATTEMPTS,
) -> spb.TelemetryCommand:  # fmt: skip
    s = pb.Settings()
    s.CopyFrom(client)
    if client.HasField("subscription"):
        sub = s.subscription
        sub.fifo = fifo_group
        sub.receive_batch_size = RECEIVE_BATCH
        sub.long_polling_timeout.CopyFrom(Duration(seconds=LONG_POLLING_S))
        s.backoff_policy.CopyFrom(consumer_backoff(client.user_agent.language, max_attempts))
    else:
        s.publishing.max_body_size = max_body_size
        s.publishing.validate_message_type = True
        s.backoff_policy.CopyFrom(PRODUCER_BACKOFF)
    return spb.TelemetryCommand(status=status.ok(), settings=s)
