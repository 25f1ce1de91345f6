// lbfranzshare: franz-go's share consumer (kgo.ShareGroup) and its admin calls (kadm), as a Go user runs them
// against a broker, for tests/test_share_groups.py. Prints one JSON report on stdout.
//
//	consume -brokers B -group G -topic T -members 2 -n 400   several share consumers of one group join; once
//	                                                         each has partitions, n records are produced over
//	                                                         the topic's partitions and read, each accepted;
//	                                                         counts per member and the acknowledgement errors
//	                                                         the callback saw
//	admin -brokers B -group G -topic T -start 7              AlterShareGroupOffsets (partition 0 to -start),
//	                                                         DescribeShareGroupOffsets, DescribeShareGroups,
//	                                                         DeleteShareGroupOffsets
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if len(os.Args) < 2 {
		fail(fmt.Errorf("usage: lbfranzshare consume|admin [flags]"))
	}
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	brokers := fs.String("brokers", "127.0.0.1:9092", "bootstrap servers")
	group := fs.String("group", "", "share group")
	topic := fs.String("topic", "", "topic")
	members := fs.Int("members", 2, "share consumers (consume)")
	n := fs.Int("n", 400, "records to read (consume)")
	start := fs.Int64("start", 0, "start offset for partition 0 (admin)")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after")
	_ = fs.Parse(os.Args[2:])
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	var report any
	var err error
	switch os.Args[1] {
	case "consume":
		report, err = consume(ctx, strings.Split(*brokers, ","), *group, *topic, *members, *n)
	case "admin":
		report, err = admin(ctx, strings.Split(*brokers, ","), *group, *topic, *start)
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fail(err)
	}
	out, _ := json.Marshal(report)
	fmt.Println(string(out))
}

func fail(err error) {
	out, _ := json.Marshal(map[string]string{"error": err.Error()})
	fmt.Println(string(out))
	os.Exit(1)
}

type consumeReport struct {
	Counts     []int     `json:"counts"`
	Partitions [][]int32 `json:"partitions"` // the partitions each member read records from
	Distinct   int       `json:"distinct"`
	Repeated   int       `json:"repeated"`
	AckErrors  []string  `json:"ack_errors"`
}

func consume(ctx context.Context, brokers []string, group, topic string, members, n int) (any, error) {
	var mu sync.Mutex
	seen := map[string]int{}
	rep := consumeReport{Counts: make([]int, members), Partitions: make([][]int32, members), AckErrors: []string{}}
	from := make([]map[int32]bool, members)
	for i := range from {
		from[i] = map[int32]bool{}
	}
	clients := make([]*kgo.Client, members)
	for i := range clients {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ShareGroup(group), kgo.ConsumeTopics(topic),
			kgo.ShareAckCallback(func(_ *kgo.Client, rs kgo.ShareAckResults) {
				if err := rs.Error(); err != nil {
					mu.Lock()
					rep.AckErrors = append(rep.AckErrors, err.Error())
					mu.Unlock()
				}
			}))
		if err != nil {
			return nil, err
		}
		clients[i] = cl
	}
	done := make(chan struct{})
	var once sync.Once
	var wg sync.WaitGroup
	produced := make(chan struct{})
	for i, cl := range clients {
		wg.Add(1)
		go func(i int, cl *kgo.Client) {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				case <-ctx.Done():
					return
				default:
				}
				pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
				fetches := cl.PollFetches(pctx)
				pcancel()
				fetches.EachRecord(func(r *kgo.Record) {
					if !strings.HasPrefix(string(r.Value), "record-") {
						return
					}
					mu.Lock()
					seen[string(r.Value)]++
					rep.Counts[i]++
					if !from[i][r.Partition] {
						from[i][r.Partition] = true
						rep.Partitions[i] = append(rep.Partitions[i], r.Partition)
					}
					if len(seen) >= n {
						once.Do(func() { close(done) })
					}
					mu.Unlock()
				})
				cl.MarkAcks(kgo.AckAccept)
			}
		}(i, cl)
	}
	go func() {
		defer close(produced)
		if err := produceOnceAssigned(ctx, brokers, group, topic, members, n); err != nil {
			mu.Lock()
			rep.AckErrors = append(rep.AckErrors, "producing: "+err.Error())
			mu.Unlock()
			once.Do(func() { close(done) })
		}
	}()
	wg.Wait()
	<-produced
	for _, cl := range clients {
		fctx, fcancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = cl.FlushAcks(fctx)
		fcancel()
		cl.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	rep.Distinct = len(seen)
	for _, c := range seen {
		rep.Repeated += c - 1
	}
	if len(seen) < n {
		return rep, fmt.Errorf("read %d distinct records of %d before the timeout (counts %v)", len(seen), n, rep.Counts)
	}
	return rep, nil
}

// produceOnceAssigned waits until every member has been given its own partitions (the group describes each
// with some, none twice: so no member still reads them all) and the fetches sent before have ended, then
// produces n records ("record-<i>") over the topic's partitions.
func produceOnceAssigned(ctx context.Context, brokers []string, group, topic string, members, n int) error {
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer adm.Close()
	for {
		groups, err := adm.DescribeShareGroups(ctx, group)
		if err == nil {
			g := groups[group]
			assigned, owners := 0, map[int32]int{}
			for _, m := range g.Members {
				if len(m.Assignment[topic]) > 0 {
					assigned++
				}
				for p := range m.Assignment[topic] {
					owners[p]++
				}
			}
			disjoint := true
			for _, n := range owners {
				disjoint = disjoint && n == 1
			}
			if assigned >= members && disjoint {
				// A share fetch a member sent before it learned its new partitions may still be waiting on
				// the broker for records of all of them: let those end (the share fetch max wait is 500 ms).
				time.Sleep(1500 * time.Millisecond)
				break
			}
		}
		if ctx.Err() != nil {
			return fmt.Errorf("members not all assigned: %v", ctx.Err())
		}
		time.Sleep(200 * time.Millisecond)
	}
	pr, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		return err
	}
	defer pr.Close()
	for i := 0; i < n; i++ {
		pr.Produce(ctx, &kgo.Record{Topic: topic, Value: []byte(fmt.Sprintf("record-%d", i))}, nil)
	}
	return pr.Flush(ctx)
}

type adminReport struct {
	Alter       string `json:"alter"`
	StartOffset int64  `json:"start_offset"`
	Lag         int64  `json:"lag"`
	State       string `json:"state"`
	Delete      string `json:"delete"`
	AfterDelete int    `json:"partitions_after_delete"`
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func admin(ctx context.Context, brokers []string, group, topic string, start int64) (any, error) {
	adm, err := kadm.NewOptClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	var rep adminReport
	var offsets kadm.Offsets
	offsets.AddOffset(topic, 0, start, -1)
	for {
		res, err := adm.AlterShareGroupOffsets(ctx, group, offsets)
		if err == nil {
			err = res.Error()
		}
		rep.Alter = errText(err)
		if err == nil || !strings.Contains(err.Error(), "COORDINATOR_LOAD_IN_PROGRESS") || ctx.Err() != nil {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	described, err := adm.DescribeShareGroupOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	d := described[group]
	if d.Err != nil {
		return nil, d.Err
	}
	o, ok := d.Offsets.Lookup(topic, 0)
	if !ok {
		return nil, fmt.Errorf("no start offset described for %s-0", topic)
	}
	rep.StartOffset, rep.Lag = o.StartOffset, o.Lag
	groups, err := adm.DescribeShareGroups(ctx, group)
	if err != nil {
		return nil, err
	}
	rep.State = groups[group].GroupState
	del, err := adm.DeleteShareGroupOffsets(ctx, group, topic)
	if err == nil {
		err = del.Error()
	}
	rep.Delete = errText(err)
	after, err := adm.DescribeShareGroupOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	rep.AfterDelete = len(after[group].Offsets[topic])
	return rep, nil
}
