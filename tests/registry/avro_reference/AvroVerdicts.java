// Apache Avro's own verdicts for the registry's reference test: reads one JSON object per
// line, {"old": <schema>, "new": <schema>, "examples": [{"writer": "old" | "new", "datum": ..}]},
// and prints one per line:
// {"old": null | "<why invalid>", "new": ..., "backward": bool | null, "forward": bool | null,
//  "examples": [{"written": bool, "read": bool, "error": "<why>"}]}
// backward: the new schema reads data written with the old; forward: the old reads the new.
// A schema Avro refuses to parse gives null verdicts; an exception while checking is false.
// Each example datum (Avro's JSON encoding) is decoded with the writer's schema ("written":
// Avro's JSON decoder takes it), encoded in binary, and read back with the writer's and the
// other schema as reader ("read": Avro's resolving decoder took it, so it shows nothing).

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import org.apache.avro.Schema;
import org.apache.avro.SchemaCompatibility;
import org.apache.avro.SchemaCompatibility.SchemaCompatibilityType;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;

public final class AvroVerdicts {
  private static final ObjectMapper JSON = new ObjectMapper();

  public static void main(String[] args) throws Exception {
    BufferedReader in =
        new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
    PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
    for (String line = in.readLine(); line != null; line = in.readLine()) {
      if (line.isBlank()) {
        continue;
      }
      JsonNode pair = JSON.readTree(line);
      ObjectNode verdict = JSON.createObjectNode();
      Schema old = parse(pair.get("old"), "old", verdict);
      Schema updated = parse(pair.get("new"), "new", verdict);
      if (old != null && updated != null) {
        verdict.put("backward", readable(updated, old));
        verdict.put("forward", readable(old, updated));
      } else {
        verdict.putNull("backward");
        verdict.putNull("forward");
      }
      ArrayNode checked = verdict.putArray("examples");
      JsonNode examples = pair.get("examples");
      if (examples != null && old != null && updated != null) {
        for (JsonNode example : examples) {
          boolean oldWrites = "old".equals(example.get("writer").asText());
          checked.add(
              check(oldWrites ? old : updated, oldWrites ? updated : old, example.get("datum")));
        }
      }
      out.println(JSON.writeValueAsString(verdict));
    }
    out.flush();
  }

  private static Schema parse(JsonNode schema, String key, ObjectNode verdict) {
    try {
      Schema parsed = new Schema.Parser().parse(JSON.writeValueAsString(schema));
      verdict.putNull(key);
      return parsed;
    } catch (Exception | StackOverflowError error) {
      verdict.put(key, String.valueOf(error.getMessage()));
      return null;
    }
  }

  private static ObjectNode check(Schema writer, Schema reader, JsonNode datum) {
    ObjectNode result = JSON.createObjectNode();
    Object value;
    try {
      String text = JSON.writeValueAsString(datum);
      value =
          new GenericDatumReader<Object>(writer)
              .read(null, DecoderFactory.get().jsonDecoder(writer, text));
      result.put("written", true);
    } catch (Exception | StackOverflowError error) {
      result.put("written", false);
      result.put("error", String.valueOf(error));
      result.put("read", false);
      return result;
    }
    try {
      ByteArrayOutputStream bytes = new ByteArrayOutputStream();
      BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(bytes, null);
      new GenericDatumWriter<Object>(writer).write(value, encoder);
      encoder.flush();
      new GenericDatumReader<Object>(writer, reader)
          .read(null, DecoderFactory.get().binaryDecoder(bytes.toByteArray(), null));
      result.put("read", true);
    } catch (Exception | StackOverflowError error) {
      result.put("read", false);
      result.put("error", String.valueOf(error));
    }
    return result;
  }

  private static boolean readable(Schema reader, Schema writer) {
    try {
      return SchemaCompatibility.checkReaderWriterCompatibility(reader, writer).getType()
          == SchemaCompatibilityType.COMPATIBLE;
    } catch (Exception | StackOverflowError error) {
      return false;
    }
  }
}
