import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;
import java.io.FileReader;
import java.io.Reader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Debezium's embedded engine, each record produced to Kafka as a Debezium user would wire it:
 * JSON without schemas, to the record's own topic (one per table), acks=all.
 *
 * <p>Delivery is at least once: a batch's offsets are marked processed only after Kafka
 * acknowledged every record of it, and the engine stores offsets every
 * offset.flush.interval.ms; a crash re-sends what came after the last stored offset.
 *
 * <p>Usage: {@code java DebeziumToKafka ENGINE_PROPERTIES BOOTSTRAP}. Prints "started" once
 * the connector's task runs, and stops cleanly on SIGTERM.
 */
public final class DebeziumToKafka {
    public static void main(String[] args) throws Exception {
        Properties config = new Properties();
        try (Reader in = new FileReader(args[0], StandardCharsets.UTF_8)) {
            config.load(in);
        }
        Properties producerConfig = new Properties();
        producerConfig.put("bootstrap.servers", args[1]);
        producerConfig.put("acks", "all");
        producerConfig.put("enable.idempotence", "true");
        producerConfig.put("linger.ms", "5");
        KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(producerConfig, new ByteArraySerializer(), new ByteArraySerializer());
        CountDownLatch done = new CountDownLatch(1);
        DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
                .using(config)
                .using(new DebeziumEngine.ConnectorCallback() {
                    @Override
                    public void taskStarted() {
                        System.out.println("started");
                        System.out.flush();
                    }
                })
                .using((success, message, error) -> {
                    if (!success) {
                        System.err.println("engine stopped: " + message);
                        if (error != null) {
                            error.printStackTrace();
                        }
                    }
                    done.countDown();
                })
                .notifying((records, committer) -> {
                    List<Future<RecordMetadata>> sent = new ArrayList<>(records.size());
                    for (ChangeEvent<String, String> record : records) {
                        sent.add(producer.send(new ProducerRecord<>(
                                record.destination(), bytes(record.key()), bytes(record.value()))));
                    }
                    try {
                        for (Future<RecordMetadata> each : sent) {
                            each.get();
                        }
                    } catch (Exception e) {
                        throw new RuntimeException("Kafka did not take a batch", e);
                    }
                    for (ChangeEvent<String, String> record : records) {
                        committer.markProcessed(record);
                    }
                    committer.markBatchFinished();
                })
                .build();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        executor.execute(engine);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            try {
                engine.close();
                done.await();
            } catch (Exception e) {
                e.printStackTrace();
            }
            producer.close();
        }));
        done.await();
        executor.shutdown();
    }

    private static byte[] bytes(String text) {
        return text == null ? null : text.getBytes(StandardCharsets.UTF_8);
    }
}
