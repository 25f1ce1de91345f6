"""logbroker's tooling, kept out of the product wheel: `testing` (broker processes, reference peers, request
fuzzing), `bench` (the benchmark behind `logbroker bench`, load generators) and `client` (the blocking
protocol client tests drive brokers with)."""
