'use strict';
// ali-ons 3.12 (a RocketMQ 4.x client in pure JavaScript) sends COUNT messages with keys and a
// tag to TOPIC through the name server NAMESRV, one at a time; prints one JSON line per send
// ({key, msgId, queueId, queueOffset, status}) and exits 0, or prints the error and exits 1.
// usage: node ali_ons_producer.js NAMESRV TOPIC COUNT [GROUP [SHARED_KEY]]
// SHARED_KEY: every message also carries that key (a key query then matches them all)
// ALI_ONS_ACCESS_KEY / ALI_ONS_SECRET_KEY (environment): the credentials every request is
// signed with (RocketMQ's ACL signature; ali-ons always signs, with 'unused' by default)
const httpclient = require('urllib');
const { Producer, Message } = require('ali-ons');

const [nameSrv, topic, countText, group, sharedKey] = process.argv.slice(2);
const count = Number(countText || '1');

(async () => {
  const producer = new Producer({
    httpclient,
    nameSrv,
    producerGroup: group || 'PG_ALI_ONS',
    accessKeyId: process.env.ALI_ONS_ACCESS_KEY || 'unused',
    accessKeySecret: process.env.ALI_ONS_SECRET_KEY || 'unused',
    persistent: false,
  });
  await producer.ready();
  for (let i = 0; i < count; i++) {
    const key = `ak-${i}`;
    const msg = new Message(topic, 'TagA', `ali-ons message ${i}`);
    msg.keys = sharedKey ? [key, sharedKey] : [key];
    const result = await producer.send(msg);
    const q = result.messageQueue;
    console.log(JSON.stringify({
      key, msgId: result.msgId, queueId: q.queueId, queueOffset: result.queueOffset,
      status: result.sendStatus,
    }));
  }
  await producer.close();
  process.exit(0);
})().catch(err => {
  console.error(err && err.stack || String(err));
  process.exit(1);
});
