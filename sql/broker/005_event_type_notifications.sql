-- Every change to event types tells each broker process on commit: publishing keeps
-- event types' revisions in memory and drops them on this notification.

CREATE FUNCTION broker_notify_event_types_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('broker_event_types_changed', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER broker_event_types_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON broker_event_types
    FOR EACH STATEMENT EXECUTE FUNCTION broker_notify_event_types_changed();
