"""Tooling for tests and benchmarks: never imported by product code (``tests/test_layers.py`` checks).

* :mod:`logbroker_devtools.testing.process`: ``BrokerProcess``, ``logbroker serve`` as a child process
  (kill -9, restarts on the same data dir);
* :mod:`logbroker_devtools.testing.peers`: reference Kafka-protocol peers to compare against: Apache Kafka
  (KRaft, from the jars ``.ci/fetch-jars`` resolves), Tansu and the Java client's ``ClientTool``;
* :mod:`logbroker_devtools.testing.net`: free loopback ports.

Java and jar discovery, which the Spark face needs too, is product code: :mod:`logbroker.jars`.
"""
