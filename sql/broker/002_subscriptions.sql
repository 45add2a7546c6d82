-- Subscriptions: Kafka holds the events; this holds who reads them, how far, and with which stream.
-- Every broker process coordinates through these rows (under the subscription row's lock) and
-- NOTIFY broker_subscriptions '<id>' after each change, so streams learn of it at once.
CREATE TABLE broker_subscriptions (
    id                  uuid PRIMARY KEY,
    owning_application  text NOT NULL,
    -- Sorted: the order of event types does not make another subscription.
    event_types         text[] NOT NULL,
    consumer_group      text NOT NULL,
    read_from           text NOT NULL,
    initial_cursors     jsonb,
    authz               jsonb,  -- the Subscription's authorization (a reserved word)
    -- Cursors are initialised when the subscription is first streamed (or reset), as Nakadi does.
    initialised         boolean NOT NULL DEFAULT false,
    -- A cursor reset waits for the streams it closed; new streams get 409 until then.
    reset_until         timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    UNIQUE (owning_application, event_types, consumer_group)
);
CREATE INDEX broker_subscriptions_created ON broker_subscriptions (created_at DESC, id);

-- One stream (X-Nakadi-StreamId) of a subscription, served by one broker process.
CREATE TABLE broker_subscription_sessions (
    stream_id       uuid PRIMARY KEY,
    subscription_id uuid NOT NULL REFERENCES broker_subscriptions (id) ON DELETE CASCADE,
    -- Directly requested partitions as [[event_type, partition], ...]; empty: balanced.
    requested       jsonb NOT NULL DEFAULT '[]',
    commit_timeout  double precision NOT NULL,
    -- Refreshed by the serving process: a session of a process that died stops counting.
    alive_until     timestamptz NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- Set when the stream stops sending; commits are taken until commit_deadline.
    closed_at       timestamptz,
    commit_deadline timestamptz,
    -- The HTTP response is over (a cursor reset waits for this).
    finished        boolean NOT NULL DEFAULT false
);
CREATE INDEX broker_subscription_sessions_sub ON broker_subscription_sessions (subscription_id);

-- Committed offset and assignment of every partition of every event type of a subscription.
CREATE TABLE broker_subscription_partitions (
    subscription_id  uuid NOT NULL REFERENCES broker_subscriptions (id) ON DELETE CASCADE,
    event_type       text NOT NULL,
    partition        int NOT NULL,
    -- Kafka offset of the last committed event; -1: none yet.
    committed        bigint NOT NULL,
    -- The stream that reads it and may commit it.
    owner            uuid,
    assignment_type  text NOT NULL DEFAULT 'auto',
    -- A move in progress: the owner gives the partition to next_owner once what it sent is
    -- committed (release_offset) or at release_deadline, whichever comes first.
    next_owner       uuid,
    release_offset   bigint,
    release_deadline timestamptz,
    PRIMARY KEY (subscription_id, event_type, partition)
);
