"""Message schemas kafka-python 3.x does not ship, declared in Kafka's JSON message-spec format.

Loaded through kafka-python's `load_json` hook so they get the same generated codecs as every other
message. Field names, types and versions follow the Apache Kafka protocol (KIP-848 consumer groups, KIP-932
share groups): the wire layout only.
"""
