// Apache Avro's own verdicts for the registry's reference test: reads one JSON object per
// line, {"old": <schema>, "new": <schema>}, and prints one per line:
// {"old": null | "<why invalid>", "new": ..., "backward": bool | null, "forward": bool | null}
// backward: the new schema reads data written with the old; forward: the old reads the new.
// A schema Avro refuses to parse gives null verdicts; an exception while checking is false.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import org.apache.avro.Schema;
import org.apache.avro.SchemaCompatibility;
import org.apache.avro.SchemaCompatibility.SchemaCompatibilityType;

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

  private static boolean readable(Schema reader, Schema writer) {
    try {
      return SchemaCompatibility.checkReaderWriterCompatibility(reader, writer).getType()
          == SchemaCompatibilityType.COMPATIBLE;
    } catch (Exception | StackOverflowError error) {
      return false;
    }
  }
}
