'use strict';
// ali-ons 3.12's push consumer (clustering) of TOPIC in GROUP through the name server NAMESRV,
// from the first offset when the group has none (FROM: LAST, from the last). One JSON line per event on stdout:
// {event: "ready"}, {event: "queues", queues: [ids]} whenever its share of TOPIC's queues
// changes, {event: "received", body, msgId, queueId, queueOffset, reconsumeTimes, retryTopic,
// originMessageId, failed}. It runs until its stdin closes, then closes the consumer (offsets
// committed) and exits 0.
// FAIL: the listener throws for a message with this body (the client sends it back:
// CONSUMER_SEND_MSG_BACK); MAX: the consumer's maxReconsumeTimes (ali-ons' default 16).
// usage: node ali_ons_consumer.js NAMESRV TOPIC GROUP [FROM [FAIL [MAX]]]
// ALI_ONS_ACCESS_KEY / ALI_ONS_SECRET_KEY (environment): the credentials every request is
// signed with (RocketMQ's ACL signature; 'unused' by default)
const httpclient = require('urllib');
const { Consumer } = require('ali-ons');

const [nameSrv, topic, group, from, fail, max] = process.argv.slice(2);
const out = obj => process.stdout.write(JSON.stringify(obj) + '\n');

(async () => {
  const consumer = new Consumer({
    httpclient,
    nameSrv,
    consumerGroup: group,
    accessKeyId: process.env.ALI_ONS_ACCESS_KEY || 'unused',
    accessKeySecret: process.env.ALI_ONS_SECRET_KEY || 'unused',
    consumeFromWhere: from === 'LAST' ? 'CONSUME_FROM_LAST_OFFSET' : 'CONSUME_FROM_FIRST_OFFSET',
    rebalanceInterval: 2000,
    maxReconsumeTimes: max ? Number(max) : 16,
  });
  consumer.subscribe(topic, '*', async msg => {
    const body = msg.body.toString();
    const failed = Boolean(fail) && body === fail;
    out({
      event: 'received', body, msgId: msg.msgId, queueId: msg.queueId,
      queueOffset: msg.queueOffset, reconsumeTimes: msg.reconsumeTimes,
      retryTopic: msg.retryTopic || '', originMessageId: msg.originMessageId || '', failed,
    });
    if (failed) {
      throw new Error(`the listener fails ${body} (on purpose)`);
    }
  });
  consumer.on('error', err => process.stderr.write(`consumer error: ${err && err.stack}\n`));
  await consumer.ready();
  out({ event: 'ready' });
  let shown = '';
  const timer = setInterval(() => {
    const queues = [];
    for (const pq of consumer.processQueueTable.values()) {
      if (pq.messageQueue.topic === topic && !pq.processQueue.dropped) {
        queues.push(pq.messageQueue.queueId);
      }
    }
    queues.sort();
    const text = JSON.stringify(queues);
    if (text !== shown) {
      shown = text;
      out({ event: 'queues', queues });
    }
  }, 200);
  process.stdin.resume();
  process.stdin.on('end', async () => {
    clearInterval(timer);
    await consumer.close();
    out({ event: 'closed' });
    process.exit(0);
  });
})().catch(err => {
  process.stderr.write((err && err.stack) || String(err));
  process.exit(1);
});
