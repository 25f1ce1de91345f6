"""Sans-IO Kafka wire protocol: framing, message codecs, record batches, error codes.

Nothing in this package performs I/O: bytes go in, typed values come out, and back.
"""
