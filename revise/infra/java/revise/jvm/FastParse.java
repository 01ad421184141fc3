package revise.jvm;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF5;

/**
 * The accepted path of {@code revise/spark/parse.py} (the plain input spec: key, ts, value),
 * as a Spark UDF.
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
    JsonBytes.Fields f =
        JsonBytes.read(bytes, keyField, tsField, new String[] {valueField}, valueRequired);
    return f == null ? null : RowFactory.create(f.key, f.ts, f.numbers[0]);
  }
}
