-- Which of Buf's breaking-change categories a PB subject's versions are checked with:
-- WIRE (the binary encoding) or WIRE_JSON (binary and JSON). Other formats ignore it.
ALTER TABLE registry_subjects ADD COLUMN protobuf_category text NOT NULL DEFAULT 'WIRE_JSON';
