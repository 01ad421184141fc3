"""The real systems revise stands on: JVM artifacts and the embedded Apache Kafka broker."""
