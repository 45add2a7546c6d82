-- jsonb cannot hold U+0000 (a fixed default of zero bytes is written "\u0000"), so a valid
-- schema could not be stored. The json type keeps the text as sent, escapes included (and
-- the key order too), and still reads back as JSON.
ALTER TABLE registry_schemas ALTER COLUMN definition TYPE json USING definition::json;
