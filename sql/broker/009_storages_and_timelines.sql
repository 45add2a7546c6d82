-- Nakadi's storages and timelines: the Kafka clusters events may live in, and the topics an
-- event type's events have lived in, in order. broker_event_types.topic stays the topic
-- publishing writes to (the active timeline's), so every process notices a switch as a change
-- of revision.

CREATE TABLE broker_storages (
    id                  text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 36),
    storage_type        text NOT NULL DEFAULT 'kafka',
    -- {"bootstrap_servers": "host:port,...", "client_settings": {"librdkafka.property": "..."}};
    -- NULL: the cluster of each process's own --kafka-bootstrap (the storage 'default').
    kafka_configuration jsonb,
    -- New event types' first timeline goes to the default storage.
    is_default          boolean NOT NULL DEFAULT false,
    created_at          timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX broker_storages_one_default ON broker_storages (is_default) WHERE is_default;
INSERT INTO broker_storages (id, is_default) VALUES ('default', true);

CREATE TABLE broker_timelines (
    id              uuid PRIMARY KEY,
    event_type      text NOT NULL REFERENCES broker_event_types (name) ON DELETE CASCADE,
    timeline_order  int NOT NULL CHECK (timeline_order > 0),
    storage_id      text NOT NULL REFERENCES broker_storages (id),
    topic           text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    switched_at     timestamptz,
    -- Set when the next timeline takes over: the offset of the last event of each partition
    -- (-1: none), where readers move on; and when its topic is deleted (its retention after).
    latest_offsets  bigint[],
    cleanup_at      timestamptz,
    deleted         boolean NOT NULL DEFAULT false,
    UNIQUE (event_type, timeline_order)
);
CREATE INDEX broker_timelines_cleanup ON broker_timelines (cleanup_at) WHERE NOT deleted;

INSERT INTO broker_timelines (id, event_type, timeline_order, storage_id, topic, created_at,
                              switched_at)
SELECT gen_random_uuid(), name, 1, 'default', topic, created_at, created_at
FROM broker_event_types;

-- Every process that writes events (broker processes, bridges), while it runs: a timeline
-- switch waits until each has stopped writing to the event type (or stopped counting: a
-- process whose registration lapsed writes nothing, broker/timelines/writers.py).
CREATE TABLE broker_writers (
    id          uuid PRIMARY KEY,
    kind        text NOT NULL,
    alive_until timestamptz NOT NULL
);

-- An event type whose writers must stop for a moment (a timeline switch under way), and the
-- writers that have. Past expires_at the switch is surely gone (it commits well before): the
-- lock no longer counts and anyone removes it.
CREATE TABLE broker_write_locks (
    id          uuid PRIMARY KEY,
    event_type  text NOT NULL UNIQUE,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL
);
CREATE TABLE broker_write_pauses (
    lock_id     uuid NOT NULL REFERENCES broker_write_locks (id) ON DELETE CASCADE,
    writer_id   uuid NOT NULL,
    PRIMARY KEY (lock_id, writer_id)
);

CREATE FUNCTION broker_notify_write_locks_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('broker_write_locks_changed', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER broker_write_locks_changed
    AFTER INSERT OR DELETE ON broker_write_locks
    FOR EACH STATEMENT EXECUTE FUNCTION broker_notify_write_locks_changed();
