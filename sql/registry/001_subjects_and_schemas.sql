-- OpenSchema registry: subjects (metadata + compatibility) and their schema versions.
-- Registration locks the subject row (SELECT ... FOR UPDATE), so versions of one
-- subject are assigned one at a time: 1..N without gaps or duplicates.

CREATE TABLE registry_subjects (
    id                 bigserial PRIMARY KEY,
    tenant             text NOT NULL DEFAULT '',
    namespace          text NOT NULL DEFAULT '',
    subject            text NOT NULL,
    app                text,
    description        text,
    status             text,
    compatibility      text NOT NULL DEFAULT 'BACKWARD',
    coordinate         text,
    format             text,
    created_time       timestamptz NOT NULL DEFAULT now(),
    last_modified_time timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant, namespace, subject)
);

CREATE INDEX registry_subjects_by_name ON registry_subjects (subject);

-- Schema ids are global and never reused, even after deletes.
CREATE SEQUENCE registry_schema_ids;

CREATE TABLE registry_schemas (
    id            bigint PRIMARY KEY DEFAULT nextval('registry_schema_ids'),
    subject_id    bigint NOT NULL REFERENCES registry_subjects (id) ON DELETE CASCADE,
    version       int NOT NULL CHECK (version > 0),
    name          text,
    comment       text,
    serialization text,
    -- As registered (a JSON value, or a string holding one) and its canonical parsed
    -- form, by which "the same definition" is recognised.
    definition    jsonb NOT NULL,
    canonical     text NOT NULL,
    validator     text,
    created_time  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (subject_id, version)
);

CREATE INDEX registry_schemas_by_definition ON registry_schemas (subject_id, md5(canonical));
