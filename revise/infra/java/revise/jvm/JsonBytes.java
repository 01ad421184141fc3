package revise.jvm;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.StreamReadFeature;
import java.io.IOException;

/**
 * What the accepted-path UDFs ({@link FastParse}, {@link FastFields}) share: the tests on a Kafka
 * value's bytes, the parser, and the reads of an event time and of a number as revise's SQL parse
 * ({@code revise/spark/parse.py}, {@code fields.py}) would give them. Every method answers
 * "surely accepted, and this is the value" or "not sure" (false, -1, null); "not sure" sends the
 * record to the SQL parse, which alone names reasons. The SQL parse runs Spark 4.2's
 * {@code VariantBuilder} ({@code try_parse_json}) on the value decoded as UTF-8 text:
 *
 * <ul>
 *   <li>The bytes: at most 1 MiB (a variant has a size limit), no NUL byte (Jackson would read
 *       zero bytes as UTF-16 or UTF-32), first byte '{' or JSON white space (Jackson skips a
 *       byte-order mark, Spark's text keeps it), well-formed UTF-8 (Spark decodes malformed
 *       bytes to U+FFFD, Jackson otherwise), and no escaped surrogate {@code \}{@code uD800}..
 *       {@code \}{@code uDFFF} anywhere (Spark refuses a lone one in any string or name; a pair
 *       goes to the SQL parse too).
 *   <li>The document: one JSON object read by Jackson with Spark's defaults, and duplicate names
 *       refused at every level, as Spark refuses them; what follows the object is not read
 *       (Spark does not read it either).
 *   <li>An epoch-ms event time: an integer token of at most 64 bits in [0, 2^53).
 *   <li>A number: an integer of at most 64 bits, as the nearest double; or a decimal fraction of
 *       at most 38 digits (Spark keeps a DECIMAL, which has no negative zero); or a number with
 *       an exponent (Spark keeps a DOUBLE); finite. Either way the double nearest the text,
 *       which is what the SQL parse's cast of the field's JSON text gives.
 * </ul>
 */
final class JsonBytes {
  /** Jackson's defaults, as Spark's parse uses them, and duplicate names refused. */
  static final JsonFactory FACTORY =
      JsonFactory.builder().enable(StreamReadFeature.STRICT_DUPLICATE_DETECTION).build();
  private static final long MAX_TS = 1L << 53;
  private static final int MAX_BYTES = 1 << 20;
  private static final int MAX_DECIMAL_DIGITS = 38;

  private JsonBytes() {}

  /** The fields of a record surely accepted. */
  static final class Fields {
    final String key;
    final long ts;
    final double[] numbers;

    Fields(String key, long ts, double[] numbers) {
      this.key = key;
      this.ts = ts;
      this.numbers = numbers;
    }
  }

  /**
   * The key (a JSON string), epoch-ms time and numbers of a Kafka value the SQL parse surely
   * accepts, or null when not sure. A numeric field absent is 0.0 when {@code allNumbers} is
   * false; any numeric field present must be such a number.
   */
  static Fields read(byte[] bytes, String keyField, String tsField, String[] numeric,
      boolean allNumbers) {
    if (bytes == null || !plain(bytes)) {
      return null;
    }
    try (JsonParser p = FACTORY.createParser(bytes)) {
      return fields(p, keyField, tsField, numeric, allNumbers);
    } catch (IOException | RuntimeException e) {
      // Invalid JSON, a Jackson limit, anything unforeseen: not sure. This path is only ever
      // a shortcut, so it must not fail a task where the SQL parse would give a reason.
      return null;
    }
  }

  private static Fields fields(JsonParser p, String keyField, String tsField, String[] numeric,
      boolean allNumbers) throws IOException {
    if (p.nextToken() != JsonToken.START_OBJECT) {
      return null;
    }
    String key = null;
    long ts = -1;
    double[] numbers = new double[numeric.length];
    int seen = 0; // duplicate names are refused by the parser, so each field counts once
    JsonToken t;
    while ((t = p.nextToken()) == JsonToken.FIELD_NAME) {
      String name = p.currentName();
      JsonToken vt = p.nextToken();
      int i;
      if (name.equals(keyField)) {
        if (vt != JsonToken.VALUE_STRING) {
          return null;
        }
        key = p.getText();
      } else if (name.equals(tsField)) {
        ts = epochMs(p, vt);
        if (ts < 0) {
          return null;
        }
      } else if ((i = indexOf(numeric, name)) >= 0) {
        Double v = number(p, vt);
        if (v == null) {
          return null;
        }
        numbers[i] = v;
        seen++;
      } else {
        p.skipChildren();
      }
    }
    boolean complete = !allNumbers || seen == numeric.length;
    return t == JsonToken.END_OBJECT && key != null && ts >= 0 && complete
        ? new Fields(key, ts, numbers) : null;
  }

  private static int indexOf(String[] names, String name) {
    for (int i = 0; i < names.length; i++) {
      if (names[i].equals(name)) {
        return i;
      }
    }
    return -1;
  }

  /** The epoch-ms event time at the current token, or -1 when not sure. */
  static long epochMs(JsonParser p, JsonToken vt) throws IOException {
    if (vt != JsonToken.VALUE_NUMBER_INT || !fitsLong(p)) {
      return -1;
    }
    long ts = p.getLongValue();
    return ts >= 0 && ts < MAX_TS ? ts : -1;
  }

  /** The finite number at the current token as the SQL parse reads it, or null when not sure. */
  static Double number(JsonParser p, JsonToken vt) throws IOException {
    double v;
    if (vt == JsonToken.VALUE_NUMBER_INT) {
      if (!fitsLong(p)) {
        return null;
      }
      v = (double) p.getLongValue();
    } else if (vt == JsonToken.VALUE_NUMBER_FLOAT) {
      String text = p.getText();
      boolean exponent = text.indexOf('e') >= 0 || text.indexOf('E') >= 0;
      if (!exponent && digits(text) > MAX_DECIMAL_DIGITS) {
        return null;
      }
      v = Double.parseDouble(text);
      if (!exponent && v == 0.0) {
        v = 0.0; // a DECIMAL zero: no sign
      }
    } else {
      return null;
    }
    return Double.isFinite(v) ? v : null;
  }

  private static boolean fitsLong(JsonParser p) throws IOException {
    JsonParser.NumberType nt = p.getNumberType();
    return nt == JsonParser.NumberType.INT || nt == JsonParser.NumberType.LONG;
  }

  private static int digits(String text) {
    int n = 0;
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (c >= '0' && c <= '9') {
        n++;
      }
    }
    return n;
  }

  /**
   * Whether the bytes pass the tests on bytes above: size, no NUL, first byte, well-formed
   * UTF-8 (Unicode's Table 3-7, as Java's decoder takes it), no escaped surrogate.
   */
  static boolean plain(byte[] b) {
    int n = b.length;
    if (n == 0 || n > MAX_BYTES) {
      return false;
    }
    int first = b[0];
    if (first != '{' && first != ' ' && first != '\t' && first != '\n' && first != '\r') {
      return false;
    }
    int i = 0;
    while (i < n) {
      int c = b[i];
      if (c > 0) {
        if (c == '\\') {
          if (i + 1 < n && b[i + 1] == 'u' && escapedSurrogate(b, i + 2)) {
            return false;
          }
          i += 2; // the escaped byte is ASCII in valid JSON; a stray one fails the parse
        } else {
          i++;
        }
      } else if (c == 0) {
        return false;
      } else {
        int len = utf8Sequence(b, i);
        if (len == 0) {
          return false;
        }
        i += len;
      }
    }
    return true;
  }

  private static boolean escapedSurrogate(byte[] b, int at) {
    if (at + 1 >= b.length) {
      return false;
    }
    int h = b[at];
    int h2 = b[at + 1];
    return (h == 'd' || h == 'D')
        && ((h2 >= '8' && h2 <= '9') || (h2 >= 'a' && h2 <= 'f') || (h2 >= 'A' && h2 <= 'F'));
  }

  /** The length of the well-formed multi-byte UTF-8 sequence at {@code i}, or 0. */
  private static int utf8Sequence(byte[] b, int i) {
    int c = b[i] & 0xFF;
    int len;
    int lo = 0x80;
    int hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      lo = c == 0xE0 ? 0xA0 : lo;
      hi = c == 0xED ? 0x9F : hi;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      lo = c == 0xF0 ? 0x90 : lo;
      hi = c == 0xF4 ? 0x8F : hi;
    } else {
      return 0;
    }
    if (i + len > b.length) {
      return 0;
    }
    int second = b[i + 1] & 0xFF;
    if (second < lo || second > hi) {
      return 0;
    }
    for (int k = 2; k < len; k++) {
      int cont = b[i + k] & 0xFF;
      if (cont < 0x80 || cont > 0xBF) {
        return 0;
      }
    }
    return len;
  }
}
