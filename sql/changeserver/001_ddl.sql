-- DDL into the change stream (changeserver/ddl.py reads it). Logical replication carries
-- TRUNCATE but no DDL: event triggers keep one row per published table here, describing its
-- columns as of its last DDL, so every CREATE, ALTER and DROP of a table becomes an insert,
-- update or delete of this table, committed in the DDL's own transaction and streamed at
-- its place among the data changes. REPLICA IDENTITY FULL: an update carries the row before
-- the DDL too, which is what the changeserver compares. Event triggers need a superuser.
CREATE TABLE changebroker_ddl (
    relid    oid PRIMARY KEY,
    name     text NOT NULL,   -- schema.table, as the changes name it
    -- per column: attnum, name, type OID and modifier, generated ('' or 's'), and whether
    -- rows written before the column existed read a value from the catalog (atthasmissing)
    columns  jsonb NOT NULL,
    command  text NOT NULL,   -- the command tag of the last DDL; 'existing' when installed
    -- pg_event_trigger_table_rewrite_reason() of a rewrite by that command, 0 without one
    rewrite  int NOT NULL DEFAULT 0
);
ALTER TABLE changebroker_ddl REPLICA IDENTITY FULL;

CREATE FUNCTION changebroker_ddl_columns(rel oid) RETURNS jsonb
LANGUAGE sql STABLE AS $$
    SELECT coalesce(jsonb_agg(jsonb_build_object(
        'n', attnum, 'name', attname, 'type', atttypid, 'typmod', atttypmod,
        'generated', attgenerated, 'missing', atthasmissing) ORDER BY attnum), '[]')
    FROM pg_attribute
    WHERE attrelid = rel AND attnum > 0 AND NOT attisdropped
$$;

-- Tables a publication streams: only their DDL concerns the change stream.
CREATE FUNCTION changebroker_ddl_published(schema_name name, table_name name) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM pg_publication WHERE puballtables)
        OR EXISTS (SELECT 1 FROM pg_publication_tables
                   WHERE schemaname = schema_name AND tablename = table_name)
$$;

-- A rewrite is noted for the command's end: its reason says whether rows got new values
-- (2: a column's default, 4: a column's type or USING) or only moved (1, 8).
CREATE FUNCTION changebroker_ddl_rewrite() RETURNS event_trigger
LANGUAGE plpgsql AS $$
DECLARE
    setting text := 'changebroker.rewrite_' || pg_event_trigger_table_rewrite_oid();
BEGIN
    PERFORM set_config(setting,
        (coalesce(nullif(current_setting(setting, true), ''), '0')::int
         | pg_event_trigger_table_rewrite_reason())::text, true);
END $$;

CREATE FUNCTION changebroker_ddl_end() RETURNS event_trigger
LANGUAGE plpgsql AS $$
DECLARE
    rel record;
    setting text;
    reason int;
BEGIN
    FOR rel IN
        -- A partitioned or inherited parent's DDL changes its children's columns too.
        WITH RECURSIVE touched (relid, command) AS (
            SELECT objid, command_tag FROM pg_event_trigger_ddl_commands()
            WHERE classid = 'pg_class'::regclass
            UNION
            SELECT i.inhrelid, t.command FROM pg_inherits i JOIN touched t ON i.inhparent = t.relid
        )
        SELECT DISTINCT ON (c.oid) c.oid, n.nspname || '.' || c.relname AS name, t.command
        FROM touched t
        JOIN pg_class c ON c.oid = t.relid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relkind IN ('r', 'p') AND c.relpersistence = 'p'
          AND changebroker_ddl_published(n.nspname, c.relname)
        -- A CREATE TABLE also lists what it altered on the way (a foreign key): it created.
        ORDER BY c.oid, t.command IN ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO') DESC
    LOOP
        setting := 'changebroker.rewrite_' || rel.oid;
        reason := coalesce(nullif(current_setting(setting, true), ''), '0')::int;
        PERFORM set_config(setting, '', true);
        INSERT INTO changebroker_ddl AS d (relid, name, columns, command, rewrite)
        VALUES (rel.oid, rel.name, changebroker_ddl_columns(rel.oid), rel.command, reason)
        ON CONFLICT (relid) DO UPDATE
            SET name = excluded.name, columns = excluded.columns,
                command = excluded.command, rewrite = excluded.rewrite
            WHERE (d.name, d.columns) IS DISTINCT FROM (excluded.name, excluded.columns)
               OR excluded.rewrite <> 0;
    END LOOP;
END $$;

CREATE FUNCTION changebroker_ddl_drop() RETURNS event_trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM changebroker_ddl WHERE relid IN (
        SELECT objid FROM pg_event_trigger_dropped_objects()
        WHERE classid = 'pg_class'::regclass AND objsubid = 0);
END $$;

INSERT INTO changebroker_ddl (relid, name, columns, command)
SELECT c.oid, n.nspname || '.' || c.relname, changebroker_ddl_columns(c.oid), 'existing'
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'p') AND c.relpersistence = 'p'
  AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\_%'
  AND changebroker_ddl_published(n.nspname, c.relname);

CREATE EVENT TRIGGER changebroker_ddl_rewrite ON table_rewrite
    EXECUTE FUNCTION changebroker_ddl_rewrite();
CREATE EVENT TRIGGER changebroker_ddl_end ON ddl_command_end
    WHEN TAG IN ('CREATE TABLE', 'CREATE TABLE AS', 'SELECT INTO', 'ALTER TABLE')
    EXECUTE FUNCTION changebroker_ddl_end();
CREATE EVENT TRIGGER changebroker_ddl_drop ON sql_drop
    EXECUTE FUNCTION changebroker_ddl_drop();
