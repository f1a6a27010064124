// The official RocketMQ 5 Node.js producer, run in a process of its own by the proxy's tests.
// node node_producer.js ENDPOINT PREFIX [ACCESS_KEY SECRET_KEY]: sends normal, FIFO, delayed and
// transactional messages (commit, rollback, one left open and committed by this checker when
// the server checks it), one JSON line per message sent.
'use strict';
const { Producer } = require('rocketmq-client-nodejs');

const [endpoint, prefix, ak, sk] = process.argv.slice(2);
const COMMIT = 1; // apache.rocketmq.v2.TransactionResolution.COMMIT
const out = (o) => process.stdout.write(JSON.stringify(o) + '\n');
const quiet = { info() {}, debug() {}, warn() {}, error: (...a) => console.error(...a) };

let resolveChecked;
const checked = new Promise((resolve) => { resolveChecked = resolve; });
const SOURCE_SERVER_CHECK = 2;
const checker = {
  async check(view) {
    out({ event: 'check', message_id: view.messageId, keys: view.keys });
    return COMMIT;
  },
};

async function main() {
  const topics = ['Normal', 'Fifo', 'Delay', 'Tx'].map((t) => prefix + t);
  const options = { endpoints: endpoint, namespace: '', topics, checker, requestTimeout: 10000 };
  if (ak) options.sessionCredentials = { accessKey: ak, accessSecret: sk };
  const producer = new Producer(options);
  // done once the answer to a check has reached the server (the client sends it after
  // the checker returns)
  const endTransaction = producer.endTransaction.bind(producer);
  producer.endTransaction = async (...args) => {
    const result = await endTransaction(...args);
    if (args[5] === SOURCE_SERVER_CHECK) resolveChecked();
    return result;
  };
  await producer.startup();
  const msg = (topic, body, key, extra) => ({
    topic, body: Buffer.from(body), tag: 't1', keys: [key],
    properties: new Map([['origin', 'node']]), ...extra,
  });
  for (let i = 0; i < 5; i++) {
    const key = `${prefix}-normal-${i}`;
    const r = await producer.send(msg(prefix + 'Normal', `normal ${i}`, key));
    out({ kind: 'normal', topic: prefix + 'Normal', message_id: r.messageId, key });
  }
  for (let i = 0; i < 8; i++) {
    const key = `${prefix}-fifo-${i}`;
    const group = `group-${i % 2}`;
    const r = await producer.send(msg(prefix + 'Fifo', `fifo ${i}`, key, { messageGroup: group }));
    out({ kind: 'fifo', topic: prefix + 'Fifo', message_id: r.messageId, key, group, seq: i });
  }
  {
    const key = `${prefix}-delay-0`;
    const at = new Date(Date.now() + 3000);
    const r = await producer.send(msg(prefix + 'Delay', 'delay', key, { deliveryTimestamp: at }));
    out({ kind: 'delay', topic: prefix + 'Delay', message_id: r.messageId, key });
  }
  for (const outcome of ['commit', 'rollback', 'check']) {
    const key = `${prefix}-tx-${outcome}`;
    const tx = producer.beginTransaction();
    const r = await producer.send(msg(prefix + 'Tx', `tx ${outcome}`, key), tx);
    if (outcome === 'commit') await tx.commit();
    if (outcome === 'rollback') await tx.rollback();
    out({ kind: 'tx', topic: prefix + 'Tx', message_id: r.messageId, key, outcome,
      transaction_id: r.transactionId });
  }
  const timeout = new Promise((resolve) => setTimeout(() => resolve('timeout'), 60000));
  if ((await Promise.race([checked, timeout])) === 'timeout') out({ event: 'no_check' });
  await producer.shutdown();
  out({ event: 'done' });
  process.exit(0);
}

main().catch((e) => { console.error(e); process.exit(1); });
