"""config/subscriptionGroup.json in fastjson's pretty format, read back as written."""

from rmqstore.formats import subscription_groups as sg

ROCKETMQ_WRITTEN = """{
\t"dataVersion":{
\t\t"counter":1,
\t\t"timestamp":1700000000000
\t},
\t"subscriptionGroupTable":{
\t\t"groupA":{
\t\t\t"brokerId":0,
\t\t\t"consumeBroadcastEnable":true,
\t\t\t"consumeEnable":true,
\t\t\t"consumeFromMinEnable":true,
\t\t\t"groupName":"groupA",
\t\t\t"notifyConsumerIdsChangedEnable":true,
\t\t\t"retryMaxTimes":3,
\t\t\t"retryQueueNums":1,
\t\t\t"whichBrokerWhenConsumeSlowly":1
\t\t}
\t}
}"""


def test_rocketmq_file_reads_and_renders_back_byte_for_byte():
    table = sg.parse(ROCKETMQ_WRITTEN)
    g = table.groups["groupA"]
    assert (g.retry_max_times, g.max_attempts, g.orderly, g.consume_enable) == (3, 4, False, True)
    assert sg.render(table) == ROCKETMQ_WRITTEN


def test_new_group_has_rocketmq_defaults_and_fifo_round_trips():
    table = sg.GroupTable({"f": sg.GroupConfig("f", orderly=True)}, 1, 2)
    text = sg.render(table)
    assert '"consumeMessageOrderly":true' in text and '"retryMaxTimes":16' in text
    back = sg.parse(text).groups["f"]
    assert back.orderly and back.max_attempts == 17
    assert sg.render(sg.parse(text)) == text
