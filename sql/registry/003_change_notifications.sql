-- Every change to subjects or schemas, by any writer (the registry, the broker), tells
-- the registry processes on commit: each drops the answers it keeps in memory.
-- One notification per statement (and Postgres folds equal ones in a transaction).

CREATE FUNCTION registry_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('registry_changed', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER registry_subjects_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON registry_subjects
    FOR EACH STATEMENT EXECUTE FUNCTION registry_notify_change();

CREATE TRIGGER registry_schemas_changed
    AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON registry_schemas
    FOR EACH STATEMENT EXECUTE FUNCTION registry_notify_change();
