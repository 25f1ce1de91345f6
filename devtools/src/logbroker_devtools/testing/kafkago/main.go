// A kafka-go (github.com/segmentio/kafka-go) client as a new user writes one: a Writer produces n records,
// then a Reader in a consumer group fetches them and commits synchronously after every record
// (CommitMessages). Prints one JSON line: the time of the produce and of the fetch-and-commit loop.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	kafka "github.com/segmentio/kafka-go"
)

type report struct {
	Records        int     `json:"records"`
	ProduceSeconds float64 `json:"produce_seconds"`
	CommitSeconds  float64 `json:"commit_seconds"`
	Committed      int64   `json:"committed"`
	Error          string  `json:"error,omitempty"`
}

func fail(r report, err error) {
	r.Error = err.Error()
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
	os.Exit(1)
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap")
	topic := flag.String("topic", "kafkago", "topic (one partition, created beforehand)")
	group := flag.String("group", "kafkago-group", "consumer group")
	n := flag.Int("n", 10000, "records")
	timeout := flag.Duration("timeout", 300*time.Second, "overall limit")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	r := report{Records: *n}

	w := &kafka.Writer{Addr: kafka.TCP(*brokers), Topic: *topic, RequiredAcks: kafka.RequireAll,
		BatchSize: 1000, BatchTimeout: 5 * time.Millisecond}
	msgs := make([]kafka.Message, *n)
	for i := range msgs {
		msgs[i] = kafka.Message{Value: []byte(fmt.Sprintf("record-%08d", i))}
	}
	start := time.Now()
	if err := w.WriteMessages(ctx, msgs...); err != nil {
		fail(r, fmt.Errorf("produce: %w", err))
	}
	r.ProduceSeconds = time.Since(start).Seconds()
	_ = w.Close()

	reader := kafka.NewReader(kafka.ReaderConfig{Brokers: []string{*brokers}, GroupID: *group, Topic: *topic,
		StartOffset: kafka.FirstOffset, MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond})
	defer reader.Close()
	var first time.Time
	for i := 0; i < *n; i++ {
		m, err := reader.FetchMessage(ctx)
		if err != nil {
			fail(r, fmt.Errorf("fetch %d: %w", i, err))
		}
		if i == 0 {
			first = time.Now() // the group joined and the first record arrived: commits are timed from here
		}
		if err := reader.CommitMessages(ctx, m); err != nil {
			fail(r, fmt.Errorf("commit %d: %w", i, err))
		}
		r.Committed = m.Offset + 1
	}
	r.CommitSeconds = time.Since(first).Seconds()
	out, _ := json.Marshal(r)
	fmt.Println(string(out))
}
