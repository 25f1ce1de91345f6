// lbsarama: sarama (IBM/sarama) as an old client, for tests of the protocol before Kafka 0.11.
//
//	lbsarama -brokers HOST:PORT -version 0.9.0.0 -topic T -group G -n 1000 [-compression gzip]
//
// Produces n keyed messages (key-i, value-i) with a SyncProducer, then consumes them in consumer group G
// from the oldest offset, marks and commits the last one, and prints one JSON line: what was produced
// (partition and offset of each), what was consumed, and the group's committed offset read back.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

type record struct {
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Key       string `json:"key"`
	Value     string `json:"value"`
}

type result struct {
	Produced  []record `json:"produced"`
	Consumed  []record `json:"consumed"`
	Committed int64    `json:"committed"`
	Error     string   `json:"error,omitempty"`
}

type handler struct {
	want int
	mu   sync.Mutex
	got  []record
	done chan struct{}
	once sync.Once
}

func (h *handler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h *handler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h *handler) ConsumeClaim(s sarama.ConsumerGroupSession, c sarama.ConsumerGroupClaim) error {
	for m := range c.Messages() {
		h.mu.Lock()
		h.got = append(h.got, record{m.Partition, m.Offset, string(m.Key), string(m.Value)})
		n := len(h.got)
		h.mu.Unlock()
		s.MarkMessage(m, "")
		if n >= h.want {
			s.Commit()
			h.once.Do(func() { close(h.done) })
			return nil
		}
	}
	return nil
}

func fail(res *result, err error) {
	res.Error = err.Error()
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
	os.Exit(1)
}

func main() {
	brokers := flag.String("brokers", "127.0.0.1:9092", "bootstrap broker")
	version := flag.String("version", "0.9.0.0", "Kafka version sarama speaks")
	topic := flag.String("topic", "", "topic")
	group := flag.String("group", "", "consumer group")
	n := flag.Int("n", 1000, "messages")
	compression := flag.String("compression", "none", "none, gzip, snappy or lz4")
	timeout := flag.Duration("timeout", 60*time.Second, "overall limit")
	flag.Parse()
	res := &result{Committed: -1}

	v, err := sarama.ParseKafkaVersion(*version)
	if err != nil {
		fail(res, err)
	}
	cfg := sarama.NewConfig()
	cfg.Version = v
	cfg.ClientID = "lbsarama"
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewHashPartitioner
	switch *compression {
	case "gzip":
		cfg.Producer.Compression = sarama.CompressionGZIP
	case "snappy":
		cfg.Producer.Compression = sarama.CompressionSnappy
	case "lz4":
		cfg.Producer.Compression = sarama.CompressionLZ4
	}
	cfg.Consumer.Offsets.Initial = sarama.OffsetOldest
	cfg.Consumer.Offsets.AutoCommit.Enable = false

	producer, err := sarama.NewSyncProducer([]string{*brokers}, cfg)
	if err != nil {
		fail(res, fmt.Errorf("producer: %w", err))
	}
	for i := 0; i < *n; i++ {
		p, o, err := producer.SendMessage(&sarama.ProducerMessage{
			Topic: *topic, Key: sarama.StringEncoder(fmt.Sprintf("key-%d", i)),
			Value: sarama.StringEncoder(fmt.Sprintf("value-%d", i)),
		})
		if err != nil {
			fail(res, fmt.Errorf("send %d: %w", i, err))
		}
		res.Produced = append(res.Produced, record{p, o, fmt.Sprintf("key-%d", i), fmt.Sprintf("value-%d", i)})
	}
	producer.Close()

	if v.IsAtLeast(sarama.V0_10_2_0) {
		res.Consumed = consumeInGroup(res, cfg, *brokers, *topic, *group, *n, *timeout)
	} else {
		// sarama joins groups only from 0.10.2 on: older versions read the partition and commit through an
		// offset manager, as clients of those brokers did.
		res.Consumed = consumeAndCommit(res, cfg, *brokers, *topic, *group, *n, *timeout)
	}

	res.Committed = committed(res, cfg, *brokers, *topic, *group)
	out, _ := json.Marshal(res)
	fmt.Println(string(out))
}

func consumeInGroup(res *result, cfg *sarama.Config, brokers, topic, group string, n int,
	timeout time.Duration) []record {
	cg, err := sarama.NewConsumerGroup([]string{brokers}, group, cfg)
	if err != nil {
		fail(res, fmt.Errorf("consumer group: %w", err))
	}
	h := &handler{want: n, done: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			if err := cg.Consume(ctx, []string{topic}, h); err != nil {
				return
			}
			select {
			case <-h.done:
				return
			default:
			}
		}
	}()
	select {
	case <-h.done:
	case <-ctx.Done():
		fail(res, fmt.Errorf("consumed %d of %d in the group before the timeout", len(h.got), n))
	}
	cancel()
	cg.Close()
	return h.got
}

func consumeAndCommit(res *result, cfg *sarama.Config, brokers, topic, group string, n int,
	timeout time.Duration) []record {
	client, err := sarama.NewClient([]string{brokers}, cfg)
	if err != nil {
		fail(res, fmt.Errorf("client: %w", err))
	}
	defer client.Close()
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		fail(res, fmt.Errorf("consumer: %w", err))
	}
	pc, err := consumer.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		fail(res, fmt.Errorf("consume partition: %w", err))
	}
	var got []record
	deadline := time.After(timeout)
	for len(got) < n {
		select {
		case m := <-pc.Messages():
			got = append(got, record{m.Partition, m.Offset, string(m.Key), string(m.Value)})
		case e := <-pc.Errors():
			fail(res, fmt.Errorf("consume: %w", e))
		case <-deadline:
			fail(res, fmt.Errorf("consumed %d of %d before the timeout", len(got), n))
		}
	}
	pc.Close()
	consumer.Close()
	om, err := sarama.NewOffsetManagerFromClient(group, client)
	if err != nil {
		fail(res, fmt.Errorf("offset manager: %w", err))
	}
	pom, err := om.ManagePartition(topic, 0)
	if err != nil {
		fail(res, fmt.Errorf("manage partition: %w", err))
	}
	pom.MarkOffset(got[len(got)-1].Offset+1, "")
	om.Commit()
	pom.AsyncClose()
	om.Close()
	return got
}

// committed reads the group's offset of partition 0 back with OffsetFetch v1, as these clients do.
func committed(res *result, cfg *sarama.Config, brokers, topic, group string) int64 {
	client, err := sarama.NewClient([]string{brokers}, cfg)
	if err != nil {
		fail(res, fmt.Errorf("client: %w", err))
	}
	defer client.Close()
	coord, err := client.Coordinator(group)
	if err != nil {
		fail(res, fmt.Errorf("coordinator: %w", err))
	}
	req := &sarama.OffsetFetchRequest{Version: 1, ConsumerGroup: group}
	req.AddPartition(topic, 0)
	resp, err := coord.FetchOffset(req)
	if err != nil {
		fail(res, fmt.Errorf("offset fetch: %w", err))
	}
	block := resp.GetBlock(topic, 0)
	if block == nil {
		fail(res, fmt.Errorf("offset fetch: no answer for %s-0", topic))
	}
	if block.Err != sarama.ErrNoError {
		fail(res, fmt.Errorf("offset fetch: %w", block.Err))
	}
	return block.Offset
}
