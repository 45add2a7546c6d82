-- Event types and their schema versions. Kafka holds the events; this holds what they mean.
CREATE TABLE broker_event_types (
    name        text PRIMARY KEY,
    -- The EventType as the API returns it, without schema (that is broker_schemas' latest row).
    body        jsonb NOT NULL,
    topic       text NOT NULL UNIQUE,
    partitions  int NOT NULL CHECK (partitions > 0),
    -- Bumped on every change, so every broker process can tell its cached copy is stale.
    revision    bigint NOT NULL DEFAULT 1,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE broker_schemas (
    event_type  text NOT NULL REFERENCES broker_event_types (name) ON DELETE CASCADE,
    -- Order of creation: semantic versions do not sort as text ("1.10.0" < "1.9.0").
    seq         int NOT NULL,
    version     text NOT NULL,
    type        text NOT NULL,
    schema      text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_type, seq),
    UNIQUE (event_type, version)
);
