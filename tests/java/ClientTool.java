import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collection;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeReplicaLogDirsResult;
import org.apache.kafka.clients.admin.LogDirDescription;
import org.apache.kafka.clients.admin.ReplicaInfo;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.AcknowledgeType;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.KafkaShareConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionReplica;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.errors.RebalanceInProgressException;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Drives the official Apache Kafka Java client so tests can check logbroker (and the
 * reference peers) against the wire behaviour of the canonical implementation.
 *
 * <p>Data travels as JSON lines, one object per record; byte fields are standard
 * base64 (padded) or null, header keys are plain strings:
 *
 * <pre>
 * produce stdin : {"key":B64|null,"value":B64|null,"headers":[{"key":S,"value":B64|null}],
 *                  "timestamp":MS|null,"partition":INT|null}     (all fields optional)
 * produce stdout: {"topic":S,"partition":INT,"offset":LONG,"timestamp":MS}   (input order)
 * consume stdout: {"topic":S,"partition":INT,"offset":LONG,"timestamp":MS,
 *                  "timestamp_type":"CreateTime"|"LogAppendTime"|..,"leader_epoch":INT|null,
 *                  "key":B64|null,"value":B64|null,"headers":[{"key":S,"value":B64|null}]}
 * </pre>
 *
 * <p>Subcommands (every one accepts repeatable {@code --property k=v} client overrides):
 *
 * <pre>
 * produce  --bootstrap B --topic T [--compression none|gzip|snappy|lz4|zstd] [--acks all|1|0]
 *          [--idempotence true|false] [--linger-ms N] [--count N] [--generate N --value-size S]
 * consume  --bootstrap B --topic T [--partition P|all] [--from-offset earliest|latest|N]
 *          [--count N (-1: until timeout)] [--timeout-ms M]
 * metadata --bootstrap B
 * create-topic --bootstrap B --topic T [--partitions N] [--replication-factor R] [--config k=v]
 * log-dirs --bootstrap B [--topic T --partition P]...   Admin.describeLogDirs of every broker, or
 *          describeReplicaLogDirs of the named partitions; one JSON line (see logDirs)
 * alter-log-dir --bootstrap B --topic T --partition P --path D   Admin.alterReplicaLogDirs on broker
 *          --broker (default 1); prints {"error":null|"ExceptionClass: message"}
 * share-consume --bootstrap B --topic T --group G [--count N] [--timeout-ms M] [--release V]
 *          a KafkaShareConsumer (KIP-932) in explicit acknowledgement mode: prints every record it is
 *          given as {"offset","value","delivery_count"} (value as UTF-8 text) and accepts it, except a
 *          record whose value is V on its first delivery, which it releases; commitSync after each poll;
 *          stops after N records other than "warm-up" ones (exit 3 on timeout)
 * group-consume --bootstrap B --topic T --group G [--strategy range|roundrobin|sticky|cooperative-sticky[,..]]
 *          [--instance-id I] [--session-timeout-ms N] [--heartbeat-interval-ms N]
 *          [--group-protocol classic|consumer] [--auto-offset-reset earliest|latest|none]
 * </pre>
 *
 * <p>The consume subcommand uses assign() plus explicit seeks and never sets group.id, so no group
 * coordinator is involved. Exit codes: 0 ok, 1 client error, 2 usage, 3 fewer records than
 * --count before the timeout (records read so far are still printed). Logging goes to
 * slf4j-nop so stdout stays pure data.
 *
 * <p>group-consume subscribes as a member of consumer group G and runs until stdin says
 * {@code stop} or closes; then it closes the consumer (which leaves the group unless it is a
 * static member). Options it is not given keep the client's defaults. It prints one JSON
 * object per line, each with an "event" and the wall-clock "t" in ms:
 *
 * <pre>
 * {"event":"subscribed"}                              just before subscribe()
 * {"event":"assigned"|"revoked"|"lost","partitions":[P..]}   from the rebalance listener
 *                                                     (cooperative protocols: only the change)
 * {"event":"generation","generation":N,"member_id":S} whenever the group generation changes
 * {"event":"record","partition":P,"offset":O,"value":S}      value as UTF-8 text
 * {"event":"committed","offsets":{"P":NEXT_OFFSET}}    after each successful commitSync()
 * {"event":"commit_failed","error":S}
 * {"event":"closed"}                                  after close() returned
 * </pre>
 *
 * <p>Records are committed synchronously after each processed batch and again when partitions
 * are revoked (at-least-once, no duplicates across a clean rebalance).
 *
 * <p>txn --bootstrap B runs a script of transactional steps read from stdin, one JSON object per
 * line, and prints one result line per step: {"op":S,"ok":true,...} or {"op":S,"ok":false,
 * "error":SimpleClassName,"message":S,"causes":[SimpleClassName..]}. A failed step does not stop
 * the script (the next steps show what the client does after the error). Steps ("name" names a
 * producer or consumer; values are UTF-8 strings; "properties" are client overrides):
 *
 * <pre>
 * {"op":"producer","name":P,"transactional_id":S,"properties":{..}}   create (no init)
 * {"op":"init"|"begin"|"commit"|"abort"|"close","name":P}           the producer's call
 * {"op":"send","name":P,"topic":T,"partition":N,"values":[S..]}        send, flush; -> "offsets":[O..]
 * {"op":"send_offsets","name":P,"offsets":[{"topic":T,"partition":N,"offset":O}],
 *  "consumer":C | "group":G}       sendOffsetsToTransaction with C's groupMetadata() or a bare group id
 * {"op":"consumer","name":C,"group":G,"topic":T,"properties":{..}}  subscribe, poll until assigned;
 *                                  -> "partitions":[N..],"generation":N,"member_id":S
 * {"op":"poll","name":C,"count":N,"timeout_ms":M}     -> "records":[{"partition","offset","value"}]
 * {"op":"sleep","ms":M}
 * </pre>
 */
public final class ClientTool {
    private ClientTool() {}

    public static void main(String[] argv) {
        if (argv.length == 0) {
            usage("missing subcommand");
        }
        Opts opts = Opts.parse(argv, 1);
        int code;
        try {
            switch (argv[0]) {
                case "produce" -> code = produce(opts);
                case "consume" -> code = consume(opts);
                case "metadata" -> code = metadata(opts);
                case "create-topic" -> code = createTopic(opts);
                case "group-consume" -> code = groupConsume(opts);
                case "log-dirs" -> code = logDirs(opts);
                case "alter-log-dir" -> code = alterLogDir(opts);
                case "txn" -> code = txn(opts);
                case "share-consume" -> code = shareConsume(opts);
                default -> {
                    usage("unknown subcommand " + argv[0]);
                    code = 2;
                }
            }
        } catch (Exception e) {
            System.err.println("ClientTool " + argv[0] + " failed: " + e);
            Throwable cause = e.getCause();
            while (cause != null) {
                System.err.println("  caused by: " + cause);
                cause = cause.getCause();
            }
            code = 1;
        }
        System.out.flush();
        System.exit(code);
    }

    private static void usage(String why) {
        System.err.println("ClientTool: " + why
                + "\nusage: ClientTool produce|consume|metadata|create-topic|group-consume|log-dirs|alter-log-dir|txn --bootstrap B ... (see source)");
        System.exit(2);
    }

    // ------------------------------------------------------------------ subcommands

    private static int produce(Opts o) throws Exception {
        String topic = o.required("topic");
        Properties props = o.clientProps();
        props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
        props.put(ProducerConfig.ACKS_CONFIG, o.get("acks", "all"));
        props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, o.get("idempotence", "true"));
        props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, o.get("compression", "none"));
        props.put(ProducerConfig.LINGER_MS_CONFIG, o.get("linger-ms", "5"));
        props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        props.putAll(o.properties);

        List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
        if (o.has("generate")) {
            int n = Integer.parseInt(o.get("generate", "0"));
            int size = Integer.parseInt(o.get("value-size", "16"));
            for (int i = 0; i < n; i++) {
                byte[] value = new byte[size];
                byte[] tag = ("v" + i).getBytes(StandardCharsets.UTF_8);
                for (int j = 0; j < size; j++) {
                    value[j] = tag[j % tag.length];
                }
                records.add(new ProducerRecord<>(topic, null, null,
                        ("k" + i).getBytes(StandardCharsets.UTF_8), value));
            }
        } else {
            long limit = Long.parseLong(o.get("count", "-1"));
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            String line;
            while ((limit < 0 || records.size() < limit) && (line = in.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                records.add(toProducerRecord(topic, Json.parseObject(line)));
            }
        }

        List<Future<RecordMetadata>> futures = new ArrayList<>(records.size());
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(props)) {
            for (ProducerRecord<byte[], byte[]> r : records) {
                futures.add(producer.send(r));
            }
            producer.flush();
            PrintWriter out = stdout();
            for (Future<RecordMetadata> f : futures) {
                RecordMetadata md = f.get(60, TimeUnit.SECONDS);
                Map<String, Object> row = new LinkedHashMap<>();
                row.put("topic", md.topic());
                row.put("partition", md.partition());
                row.put("offset", md.offset());
                row.put("timestamp", md.timestamp());
                out.println(Json.write(row));
            }
            out.flush();
        }
        return 0;
    }

    private static ProducerRecord<byte[], byte[]> toProducerRecord(String topic, Map<String, Object> m) {
        List<Header> headers = new ArrayList<>();
        Object hs = m.get("headers");
        if (hs instanceof List<?> list) {
            for (Object h : list) {
                Map<?, ?> hm = (Map<?, ?>) h;
                headers.add(new RecordHeader((String) hm.get("key"), unb64(hm.get("value"))));
            }
        }
        Integer partition = m.get("partition") == null ? null : ((Number) m.get("partition")).intValue();
        Long ts = m.get("timestamp") == null ? null : ((Number) m.get("timestamp")).longValue();
        return new ProducerRecord<>(topic, partition, ts, unb64(m.get("key")), unb64(m.get("value")), headers);
    }

    private static int consume(Opts o) {
        String topic = o.required("topic");
        String which = o.get("partition", "0");
        long count = Long.parseLong(o.get("count", "-1"));
        long timeoutMs = Long.parseLong(o.get("timeout-ms", "10000"));
        String from = o.get("from-offset", "earliest");

        Properties props = o.clientProps();
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.putAll(o.properties);

        long seen = 0;
        PrintWriter out = stdout();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            List<TopicPartition> tps = new ArrayList<>();
            if (which.equals("all")) {
                for (PartitionInfo pi : consumer.partitionsFor(topic, Duration.ofSeconds(30))) {
                    tps.add(new TopicPartition(topic, pi.partition()));
                }
            } else {
                tps.add(new TopicPartition(topic, Integer.parseInt(which)));
            }
            consumer.assign(tps);
            switch (from) {
                case "earliest" -> consumer.seekToBeginning(tps);
                case "latest" -> consumer.seekToEnd(tps);
                default -> tps.forEach(tp -> consumer.seek(tp, Long.parseLong(from)));
            }
            long deadline = System.currentTimeMillis() + timeoutMs;
            while ((count < 0 || seen < count) && System.currentTimeMillis() < deadline) {
                long wait = Math.max(1, Math.min(500, deadline - System.currentTimeMillis()));
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(wait));
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    if (count >= 0 && seen >= count) {
                        break;
                    }
                    out.println(Json.write(recordRow(r)));
                    seen++;
                }
                out.flush();
            }
        }
        out.flush();
        if (count >= 0 && seen < count) {
            System.err.println("ClientTool consume: got " + seen + " of " + count + " records before timeout");
            return 3;
        }
        return 0;
    }

    private static Map<String, Object> recordRow(ConsumerRecord<byte[], byte[]> r) {
        Map<String, Object> row = new LinkedHashMap<>();
        row.put("topic", r.topic());
        row.put("partition", r.partition());
        row.put("offset", r.offset());
        row.put("timestamp", r.timestamp());
        row.put("timestamp_type", r.timestampType().name);
        row.put("leader_epoch", r.leaderEpoch().orElse(null));
        row.put("key", b64(r.key()));
        row.put("value", b64(r.value()));
        List<Object> headers = new ArrayList<>();
        for (Header h : r.headers()) {
            Map<String, Object> hm = new LinkedHashMap<>();
            hm.put("key", h.key());
            hm.put("value", b64(h.value()));
            headers.add(hm);
        }
        row.put("headers", headers);
        return row;
    }

    private static int metadata(Opts o) throws Exception {
        Properties props = o.clientProps();
        props.putAll(o.properties);
        try (Admin admin = Admin.create(props)) {
            DescribeClusterResult cluster = admin.describeCluster();
            Map<String, Object> row = new LinkedHashMap<>();
            row.put("cluster_id", cluster.clusterId().get(30, TimeUnit.SECONDS));
            Node controller = cluster.controller().get(30, TimeUnit.SECONDS);
            row.put("controller", controller == null ? null : controller.id());
            List<Object> brokers = new ArrayList<>();
            Collection<Node> nodes = cluster.nodes().get(30, TimeUnit.SECONDS);
            for (Node n : nodes) {
                Map<String, Object> b = new LinkedHashMap<>();
                b.put("id", n.id());
                b.put("host", n.host());
                b.put("port", n.port());
                b.put("rack", n.rack());
                brokers.add(b);
            }
            row.put("brokers", brokers);
            List<Object> topics = new ArrayList<>(admin.listTopics().names().get(30, TimeUnit.SECONDS));
            row.put("topics", topics);
            PrintWriter out = stdout();
            out.println(Json.write(row));
            out.flush();
        }
        return 0;
    }

    private static int createTopic(Opts o) throws Exception {
        Properties props = o.clientProps();
        props.putAll(o.properties);
        int partitions = Integer.parseInt(o.get("partitions", "1"));
        short rf = Short.parseShort(o.get("replication-factor", "1"));
        Map<String, String> configs = new HashMap<>();
        for (String kv : o.all("config")) {
            int eq = kv.indexOf('=');
            configs.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        try (Admin admin = Admin.create(props)) {
            NewTopic topic = new NewTopic(o.required("topic"), partitions, rf).configs(configs);
            admin.createTopics(List.of(topic)).all().get(60, TimeUnit.SECONDS);
        }
        return 0;
    }

    /**
     * {"brokers":{"ID":{"DIR":{"error":null|S,"total_bytes":N|null,"usable_bytes":N|null,
     * "replicas":[{"topic":S,"partition":P,"size":N,"offset_lag":N,"is_future":B}]}}}}; with
     * --topic/--partition pairs: {"replicas":[{"topic","partition","dir","offset_lag","future_dir"}]}.
     */
    private static int logDirs(Opts o) throws Exception {
        Properties props = o.clientProps();
        props.putAll(o.properties);
        Map<String, Object> row = new LinkedHashMap<>();
        try (Admin admin = Admin.create(props)) {
            List<String> topics = o.all("topic");
            List<String> partitions = o.all("partition");
            if (!topics.isEmpty()) {
                int broker = Integer.parseInt(o.get("broker", "1"));
                List<TopicPartitionReplica> replicas = new ArrayList<>();
                for (int i = 0; i < topics.size(); i++) {
                    replicas.add(new TopicPartitionReplica(topics.get(i), Integer.parseInt(partitions.get(i)), broker));
                }
                List<Object> out = new ArrayList<>();
                Map<TopicPartitionReplica, DescribeReplicaLogDirsResult.ReplicaLogDirInfo> found =
                        admin.describeReplicaLogDirs(replicas).all().get(30, TimeUnit.SECONDS);
                for (TopicPartitionReplica r : replicas) {
                    DescribeReplicaLogDirsResult.ReplicaLogDirInfo info = found.get(r);
                    Map<String, Object> m = new LinkedHashMap<>();
                    m.put("topic", r.topic());
                    m.put("partition", r.partition());
                    m.put("dir", info.getCurrentReplicaLogDir());
                    m.put("offset_lag", info.getCurrentReplicaOffsetLag());
                    m.put("future_dir", info.getFutureReplicaLogDir());
                    out.add(m);
                }
                row.put("replicas", out);
            } else {
                List<Integer> ids = new ArrayList<>();
                for (Node n : admin.describeCluster().nodes().get(30, TimeUnit.SECONDS)) {
                    ids.add(n.id());
                }
                Map<String, Object> brokers = new TreeMap<>();
                Map<Integer, Map<String, LogDirDescription>> all =
                        admin.describeLogDirs(ids).allDescriptions().get(30, TimeUnit.SECONDS);
                for (Map.Entry<Integer, Map<String, LogDirDescription>> b : all.entrySet()) {
                    Map<String, Object> dirs = new TreeMap<>();
                    for (Map.Entry<String, LogDirDescription> d : b.getValue().entrySet()) {
                        LogDirDescription desc = d.getValue();
                        Map<String, Object> dir = new LinkedHashMap<>();
                        dir.put("error", desc.error() == null ? null : desc.error().getClass().getSimpleName());
                        dir.put("total_bytes", desc.totalBytes().isPresent() ? desc.totalBytes().getAsLong() : null);
                        dir.put("usable_bytes", desc.usableBytes().isPresent() ? desc.usableBytes().getAsLong() : null);
                        List<Object> replicas = new ArrayList<>();
                        for (Map.Entry<TopicPartition, ReplicaInfo> r : desc.replicaInfos().entrySet()) {
                            Map<String, Object> m = new LinkedHashMap<>();
                            m.put("topic", r.getKey().topic());
                            m.put("partition", r.getKey().partition());
                            m.put("size", r.getValue().size());
                            m.put("offset_lag", r.getValue().offsetLag());
                            m.put("is_future", r.getValue().isFuture());
                            replicas.add(m);
                        }
                        dir.put("replicas", replicas);
                        dirs.put(d.getKey(), dir);
                    }
                    brokers.put(String.valueOf(b.getKey()), dirs);
                }
                row.put("brokers", brokers);
            }
        }
        PrintWriter out = stdout();
        out.println(Json.write(row));
        out.flush();
        return 0;
    }

    private static int alterLogDir(Opts o) throws Exception {
        Properties props = o.clientProps();
        props.putAll(o.properties);
        TopicPartitionReplica replica = new TopicPartitionReplica(
                o.required("topic"), Integer.parseInt(o.required("partition")), Integer.parseInt(o.get("broker", "1")));
        Map<String, Object> row = new LinkedHashMap<>();
        try (Admin admin = Admin.create(props)) {
            try {
                admin.alterReplicaLogDirs(Map.of(replica, o.required("path"))).all().get(30, TimeUnit.SECONDS);
                row.put("error", null);
            } catch (java.util.concurrent.ExecutionException e) {
                row.put("error", e.getCause().getClass().getSimpleName() + ": " + e.getCause().getMessage());
            }
        }
        PrintWriter out = stdout();
        out.println(Json.write(row));
        out.flush();
        return 0;
    }

    private static final Map<String, String> ASSIGNORS = Map.of(
            "range", "org.apache.kafka.clients.consumer.RangeAssignor",
            "roundrobin", "org.apache.kafka.clients.consumer.RoundRobinAssignor",
            "sticky", "org.apache.kafka.clients.consumer.StickyAssignor",
            "cooperative-sticky", "org.apache.kafka.clients.consumer.CooperativeStickyAssignor");

    private static int shareConsume(Opts o) {
        String topic = o.required("topic");
        long count = Long.parseLong(o.get("count", "-1"));
        long timeoutMs = Long.parseLong(o.get("timeout-ms", "60000"));
        String release = o.get("release", null);
        Properties props = o.clientProps();
        props.put(ConsumerConfig.GROUP_ID_CONFIG, o.required("group"));
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put("share.acknowledgement.mode", "explicit");
        props.putAll(o.properties);
        long seen = 0;
        PrintWriter out = stdout();
        try (KafkaShareConsumer<byte[], byte[]> consumer = new KafkaShareConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + timeoutMs;
            while ((count < 0 || seen < count) && System.currentTimeMillis() < deadline) {
                ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(500));
                for (ConsumerRecord<byte[], byte[]> r : batch) {
                    String value = r.value() == null ? null : new String(r.value(), StandardCharsets.UTF_8);
                    Map<String, Object> row = new LinkedHashMap<>();
                    row.put("offset", r.offset());
                    row.put("value", value);
                    row.put("delivery_count", r.deliveryCount().map(Integer::valueOf).orElse(null));
                    out.println(Json.write(row));
                    boolean again = value != null && value.equals(release) && r.deliveryCount().orElse((short) 1) == 1;
                    consumer.acknowledge(r, again ? AcknowledgeType.RELEASE : AcknowledgeType.ACCEPT);
                    if (!"warm-up".equals(value) && !again) {
                        seen++;
                    }
                }
                out.flush();
                if (!batch.isEmpty()) {
                    consumer.commitSync();
                }
            }
        }
        out.flush();
        if (count >= 0 && seen < count) {
            System.err.println("ClientTool share-consume: got " + seen + " of " + count + " records before timeout");
            return 3;
        }
        return 0;
    }

    private static int groupConsume(Opts o) {
        String topic = o.required("topic");
        Properties props = o.clientProps();
        props.put(ConsumerConfig.GROUP_ID_CONFIG, o.required("group"));
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, o.get("auto-offset-reset", "earliest"));
        if (o.has("group-protocol")) {
            props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, o.get("group-protocol", "classic"));
        }
        if (o.has("strategy")) {
            List<String> classes = new ArrayList<>();
            for (String name : o.get("strategy", "").split(",")) {
                String cls = ASSIGNORS.get(name.trim());
                if (cls == null) {
                    usage("unknown --strategy " + name);
                }
                classes.add(cls);
            }
            props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG, String.join(",", classes));
        }
        if (o.has("instance-id")) {
            props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, o.get("instance-id", null));
        }
        if (o.has("session-timeout-ms")) {
            props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG, o.get("session-timeout-ms", null));
        }
        if (o.has("heartbeat-interval-ms")) {
            props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG, o.get("heartbeat-interval-ms", null));
        }
        props.putAll(o.properties);

        PrintWriter out = stdout();
        AtomicBoolean running = new AtomicBoolean(true);
        // Offsets processed but not yet committed; touched only by the polling thread.
        Map<TopicPartition, OffsetAndMetadata> pending = new HashMap<>();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            Thread stdin = new Thread(() -> {
                try (BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
                    String line;
                    while ((line = in.readLine()) != null && !line.trim().equals("stop")) {
                        // only "stop" (or the end of input) means anything
                    }
                } catch (Exception e) {
                    // a broken stdin counts as its end
                }
                running.set(false);
                consumer.wakeup();
            }, "stdin-stop");
            stdin.setDaemon(true);
            stdin.start();

            ConsumerRebalanceListener listener = new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                    commit(consumer, pending, out);
                    pending.keySet().removeAll(partitions);
                    partitionsEvent(out, "revoked", partitions);
                }

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    partitionsEvent(out, "assigned", partitions);
                }

                @Override
                public void onPartitionsLost(Collection<TopicPartition> partitions) {
                    pending.keySet().removeAll(partitions);
                    partitionsEvent(out, "lost", partitions);
                }
            };
            emit(out, row("subscribed"));
            consumer.subscribe(List.of(topic), listener);
            int generation = -1;
            try {
                while (running.get()) {
                    ConsumerRecords<byte[], byte[]> batch = consumer.poll(Duration.ofMillis(200));
                    ConsumerGroupMetadata gm = consumer.groupMetadata();
                    if (gm.generationId() != generation) {
                        generation = gm.generationId();
                        Map<String, Object> g = row("generation");
                        g.put("generation", generation);
                        g.put("member_id", gm.memberId());
                        emit(out, g);
                    }
                    for (ConsumerRecord<byte[], byte[]> r : batch) {
                        Map<String, Object> rec = row("record");
                        rec.put("partition", r.partition());
                        rec.put("offset", r.offset());
                        rec.put("value", r.value() == null ? null : new String(r.value(), StandardCharsets.UTF_8));
                        out.println(Json.write(rec));
                        pending.put(new TopicPartition(r.topic(), r.partition()), new OffsetAndMetadata(r.offset() + 1));
                    }
                    out.flush();
                    commit(consumer, pending, out);
                }
            } catch (WakeupException e) {
                // stop requested
            }
            commit(consumer, pending, out);
        }
        emit(out, row("closed"));
        return 0;
    }

    private static void commit(KafkaConsumer<byte[], byte[]> consumer, Map<TopicPartition, OffsetAndMetadata> pending,
                               PrintWriter out) {
        if (pending.isEmpty()) {
            return;
        }
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>(pending);
        try {
            try {
                consumer.commitSync(offsets);
            } catch (WakeupException e) {
                // The stop request's wakeup() landed inside this commit, not in poll(): a wakeup is
                // one-shot, so the retry runs to completion and the stop is still seen by the loop.
                consumer.commitSync(offsets);
            }
        } catch (CommitFailedException | RebalanceInProgressException | WakeupException e) {
            Map<String, Object> f = row("commit_failed");
            f.put("error", e.toString());
            emit(out, f);
            return;
        }
        pending.keySet().removeAll(offsets.keySet());
        Map<String, Object> done = new TreeMap<>();
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
            done.put(String.valueOf(e.getKey().partition()), e.getValue().offset());
        }
        Map<String, Object> c = row("committed");
        c.put("offsets", done);
        emit(out, c);
    }

    // ------------------------------------------------------------------ txn

    /** Records a txn "consumer" step polled while waiting for its assignment, handed out by the next "poll". */
    private static final Map<KafkaConsumer<byte[], byte[]>, List<ConsumerRecord<byte[], byte[]>>> UNREAD =
            new HashMap<>();

    private static int txn(Opts o) throws Exception {
        Map<String, KafkaProducer<byte[], byte[]>> producers = new HashMap<>();
        Map<String, KafkaConsumer<byte[], byte[]>> consumers = new HashMap<>();
        PrintWriter out = stdout();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        try {
            String line;
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                Map<String, Object> step = Json.parseObject(line);
                String op = (String) step.get("op");
                Map<String, Object> result = new LinkedHashMap<>();
                result.put("op", op);
                try {
                    txnStep(o, step, producers, consumers, result);
                    result.put("ok", true);
                } catch (Exception e) {
                    result.put("ok", false);
                    result.put("error", e.getClass().getSimpleName());
                    result.put("message", String.valueOf(e.getMessage()));
                    List<Object> causes = new ArrayList<>();
                    for (Throwable c = e.getCause(); c != null; c = c.getCause()) {
                        causes.add(c.getClass().getSimpleName());
                    }
                    result.put("causes", causes);
                }
                emit(out, result);
            }
        } finally {
            for (KafkaProducer<byte[], byte[]> p : producers.values()) {
                p.close(Duration.ofSeconds(5));
            }
            for (KafkaConsumer<byte[], byte[]> c : consumers.values()) {
                c.close(Duration.ofSeconds(5));
            }
        }
        return 0;
    }

    @SuppressWarnings("unchecked")
    private static void txnStep(Opts o, Map<String, Object> step, Map<String, KafkaProducer<byte[], byte[]>> producers,
                                Map<String, KafkaConsumer<byte[], byte[]>> consumers, Map<String, Object> result)
            throws Exception {
        String op = (String) step.get("op");
        String name = (String) step.get("name");
        Map<String, Object> overrides = (Map<String, Object>) step.getOrDefault("properties", Map.of());
        switch (op) {
            case "producer" -> {
                Properties props = o.clientProps();
                props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
                props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, ByteArraySerializer.class.getName());
                props.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, step.get("transactional_id"));
                props.put(ProducerConfig.CLIENT_ID_CONFIG, "clienttool-" + name);
                props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
                props.putAll(o.properties);
                overrides.forEach((k, v) -> props.put(k, String.valueOf(v)));
                producers.put(name, new KafkaProducer<>(props));
            }
            case "init" -> producers.get(name).initTransactions();
            case "begin" -> producers.get(name).beginTransaction();
            case "commit" -> producers.get(name).commitTransaction();
            case "abort" -> producers.get(name).abortTransaction();
            case "close" -> producers.remove(name).close(Duration.ofSeconds(5));
            case "send" -> {
                KafkaProducer<byte[], byte[]> p = producers.get(name);
                List<Future<RecordMetadata>> futures = new ArrayList<>();
                Integer partition = step.get("partition") == null ? null : ((Number) step.get("partition")).intValue();
                for (Object v : (List<Object>) step.get("values")) {
                    futures.add(p.send(new ProducerRecord<>((String) step.get("topic"), partition, null,
                            ((String) v).getBytes(StandardCharsets.UTF_8))));
                }
                p.flush();
                List<Object> offsets = new ArrayList<>();
                for (Future<RecordMetadata> f : futures) {
                    offsets.add(f.get(60, TimeUnit.SECONDS).offset());
                }
                result.put("offsets", offsets);
            }
            case "send_offsets" -> {
                Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
                for (Object x : (List<Object>) step.get("offsets")) {
                    Map<String, Object> m = (Map<String, Object>) x;
                    offsets.put(new TopicPartition((String) m.get("topic"), ((Number) m.get("partition")).intValue()),
                            new OffsetAndMetadata(((Number) m.get("offset")).longValue()));
                }
                ConsumerGroupMetadata gm = step.containsKey("consumer")
                        ? consumers.get((String) step.get("consumer")).groupMetadata()
                        : new ConsumerGroupMetadata((String) step.get("group"));
                producers.get(name).sendOffsetsToTransaction(offsets, gm);
            }
            case "consumer" -> {
                Properties props = o.clientProps();
                props.put(ConsumerConfig.GROUP_ID_CONFIG, step.get("group"));
                props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
                props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
                props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
                props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
                props.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
                props.putAll(o.properties);
                overrides.forEach((k, v) -> props.put(k, String.valueOf(v)));
                KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(props);
                consumers.put(name, c);
                c.subscribe(List.of((String) step.get("topic")));
                long deadline = System.currentTimeMillis() + 30_000;
                List<ConsumerRecord<byte[], byte[]>> early = new ArrayList<>();
                while (c.assignment().isEmpty() && System.currentTimeMillis() < deadline) {
                    c.poll(Duration.ofMillis(100)).forEach(early::add);  // kept for the next poll step
                }
                UNREAD.put(c, early);
                TreeSet<Integer> parts = new TreeSet<>();
                for (TopicPartition tp : c.assignment()) {
                    parts.add(tp.partition());
                }
                result.put("partitions", new ArrayList<Object>(parts));
                result.put("generation", c.groupMetadata().generationId());
                result.put("member_id", c.groupMetadata().memberId());
            }
            case "poll" -> {
                KafkaConsumer<byte[], byte[]> c = consumers.get(name);
                long count = ((Number) step.getOrDefault("count", -1)).longValue();
                long deadline = System.currentTimeMillis() + ((Number) step.getOrDefault("timeout_ms", 10000)).longValue();
                List<Object> records = new ArrayList<>();
                List<ConsumerRecord<byte[], byte[]>> batch = UNREAD.getOrDefault(c, new ArrayList<>());
                UNREAD.remove(c);
                while ((count < 0 || records.size() < count) && System.currentTimeMillis() < deadline) {
                    if (batch.isEmpty()) {
                        c.poll(Duration.ofMillis(100)).forEach(batch::add);
                    }
                    for (ConsumerRecord<byte[], byte[]> r : batch) {
                        Map<String, Object> m = new LinkedHashMap<>();
                        m.put("partition", r.partition());
                        m.put("offset", r.offset());
                        m.put("value", r.value() == null ? null : new String(r.value(), StandardCharsets.UTF_8));
                        records.add(m);
                    }
                    batch.clear();
                }
                result.put("records", records);
            }
            case "sleep" -> Thread.sleep(((Number) step.get("ms")).longValue());
            default -> throw new IllegalArgumentException("unknown txn op " + op);
        }
    }

    private static Map<String, Object> row(String event) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("event", event);
        m.put("t", System.currentTimeMillis());
        return m;
    }

    private static void partitionsEvent(PrintWriter out, String event, Collection<TopicPartition> partitions) {
        TreeSet<Integer> sorted = new TreeSet<>();
        for (TopicPartition tp : partitions) {
            sorted.add(tp.partition());
        }
        Map<String, Object> m = row(event);
        m.put("partitions", new ArrayList<Object>(sorted));
        emit(out, m);
    }

    private static void emit(PrintWriter out, Map<String, Object> m) {
        out.println(Json.write(m));
        out.flush();
    }

    // ------------------------------------------------------------------ helpers

    private static PrintWriter stdout() {
        return new PrintWriter(new BufferedWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8)));
    }

    private static String b64(byte[] data) {
        return data == null ? null : Base64.getEncoder().encodeToString(data);
    }

    private static byte[] unb64(Object text) {
        return text == null ? null : Base64.getDecoder().decode((String) text);
    }

    /** {@code --name value} options; --property and --config may repeat. */
    private static final class Opts {
        final Map<String, List<String>> values = new HashMap<>();
        final Properties properties = new Properties();

        static Opts parse(String[] argv, int start) {
            Opts o = new Opts();
            for (int i = start; i < argv.length; i += 2) {
                String name = argv[i];
                if (!name.startsWith("--") || i + 1 >= argv.length) {
                    usage("expected --name value, got " + name);
                }
                String value = argv[i + 1];
                name = name.substring(2);
                if (name.equals("property")) {
                    int eq = value.indexOf('=');
                    if (eq <= 0) {
                        usage("--property needs key=value, got " + value);
                    }
                    o.properties.put(value.substring(0, eq), value.substring(eq + 1));
                } else {
                    o.values.computeIfAbsent(name, k -> new ArrayList<>()).add(value);
                }
            }
            return o;
        }

        boolean has(String name) {
            return values.containsKey(name);
        }

        String get(String name, String dflt) {
            List<String> v = values.get(name);
            return v == null ? dflt : v.get(v.size() - 1);
        }

        List<String> all(String name) {
            return values.getOrDefault(name, List.of());
        }

        String required(String name) {
            String v = get(name, null);
            if (v == null) {
                usage("missing --" + name);
            }
            return v;
        }

        Properties clientProps() {
            Properties p = new Properties();
            p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, required("bootstrap"));
            p.put(AdminClientConfig.CLIENT_ID_CONFIG, "logbroker-clienttool");
            return p;
        }
    }

    /**
     * Just enough JSON for the line formats above: objects, arrays, strings, integers,
     * decimals, booleans and null. Written here to keep the tool dependency-free.
     */
    static final class Json {
        private final String s;
        private int i;

        private Json(String s) {
            this.s = s;
        }

        @SuppressWarnings("unchecked")
        static Map<String, Object> parseObject(String text) {
            Json p = new Json(text);
            Object v = p.value();
            p.ws();
            if (p.i != p.s.length() || !(v instanceof Map)) {
                throw new IllegalArgumentException("expected one JSON object per line: " + text);
            }
            return (Map<String, Object>) v;
        }

        private void ws() {
            while (i < s.length() && Character.isWhitespace(s.charAt(i))) {
                i++;
            }
        }

        private IllegalArgumentException err(String what) {
            return new IllegalArgumentException("bad JSON at " + i + ": " + what + " in " + s);
        }

        private Object value() {
            ws();
            if (i >= s.length()) {
                throw err("unexpected end");
            }
            char c = s.charAt(i);
            switch (c) {
                case '{':
                    return object();
                case '[':
                    return array();
                case '"':
                    return string();
                default:
                    if (s.startsWith("null", i)) {
                        i += 4;
                        return null;
                    }
                    if (s.startsWith("true", i)) {
                        i += 4;
                        return Boolean.TRUE;
                    }
                    if (s.startsWith("false", i)) {
                        i += 5;
                        return Boolean.FALSE;
                    }
                    return number();
            }
        }

        private Map<String, Object> object() {
            Map<String, Object> m = new LinkedHashMap<>();
            i++;
            ws();
            if (i < s.length() && s.charAt(i) == '}') {
                i++;
                return m;
            }
            while (true) {
                ws();
                if (i >= s.length() || s.charAt(i) != '"') {
                    throw err("expected key");
                }
                String k = string();
                ws();
                expect(':');
                m.put(k, value());
                ws();
                if (i < s.length() && s.charAt(i) == ',') {
                    i++;
                    continue;
                }
                expect('}');
                return m;
            }
        }

        private List<Object> array() {
            List<Object> l = new ArrayList<>();
            i++;
            ws();
            if (i < s.length() && s.charAt(i) == ']') {
                i++;
                return l;
            }
            while (true) {
                l.add(value());
                ws();
                if (i < s.length() && s.charAt(i) == ',') {
                    i++;
                    continue;
                }
                expect(']');
                return l;
            }
        }

        private void expect(char c) {
            if (i >= s.length() || s.charAt(i) != c) {
                throw err("expected '" + c + "'");
            }
            i++;
        }

        private String string() {
            StringBuilder b = new StringBuilder();
            i++;
            while (true) {
                if (i >= s.length()) {
                    throw err("unterminated string");
                }
                char c = s.charAt(i++);
                if (c == '"') {
                    return b.toString();
                }
                if (c != '\\') {
                    b.append(c);
                    continue;
                }
                if (i >= s.length()) {
                    throw err("bad escape");
                }
                char e = s.charAt(i++);
                switch (e) {
                    case '"', '\\', '/' -> b.append(e);
                    case 'b' -> b.append('\b');
                    case 'f' -> b.append('\f');
                    case 'n' -> b.append('\n');
                    case 'r' -> b.append('\r');
                    case 't' -> b.append('\t');
                    case 'u' -> {
                        if (i + 4 > s.length()) {
                            throw err("bad \\u escape");
                        }
                        b.append((char) Integer.parseInt(s.substring(i, i + 4), 16));
                        i += 4;
                    }
                    default -> throw err("bad escape \\" + e);
                }
            }
        }

        private Number number() {
            int start = i;
            while (i < s.length() && "+-0123456789.eE".indexOf(s.charAt(i)) >= 0) {
                i++;
            }
            String t = s.substring(start, i);
            if (t.isEmpty()) {
                throw err("unexpected character");
            }
            if (t.contains(".") || t.contains("e") || t.contains("E")) {
                return Double.parseDouble(t);
            }
            return Long.parseLong(t);
        }

        static String write(Object v) {
            StringBuilder b = new StringBuilder();
            write(b, v);
            return b.toString();
        }

        private static void write(StringBuilder b, Object v) {
            if (v == null) {
                b.append("null");
            } else if (v instanceof String str) {
                quote(b, str);
            } else if (v instanceof Number || v instanceof Boolean) {
                b.append(v);
            } else if (v instanceof Map<?, ?> m) {
                b.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : m.entrySet()) {
                    if (!first) {
                        b.append(',');
                    }
                    first = false;
                    quote(b, String.valueOf(e.getKey()));
                    b.append(':');
                    write(b, e.getValue());
                }
                b.append('}');
            } else if (v instanceof List<?> l) {
                b.append('[');
                for (int k = 0; k < l.size(); k++) {
                    if (k > 0) {
                        b.append(',');
                    }
                    write(b, l.get(k));
                }
                b.append(']');
            } else {
                quote(b, v.toString());
            }
        }

        private static void quote(StringBuilder b, String str) {
            b.append('"');
            for (int k = 0; k < str.length(); k++) {
                char c = str.charAt(k);
                switch (c) {
                    case '"' -> b.append("\\\"");
                    case '\\' -> b.append("\\\\");
                    case '\n' -> b.append("\\n");
                    case '\r' -> b.append("\\r");
                    case '\t' -> b.append("\\t");
                    default -> {
                        if (c < 0x20) {
                            b.append(String.format("\\u%04x", (int) c));
                        } else {
                            b.append(c);
                        }
                    }
                }
            }
            b.append('"');
        }
    }
}
