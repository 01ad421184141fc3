package revise.jvm;

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
    JsonBytes.Fields f = JsonBytes.read(bytes, keyField, tsField, split(numericFields), true);
    return f == null ? null : RowFactory.create(f.key, f.ts, f.numbers);
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
}
