"""Which Kafka client property names each client library accepts: static data, no logic.

Derived from the libraries' own references, not guessed:

- librdkafka (bundled with confluent-kafka 2.16.1, librdkafka 2.16.0): the property tables of
  ``CONFIGURATION.md`` (global and topic properties, with their C/P column); callbacks and
  pointers that only the C API can set (``*_cb``, ``opaque``, ...) are left out.
- The Java client Spark's Kafka source runs (``kafka-clients-3.9.2.jar`` beside
  ``spark-sql-kafka-0-10_2.13-4.2.0``): ``ConsumerConfig.configNames()`` and
  ``AdminClientConfig.configNames()`` (Spark's source reads with a consumer and fetches offsets
  with an admin client; it runs no Java producer).

A test cross-checks the librdkafka names against the installed library at run time. Re-derive
these sets when a pinned client version changes.
"""

from __future__ import annotations

__all__ = [
    "JAVA_ADMIN_ONLY",
    "JAVA_CONSUMER",
    "RDKAFKA_ALL_ROLES",
    "RDKAFKA_CONSUMER_ONLY",
    "RDKAFKA_PRODUCER_ONLY",
]

#: librdkafka properties for every client (C/P column "*").
RDKAFKA_ALL_ROLES: frozenset[str] = frozenset({
    'allow.auto.create.topics', 'api.version.fallback.ms', 'api.version.request',
    'api.version.request.timeout.ms', 'bootstrap.servers', 'broker.address.family',
    'broker.address.ttl', 'broker.version.fallback', 'client.dns.lookup', 'client.id',
    'client.rack', 'connections.max.idle.ms', 'debug', 'enable.metrics.push',
    'enable.random.seed', 'enable.sasl.oauthbearer.unsecure.jwt',
    'enable.ssl.certificate.verification', 'https.ca.location', 'https.ca.pem', 'interceptors',
    'internal.termination.signal', 'log.connection.close', 'log.thread.name', 'max.in.flight',
    'max.in.flight.requests.per.connection', 'message.copy.max.bytes', 'message.max.bytes',
    'metadata.broker.list', 'metadata.max.age.ms', 'metadata.recovery.rebootstrap.trigger.ms',
    'metadata.recovery.strategy', 'receive.message.max.bytes', 'reconnect.backoff.jitter.ms',
    'reconnect.backoff.max.ms', 'reconnect.backoff.ms', 'retry.backoff.max.ms',
    'retry.backoff.ms', 'sasl.kerberos.keytab', 'sasl.kerberos.kinit.cmd',
    'sasl.kerberos.min.time.before.relogin', 'sasl.kerberos.principal',
    'sasl.kerberos.service.name', 'sasl.mechanism', 'sasl.mechanisms',
    'sasl.oauthbearer.assertion.algorithm', 'sasl.oauthbearer.assertion.claim.aud',
    'sasl.oauthbearer.assertion.claim.exp.seconds', 'sasl.oauthbearer.assertion.claim.iss',
    'sasl.oauthbearer.assertion.claim.jti.include',
    'sasl.oauthbearer.assertion.claim.nbf.seconds', 'sasl.oauthbearer.assertion.claim.sub',
    'sasl.oauthbearer.assertion.file', 'sasl.oauthbearer.assertion.jwt.template.file',
    'sasl.oauthbearer.assertion.private.key.file',
    'sasl.oauthbearer.assertion.private.key.passphrase',
    'sasl.oauthbearer.assertion.private.key.pem',
    'sasl.oauthbearer.client.credentials.client.id',
    'sasl.oauthbearer.client.credentials.client.secret', 'sasl.oauthbearer.client.id',
    'sasl.oauthbearer.client.secret', 'sasl.oauthbearer.config', 'sasl.oauthbearer.extensions',
    'sasl.oauthbearer.grant.type', 'sasl.oauthbearer.metadata.authentication.type',
    'sasl.oauthbearer.method', 'sasl.oauthbearer.scope', 'sasl.oauthbearer.sub.claim.name',
    'sasl.oauthbearer.token.endpoint.url', 'sasl.password', 'sasl.username',
    'security.protocol', 'socket.blocking.max.ms', 'socket.connection.setup.timeout.ms',
    'socket.keepalive.enable', 'socket.max.fails', 'socket.nagle.disable',
    'socket.receive.buffer.bytes', 'socket.send.buffer.bytes', 'socket.timeout.ms',
    'ssl.ca.certificate.stores', 'ssl.ca.location', 'ssl.ca.pem', 'ssl.certificate.location',
    'ssl.certificate.pem', 'ssl.cipher.suites', 'ssl.crl.location', 'ssl.curves.list',
    'ssl.endpoint.identification.algorithm', 'ssl.engine.id', 'ssl.key.location',
    'ssl.key.password', 'ssl.key.pem', 'ssl.keystore.location', 'ssl.keystore.password',
    'ssl.providers', 'ssl.sigalgs.list', 'ssl_ca', 'ssl_certificate', 'ssl_key',
    'statistics.interval.ms', 'topic.blacklist', 'topic.metadata.propagation.max.ms',
    'topic.metadata.refresh.fast.cnt', 'topic.metadata.refresh.fast.interval.ms',
    'topic.metadata.refresh.interval.ms', 'topic.metadata.refresh.sparse',
})


#: librdkafka properties for producers only (C/P column "P").
RDKAFKA_PRODUCER_ONLY: frozenset[str] = frozenset({
    'acks', 'batch.num.messages', 'batch.size', 'compression.codec', 'compression.level',
    'compression.type', 'delivery.report.only.error', 'delivery.timeout.ms',
    'enable.gapless.guarantee', 'enable.idempotence', 'linger.ms', 'message.send.max.retries',
    'message.timeout.ms', 'msg_order_cmp', 'partitioner', 'produce.offset.report',
    'queue.buffering.backpressure.threshold', 'queue.buffering.max.kbytes',
    'queue.buffering.max.messages', 'queue.buffering.max.ms', 'queuing.strategy',
    'request.required.acks', 'request.timeout.ms', 'retries', 'sticky.partitioning.linger.ms',
    'transaction.timeout.ms', 'transactional.id',
})


#: librdkafka properties for consumers only (C/P column "C").
RDKAFKA_CONSUMER_ONLY: frozenset[str] = frozenset({
    'auto.commit.enable', 'auto.commit.interval.ms', 'auto.offset.reset', 'check.crcs',
    'consume.callback.max.messages', 'coordinator.query.interval.ms', 'enable.auto.commit',
    'enable.auto.offset.store', 'enable.partition.eof', 'fetch.error.backoff.ms',
    'fetch.max.bytes', 'fetch.message.max.bytes', 'fetch.min.bytes', 'fetch.queue.backoff.ms',
    'fetch.wait.max.ms', 'group.id', 'group.instance.id', 'group.protocol',
    'group.protocol.type', 'group.remote.assignor', 'heartbeat.interval.ms', 'isolation.level',
    'max.partition.fetch.bytes', 'max.poll.interval.ms', 'max.poll.records',
    'offset.store.method', 'offset.store.path', 'offset.store.sync.interval.ms',
    'partition.assignment.strategy', 'queued.max.messages.kbytes', 'queued.min.messages',
    'session.timeout.ms', 'share.acknowledgement.mode',
})


#: kafka-clients 3.9.2 ConsumerConfig.configNames().
JAVA_CONSUMER: frozenset[str] = frozenset({
    'allow.auto.create.topics', 'auto.commit.interval.ms', 'auto.include.jmx.reporter',
    'auto.offset.reset', 'bootstrap.servers', 'check.crcs', 'client.dns.lookup', 'client.id',
    'client.rack', 'connections.max.idle.ms', 'default.api.timeout.ms', 'enable.auto.commit',
    'enable.metrics.push', 'exclude.internal.topics', 'fetch.max.bytes', 'fetch.max.wait.ms',
    'fetch.min.bytes', 'group.id', 'group.instance.id', 'group.protocol',
    'group.remote.assignor', 'heartbeat.interval.ms', 'interceptor.classes',
    'internal.leave.group.on.close', 'internal.throw.on.fetch.stable.offset.unsupported',
    'isolation.level', 'key.deserializer', 'max.partition.fetch.bytes', 'max.poll.interval.ms',
    'max.poll.records', 'metadata.max.age.ms', 'metadata.recovery.strategy',
    'metric.reporters', 'metrics.num.samples', 'metrics.recording.level',
    'metrics.sample.window.ms', 'partition.assignment.strategy', 'receive.buffer.bytes',
    'reconnect.backoff.max.ms', 'reconnect.backoff.ms', 'request.timeout.ms',
    'retry.backoff.max.ms', 'retry.backoff.ms', 'sasl.client.callback.handler.class',
    'sasl.jaas.config', 'sasl.kerberos.kinit.cmd', 'sasl.kerberos.min.time.before.relogin',
    'sasl.kerberos.service.name', 'sasl.kerberos.ticket.renew.jitter',
    'sasl.kerberos.ticket.renew.window.factor', 'sasl.login.callback.handler.class',
    'sasl.login.class', 'sasl.login.connect.timeout.ms', 'sasl.login.read.timeout.ms',
    'sasl.login.refresh.buffer.seconds', 'sasl.login.refresh.min.period.seconds',
    'sasl.login.refresh.window.factor', 'sasl.login.refresh.window.jitter',
    'sasl.login.retry.backoff.max.ms', 'sasl.login.retry.backoff.ms', 'sasl.mechanism',
    'sasl.oauthbearer.clock.skew.seconds', 'sasl.oauthbearer.expected.audience',
    'sasl.oauthbearer.expected.issuer', 'sasl.oauthbearer.header.urlencode',
    'sasl.oauthbearer.jwks.endpoint.refresh.ms',
    'sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms',
    'sasl.oauthbearer.jwks.endpoint.retry.backoff.ms', 'sasl.oauthbearer.jwks.endpoint.url',
    'sasl.oauthbearer.scope.claim.name', 'sasl.oauthbearer.sub.claim.name',
    'sasl.oauthbearer.token.endpoint.url', 'security.protocol', 'security.providers',
    'send.buffer.bytes', 'session.timeout.ms', 'socket.connection.setup.timeout.max.ms',
    'socket.connection.setup.timeout.ms', 'ssl.cipher.suites', 'ssl.enabled.protocols',
    'ssl.endpoint.identification.algorithm', 'ssl.engine.factory.class', 'ssl.key.password',
    'ssl.keymanager.algorithm', 'ssl.keystore.certificate.chain', 'ssl.keystore.key',
    'ssl.keystore.location', 'ssl.keystore.password', 'ssl.keystore.type', 'ssl.protocol',
    'ssl.provider', 'ssl.secure.random.implementation', 'ssl.trustmanager.algorithm',
    'ssl.truststore.certificates', 'ssl.truststore.location', 'ssl.truststore.password',
    'ssl.truststore.type', 'value.deserializer',
})


#: kafka-clients 3.9.2 AdminClientConfig.configNames() minus the consumer names.
JAVA_ADMIN_ONLY: frozenset[str] = frozenset({
    'bootstrap.controllers', 'retries',
})
