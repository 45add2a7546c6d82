-- A subscription stream's cursor commit, whole, in one statement: a consumer commits every
-- batch and waits for each, so the commit is one round trip and one transaction rather than
-- the seven statements it took from the broker. broker/subscriptions/store.py (commit) calls it
-- and turns ``refused`` into the API's problem; nothing is changed when it is set.
--
-- Under the subscription row's lock, as every change to a subscription's streams is:
--   refused 'changed': p_checked, and the subscription is gone or its authorization is no
--       longer p_authz (the broker decided on what it remembered; it reads again);
--   refused 'missing': no such subscription;
--   refused 'no_session': no session p_stream, or it closed and its commit deadline passed;
--   refused 'not_in_subscription' / 'not_assigned': the partition of the cursor at refused_at
--       (from 1) is not the subscription's, or p_stream does not own it.
-- Otherwise each cursor, in order, is 'committed' (after the committed offset, which it becomes)
-- or 'outdated'; a partition being handed over goes to its next stream once its committed
-- offset reaches release_offset; and if anything moved, NOTIFY p_channel wakes the streams.
CREATE FUNCTION broker_commit_cursors(
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
