-- The bridge's snapshot watermarks, in the application database: before and after reading
-- one chunk of a table, the bridge writes a mark here in a transaction of its own; where the
-- marks appear in the change stream delimits the changes that race with the chunk. One row
-- per bridge name, updated in place; never published as events.
CREATE TABLE changebroker_watermarks (
    name        text PRIMARY KEY,
    mark        text NOT NULL,
    written_at  timestamptz NOT NULL DEFAULT now()
);
