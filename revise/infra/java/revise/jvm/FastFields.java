package revise.jvm;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF4;

/**
 * The accepted path of {@code revise/spark/fields.py} for top-level fields, as a Spark UDF.
 *
 * <p>{@code revise_fast_fields(value, keyField, tsField, numericFields)} returns the struct
 * {@code (key string, ts bigint, values array<double>)} of a Kafka record value that the SQL
 * parse surely accepts, and NULL for anything else ({@link JsonBytes} has the rules): one key
 * field holding a JSON string, an epoch-ms event time, and every numeric field (their names
 * joined by NUL characters, in order; none for an empty text) a finite number, in
 * {@code values} in the same order. Grouped keys, nested paths, other time formats and distinct
 * fields are the SQL parse's alone.
 */
public final class FastFields implements UDF4<byte[], String, String, String, Row> {
  private static final long serialVersionUID = 1L;
  private static final String[] NONE = new String[0];
  /** The last joined names and their split, one immutable pair (threads may share this UDF). */
  private transient volatile Object[] names;

  @Override
  public Row call(byte[] bytes, String keyField, String tsField, String numericFields) {
    if (bytes == null || !JsonBytes.plain(bytes)) {
      return null;
    }
    try (JsonParser p = JsonBytes.FACTORY.createParser(bytes)) {
      return fields(p, keyField, tsField, split(numericFields));
    } catch (JsonProcessingException e) {
      return null;
    } catch (IOException e) {
      return null;
    }
  }

  private String[] split(String joined) {
    Object[] last = names;
    if (last != null && last[0].equals(joined)) {
      return (String[]) last[1];
    }
    String[] split = joined.isEmpty() ? NONE : joined.split("\u0000", -1);
    names = new Object[] {joined, split};
    return split;
  }

  private static Row fields(JsonParser p, String keyField, String tsField, String[] numeric)
      throws IOException {
    if (p.nextToken() != JsonToken.START_OBJECT) {
      return null;
    }
    String key = null;
    long ts = -1;
    double[] values = new double[numeric.length];
    int seen = 0; // duplicate names are refused by the parser, so each counts once
    JsonToken t;
    while ((t = p.nextToken()) == JsonToken.FIELD_NAME) {
      String name = p.currentName();
      JsonToken vt = p.nextToken();
      if (name.equals(keyField)) {
        if (vt != JsonToken.VALUE_STRING) {
          return null;
        }
        key = p.getText();
      } else if (name.equals(tsField)) {
        ts = JsonBytes.epochMs(p, vt);
        if (ts < 0) {
          return null;
        }
      } else {
        int i = indexOf(numeric, name);
        if (i >= 0) {
          Double v = JsonBytes.number(p, vt);
          if (v == null) {
            return null;
          }
          values[i] = v;
          seen++;
        } else {
          p.skipChildren();
        }
      }
    }
    if (t != JsonToken.END_OBJECT || key == null || ts < 0 || seen != numeric.length) {
      return null;
    }
    return RowFactory.create(key, ts, values);
  }

  private static int indexOf(String[] names, String name) {
    for (int i = 0; i < names.length; i++) {
      if (names[i].equals(name)) {
        return i;
      }
    }
    return -1;
  }
}
