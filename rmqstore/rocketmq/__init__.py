"""Generated bindings of RocketMQ 5's gRPC protocol (``apache.rocketmq.v2``), made by ``make`` from protos/rmqstore/rocketmq/."""
