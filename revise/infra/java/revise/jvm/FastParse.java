package revise.jvm;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF5;

/**
 * The accepted path of {@code revise/spark/parse.py} (today's options), as a Spark UDF.
 *
 * <p>{@code revise_fast_parse(value, keyField, tsField, valueField, valueRequired)} returns the
 * struct {@code (key string, ts bigint, value double)} of a Kafka record value that the SQL
 * parse surely accepts, with the fields that parse would give, and NULL for anything else
 * ({@link JsonBytes} has the rules). The key is a JSON string as Jackson decodes it; the value,
 * when not required, may be absent (0.0) but is otherwise such a number.
 */
public final class FastParse implements UDF5<byte[], String, String, String, Boolean, Row> {
  private static final long serialVersionUID = 1L;

  @Override
  public Row call(byte[] bytes, String keyField, String tsField, String valueField,
      Boolean valueRequired) {
    if (bytes == null || !JsonBytes.plain(bytes)) {
      return null;
    }
    try (JsonParser p = JsonBytes.FACTORY.createParser(bytes)) {
      return fields(p, keyField, tsField, valueField, valueRequired);
    } catch (JsonProcessingException e) {
      return null;
    } catch (IOException e) {
      return null;
    }
  }

  private static Row fields(JsonParser p, String keyField, String tsField, String valueField,
      boolean valueRequired) throws IOException {
    if (p.nextToken() != JsonToken.START_OBJECT) {
      return null;
    }
    String key = null;
    long ts = -1;
    double value = 0.0;
    boolean sawValue = false;
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
      } else if (name.equals(valueField)) {
        Double v = JsonBytes.number(p, vt);
        if (v == null) {
          return null;
        }
        value = v;
        sawValue = true;
      } else {
        p.skipChildren();
      }
    }
    if (t != JsonToken.END_OBJECT || key == null || ts < 0 || (valueRequired && !sawValue)) {
      return null;
    }
    return RowFactory.create(key, ts, value);
  }
}
