-- Feature names as Nakadi writes them (and as the broker reads and writes them since):
-- lower-case, e.g. disable_event_type_creation.
UPDATE broker_features SET feature = lower(feature);
