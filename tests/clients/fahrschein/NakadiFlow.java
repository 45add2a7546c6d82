import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.zalando.fahrschein.NakadiClient;
import org.zalando.fahrschein.NoBackoffStrategy;
import org.zalando.fahrschein.StreamParameters;
import org.zalando.fahrschein.domain.Subscription;
import org.zalando.fahrschein.http.api.ContentEncoding;
import org.zalando.fahrschein.http.simple.SimpleRequestFactory;

/**
 * A Nakadi application as its authors would write it with fahrschein, one step per run:
 *
 * <pre>
 * create  URL TYPE BODY_FILE        the event type, through the JDK's HttpClient (Upgrade: h2c)
 * publish URL TYPE FROM COUNT       events FROM..FROM+COUNT-1, zstd-compressed
 * consume URL TYPE GROUP LIMIT      subscribe from the beginning (fahrschein sends initial_cursors: []),
 *                                   stream LIMIT events, commit each batch, print each order number
 * </pre>
 */
public final class NakadiFlow {
    public static void main(String[] args) throws Exception {
        URI base = URI.create(args[1]);
        String type = args[2];
        switch (args[0]) {
            case "create" -> create(base, Files.readString(Path.of(args[3])));
            case "publish" -> publish(base, type, Integer.parseInt(args[3]), Integer.parseInt(args[4]));
            case "consume" -> consume(base, type, args[3], Integer.parseInt(args[4]));
            default -> throw new IllegalArgumentException(args[0]);
        }
    }

    private static void create(URI base, String body) throws Exception {
        // HttpClient's default version is HTTP/2: on plain http it asks for Upgrade: h2c.
        HttpClient http = HttpClient.newHttpClient();
        HttpRequest request = HttpRequest.newBuilder(base.resolve("/event-types"))
                .header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(body))
                .build();
        HttpResponse<String> response = http.send(request, HttpResponse.BodyHandlers.ofString());
        System.out.println("created " + response.statusCode() + " " + response.version());
        if (response.statusCode() != 201) {
            throw new IllegalStateException(response.body());
        }
    }

    private static NakadiClient client(URI base, ContentEncoding encoding) {
        return NakadiClient.builder(base, new SimpleRequestFactory(encoding)).build();
    }

    private static void publish(URI base, String type, int from, int count) throws IOException {
        List<Map<String, Object>> events = new ArrayList<>();
        for (int i = from; i < from + count; i++) {
            events.add(Map.of(
                    "order_number", String.valueOf(i),
                    "metadata", Map.of("eid", UUID.randomUUID().toString(),
                            "occurred_at", "2026-11-23T10:00:00Z")));
        }
        client(base, ContentEncoding.ZSTD).publish(type, events);
        System.out.println("published " + count);
    }

    @SuppressWarnings({"rawtypes", "unchecked"})
    private static void consume(URI base, String type, String group, int limit) throws IOException {
        NakadiClient client = client(base, ContentEncoding.IDENTITY);
        Subscription subscription = client.subscription("fahrschein-flow", type)
                .withConsumerGroup(group)
                .readFromBegin()
                .subscribe();
        System.out.println("subscription " + subscription.getId());
        StreamParameters parameters = new StreamParameters()
                .withBatchLimit(4)
                .withMaxUncommittedEvents(2)
                .withStreamLimit(limit)
                .withBatchFlushTimeout(1);
        try {
            client.stream(subscription)
                    .withStreamParameters(parameters)
                    // The stream ends after LIMIT events: end the run there instead of reconnecting.
                    .withBackoffStrategy(new NoBackoffStrategy())
                    .listen(Map.class, batch -> {
                        System.out.println("batch " + batch.size());
                        for (Object event : batch) {
                            System.out.println("event " + ((Map) event).get("order_number"));
                        }
                    });
        } catch (IOException end) {
            System.out.println("stream ended: " + end);
        }
    }
}
