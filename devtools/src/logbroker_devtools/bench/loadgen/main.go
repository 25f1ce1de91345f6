// Command lbload is logbroker bench's native load generator for the workloads where one JVM per
// client would be too heavy: many producers and many connections. Each client is its own franz-go
// kgo.Client, so its own connections. It connects every client first (one acks=all record each),
// prints a "connected" line and waits for a line on stdin (the harness samples the broker's memory
// and sockets meanwhile), then produces and prints one JSON result line.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
)

// requestCounter counts produce requests as they leave, so the harness can divide broker CPU by them.
type requestCounter struct{ produce atomic.Int64 }

func (c *requestCounter) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == 0 && err == nil {
		c.produce.Add(1)
	}
}

type result struct {
	Phase           string  `json:"phase"`
	Clients         int     `json:"clients"`
	Records         int64   `json:"records"`
	Bytes           int64   `json:"bytes"`
	Seconds         float64 `json:"seconds"`
	ConnectSeconds  float64 `json:"connect_seconds"`
	PrimeSeconds    float64 `json:"prime_seconds"`
	ProduceRequests int64   `json:"produce_requests"`
	Errors          int64   `json:"errors"`
	FirstError      string  `json:"first_error,omitempty"`
}

func emit(r result) {
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}

func main() {
	bootstrap := flag.String("bootstrap", "127.0.0.1:9092", "broker host:port")
	topic := flag.String("topic", "bench", "topic to produce to; a comma list spreads records over several")
	clients := flag.Int("clients", 1, "independent clients (each with its own connections)")
	records := flag.Int64("records", 100000, "records to produce in total, spread over the clients")
	size := flag.Int("size", 1024, "record value bytes")
	lingerMs := flag.Int("linger-ms", 5, "producer linger")
	batchBytes := flag.Int("batch-bytes", 1000000, "max bytes of one partition's batch")
	roundRobin := flag.Bool("round-robin", false, "spread records over partitions one by one (else sticky)")
	wait := flag.Bool("wait", false, "after connecting, wait for a line on stdin before producing")
	partitions := flag.Int("partitions", 0, "before connecting the clients, write one record to each partition of each topic")
	maxVersion := flag.String("max-version", "", "cap request versions at this Kafka release (e.g. 3.7)")
	timeout := flag.Duration("timeout", 10*time.Minute, "give up after this long")
	compression := flag.String("compression", "none", "producer codec: none, gzip, snappy, lz4, zstd")
	payload := flag.String("payload", "x", "record values: x (one repeated byte) or text (log-like lines that compress as logs do)")
	flag.Parse()
	codec, ok := codecs[*compression]
	if !ok {
		fmt.Fprintln(os.Stderr, "bad -compression", *compression)
		os.Exit(2)
	}

	topics := strings.Split(*topic, ",")
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	counter := &requestCounter{}
	opts := []kgo.Opt{
		kgo.SeedBrokers(*bootstrap),
		kgo.DefaultProduceTopic(topics[0]),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DisableIdempotentWrite(), // no InitProducerId per client: the connections are the load
		kgo.ProducerLinger(time.Duration(*lingerMs) * time.Millisecond),
		kgo.ProducerBatchMaxBytes(int32(*batchBytes)),
		kgo.ProducerBatchCompression(codec),
		kgo.MaxBufferedRecords(1 << 16),
		kgo.MaxBufferedBytes(32 << 20),
		// Requests of at most 2 MiB, as a Java producer's max.request.size would give: franz-go's
		// default (100 MiB) lets one in-flight request grow to every buffered batch of every partition.
		kgo.BrokerMaxWriteBytes(2 << 20),
		kgo.WithHooks(counter),
		// A partition a broker names before it serves it is retried soon, not after the default 5 s.
		kgo.MetadataMinAge(200 * time.Millisecond),
	}
	if *maxVersion != "" {
		versions := kversion.FromString(*maxVersion)
		if versions == nil {
			fmt.Fprintln(os.Stderr, "bad -max-version", *maxVersion)
			os.Exit(2)
		}
		opts = append(opts, kgo.MaxVersions(versions))
	}
	if *roundRobin {
		opts = append(opts, kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	}
	values, err := makeValues(*payload, *size)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	value := values[0]
	var errs atomic.Int64
	var firstErr atomic.Value
	fail := func(err error) {
		if errs.Add(1) == 1 {
			firstErr.Store(err.Error())
		}
	}

	var prime float64
	if *partitions > 0 {
		primeStart := time.Now()
		// Every partition takes a record before the clock starts: a new topic's partitions may still
		// be opening (Kafka creates their logs after it names their leader).
		primer, err := kgo.NewClient(append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
		if err != nil {
			fmt.Fprintln(os.Stderr, "primer:", err)
			os.Exit(2)
		}
		batch := make([]*kgo.Record, 0, *partitions*len(topics))
		for _, t := range topics {
			for p := range *partitions {
				batch = append(batch, &kgo.Record{Topic: t, Value: value, Partition: int32(p)})
			}
		}
		if err := primer.ProduceSync(ctx, batch...).FirstErr(); err != nil {
			emit(result{Phase: "failed", Clients: *clients, Errors: 1, FirstError: "priming: " + err.Error()})
			os.Exit(1)
		}
		primer.Close()
		prime = time.Since(primeStart).Seconds()
	}

	all := make([]*kgo.Client, *clients)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range all {
		cl, err := kgo.NewClient(append(opts, kgo.ClientID(fmt.Sprintf("lbload-%d", i)))...)
		if err != nil {
			fmt.Fprintln(os.Stderr, "client:", err)
			os.Exit(2)
		}
		all[i] = cl
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cl.ProduceSync(ctx, &kgo.Record{Value: value}).FirstErr(); err != nil {
				fail(err)
			}
		}()
	}
	wg.Wait()
	connect := time.Since(start).Seconds()
	if errs.Load() > 0 {
		emit(result{Phase: "failed", Clients: *clients, Errors: errs.Load(), FirstError: firstErr.Load().(string)})
		os.Exit(1)
	}
	emit(result{Phase: "connected", Clients: *clients, ConnectSeconds: connect, PrimeSeconds: prime})
	if *wait {
		_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	}

	base := counter.produce.Load()
	per := *records / int64(*clients)
	start = time.Now()
	for _, cl := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := int64(0); n < per; n++ {
				cl.Produce(ctx, &kgo.Record{Topic: topics[n%int64(len(topics))], Value: values[n%int64(len(values))]}, func(_ *kgo.Record, err error) {
					if err != nil {
						fail(err)
					}
				})
			}
			if err := cl.Flush(ctx); err != nil {
				fail(err)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	r := result{
		Phase: "done", Clients: *clients, Records: per * int64(*clients), Bytes: per * int64(*clients) * int64(*size),
		Seconds: elapsed, ConnectSeconds: connect, PrimeSeconds: prime, ProduceRequests: counter.produce.Load() - base, Errors: errs.Load(),
	}
	if r.Errors > 0 {
		r.FirstError = firstErr.Load().(string)
	}
	for _, cl := range all {
		cl.Close()
	}
	emit(r)
	if r.Errors > 0 {
		os.Exit(1)
	}
}

var codecs = map[string]kgo.CompressionCodec{
	"none": kgo.NoCompression(), "gzip": kgo.GzipCompression(), "snappy": kgo.SnappyCompression(),
	"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(),
}

// makeValues gives the record values: one value of 'x' bytes, or 512 distinct log-like values (a fixed
// seed, so every run and every broker get the same bytes) that compress about as application logs do.
func makeValues(kind string, size int) ([][]byte, error) {
	switch kind {
	case "x":
		v := make([]byte, size)
		for i := range v {
			v[i] = 'x'
		}
		return [][]byte{v}, nil
	case "text":
		rng := rand.New(rand.NewSource(42))
		words := []string{"GET", "POST", "user", "order", "payment", "ok", "error", "timeout", "shipped",
			"cart", "session", "retry", "cache", "miss", "hit", "db", "query", "latency_ms", "region", "eu-west"}
		out := make([][]byte, 512)
		for i := range out {
			v := make([]byte, 0, size+64)
			for len(v) < size {
				v = fmt.Appendf(v, `{"ts":%d,"level":"%s","msg":"%s %s","id":%d,"v":%d} `,
					1700000000000+rng.Int63n(1e9), words[rng.Intn(len(words))], words[rng.Intn(len(words))],
					words[rng.Intn(len(words))], rng.Int63n(1e12), rng.Intn(100000))
			}
			out[i] = v[:size]
		}
		return out, nil
	}
	return nil, fmt.Errorf("bad -payload %q (x or text)", kind)
}
