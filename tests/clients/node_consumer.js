// The official RocketMQ 5 Node.js SimpleConsumer, run in a process of its own by the proxy's
// consumer tests: node node_consumer.js ENDPOINT GROUP TOPIC EXPECT receives (batch 16) and
// acks until EXPECT distinct messages are acked, one JSON line per event.
'use strict';
const { SimpleConsumer } = require('rocketmq-client-nodejs');

const [endpoint, group, topic, expect] = process.argv.slice(2);
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const quiet = { info() {}, debug() {}, warn() {}, error: (...a) => console.error(...a) };

async function main() {
  const consumer = new SimpleConsumer({
    endpoints: endpoint, namespace: '', consumerGroup: group, logger: quiet,
    subscriptions: new Map([[topic, '*']]), awaitDuration: 3000, requestTimeout: 10000,
  });
  await consumer.startup();
  const acked = new Set();
  const deadline = Date.now() + 120000;
  while (acked.size < Number(expect) && Date.now() < deadline) {
    for (const m of await consumer.receive(16, 15000)) {
      out({ event: 'received', id: m.messageId, body: m.body.toString(), attempt: m.deliveryAttempt });
      await consumer.ack(m);
      acked.add(m.messageId);
      out({ event: 'acked', id: m.messageId });
    }
  }
  await consumer.shutdown();
  out({ event: 'done', acked: acked.size });
  process.exit(acked.size >= Number(expect) ? 0 : 1);
}

main().catch((e) => { console.error(e); process.exit(2); });
