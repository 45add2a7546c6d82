-- Nakadi's dead-letter queue for subscriptions (broker/subscriptions/dead_letters.py), per
-- partition: how many streams in a row ended with its events sent and not committed, and,
-- while it looks for the poison pill one event at a time, the offset up to which it looks.
ALTER TABLE broker_subscription_partitions
    ADD COLUMN failed_commits int NOT NULL DEFAULT 0,
    ADD COLUMN last_dead_letter_offset bigint;

-- The commit of sql/broker/006_commit_cursors.sql, and: a commit that moves a partition on
-- counts its failed sends back to 0, and one that reaches the end of the batch it was looking
-- through ends the search.
CREATE OR REPLACE FUNCTION broker_commit_cursors(
    p_subscription uuid,
    p_stream text,
    p_event_types text[],
    p_partitions int[],
    p_offsets bigint[],
    p_checked boolean,
    p_authz jsonb,
    p_channel text,
    OUT refused text,
    OUT refused_at int,
    OUT results text[]
) LANGUAGE plpgsql AS $$
DECLARE
    held_authz jsonb;
    may_commit boolean;
    owned_by text;
    moved boolean := false;
    i int;
BEGIN
    SELECT authz INTO held_authz FROM broker_subscriptions WHERE id = p_subscription FOR UPDATE;
    IF NOT FOUND THEN
        refused := CASE WHEN p_checked THEN 'changed' ELSE 'missing' END;
        RETURN;
    END IF;
    IF p_checked AND held_authz IS DISTINCT FROM p_authz THEN
        refused := 'changed';
        RETURN;
    END IF;
    SELECT closed_at IS NULL OR commit_deadline > now() INTO may_commit
        FROM broker_subscription_sessions
        WHERE stream_id = p_stream::uuid AND subscription_id = p_subscription;
    IF may_commit IS NOT TRUE THEN
        refused := 'no_session';
        RETURN;
    END IF;
    FOR i IN 1 .. coalesce(array_length(p_event_types, 1), 0) LOOP
        SELECT owner::text INTO owned_by FROM broker_subscription_partitions
            WHERE subscription_id = p_subscription
              AND event_type = p_event_types[i] AND partition = p_partitions[i];
        IF NOT FOUND OR owned_by IS DISTINCT FROM p_stream THEN
            refused := CASE WHEN FOUND THEN 'not_assigned' ELSE 'not_in_subscription' END;
            refused_at := i;
            RETURN;
        END IF;
    END LOOP;
    results := '{}';
    FOR i IN 1 .. coalesce(array_length(p_event_types, 1), 0) LOOP
        UPDATE broker_subscription_partitions
            SET committed = p_offsets[i],
                failed_commits = 0,
                last_dead_letter_offset = CASE WHEN last_dead_letter_offset <= p_offsets[i]
                                               THEN NULL ELSE last_dead_letter_offset END,
                owner = CASE WHEN release_offset <= p_offsets[i] THEN next_owner ELSE owner END,
                next_owner = CASE WHEN release_offset <= p_offsets[i] THEN NULL ELSE next_owner END,
                release_deadline = CASE WHEN release_offset <= p_offsets[i] THEN NULL
                                        ELSE release_deadline END,
                release_offset = CASE WHEN release_offset <= p_offsets[i] THEN NULL
                                      ELSE release_offset END
            WHERE subscription_id = p_subscription
              AND event_type = p_event_types[i] AND partition = p_partitions[i]
              AND committed < p_offsets[i];
        IF FOUND THEN
            results := results || 'committed'::text;
            moved := true;
        ELSE
            results := results || 'outdated'::text;
        END IF;
    END LOOP;
    IF moved THEN
        PERFORM pg_notify(p_channel, p_subscription::text);
    END IF;
END
$$;
