-- Event type schemas move into the registry (sql/registry): each event type is the subject of
-- its name in tenant 'changebroker', namespace 'event-types', so the registry API shows them.
-- Nakadi's semantic versions stay the broker's, mapped to registry schema ids. The broker
-- applies the registry's migrations before its own, so the registry tables exist here.

CREATE TABLE broker_schema_versions (
    event_type  text NOT NULL REFERENCES broker_event_types (name) ON DELETE CASCADE,
    -- Order of creation: semantic versions do not sort as text ("1.10.0" < "1.9.0").
    seq         int NOT NULL,
    version     text NOT NULL,
    -- No cascade: the registry refuses to delete a schema an event type uses.
    schema_id   bigint NOT NULL REFERENCES registry_schemas (id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_type, seq),
    UNIQUE (event_type, version)
);

CREATE INDEX broker_schema_versions_by_schema ON broker_schema_versions (schema_id);

-- registry.definitions.canonical in SQL (sorted keys, no spaces), so the registry recognises a
-- moved definition when it is registered again. Numbers keep their spelling (1.0 stays 1.0,
-- where Python would also write 1e2 as 100.0): such a schema merely gets a new version.
CREATE FUNCTION pg_temp.canonical_json(value jsonb) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN CASE jsonb_typeof(value)
        WHEN 'object' THEN '{' || coalesce((
            SELECT string_agg(to_jsonb(key)::text || ':' || pg_temp.canonical_json(item), ','
                              ORDER BY key COLLATE "C")
            FROM jsonb_each(value) AS members(key, item)), '') || '}'
        WHEN 'array' THEN '[' || coalesce((
            SELECT string_agg(pg_temp.canonical_json(item), ',' ORDER BY position)
            FROM jsonb_array_elements(value) WITH ORDINALITY AS items(item, position)), '') || ']'
        ELSE value::text
    END;
END
$$;

-- As broker.event_types.store.SUBJECT_METADATA says them.
INSERT INTO registry_subjects
    (tenant, namespace, subject, app, description, status, compatibility, format)
SELECT 'changebroker', 'event-types', name, 'changebroker-broker',
       'schemas of the broker''s Nakadi event type of this name; the broker checks'
       || ' its compatibility_mode and owns the subject (delete the event type to delete it)',
       'released', 'NONE', 'JSON'
FROM broker_event_types;

-- Registry version n is the n-th Nakadi version; the schema text as sent, as a JSON string.
INSERT INTO registry_schemas
    (subject_id, version, serialization, definition, canonical, created_time)
SELECT j.id, s.seq, 'json', to_jsonb(s.schema), pg_temp.canonical_json(s.schema::jsonb),
       s.created_at
FROM broker_schemas s
JOIN registry_subjects j
  ON j.tenant = 'changebroker' AND j.namespace = 'event-types' AND j.subject = s.event_type;

INSERT INTO broker_schema_versions (event_type, seq, version, schema_id, created_at)
SELECT s.event_type, s.seq, s.version, r.id, s.created_at
FROM broker_schemas s
JOIN registry_subjects j
  ON j.tenant = 'changebroker' AND j.namespace = 'event-types' AND j.subject = s.event_type
JOIN registry_schemas r ON r.subject_id = j.id AND r.version = s.seq;

DROP TABLE broker_schemas;
DROP FUNCTION pg_temp.canonical_json(jsonb);
