-- The outbox, in the application database: an application inserts an event in the same
-- transaction as the rows it changes; the bridge publishes each committed insert as an event
-- of event_type (validated by that event type's schema), in commit order per partition key.
-- Deleting rows publishes nothing, so an application may delete them right away, even in the
-- inserting transaction.
CREATE TABLE changebroker_outbox (
    id              bigserial PRIMARY KEY,
    event_type      text NOT NULL,
    -- Orders events under event types with partition_strategy random (NULL: any partition);
    -- hash and user_defined event types place events by their own fields.
    partition_key   text,
    -- The event as POST /event-types/{name}/events takes it; a business event's
    -- metadata.eid and occurred_at default to one derived from the change and its commit time.
    payload         jsonb NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- The changeserver's selector column: rows reach the bridge under its default selector.
    _change_selector text NOT NULL DEFAULT 'bridge'
);
