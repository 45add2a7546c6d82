-- The broker's admin settings (/settings/admins, /settings/blacklist, /settings/features),
-- shared by every broker process: each reads them again at least once a second.
CREATE TABLE broker_admins (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    -- AdminAuthorization: {"admins": [...], "readers": [...], "writers": [...]}; until the first
    -- POST, the subjects of the broker's --admins flag are the administrators.
    authz      jsonb NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE broker_blacklist (
    -- CONSUMER_APP, CONSUMER_ET, PRODUCER_APP or PRODUCER_ET
    type       text NOT NULL,
    name       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (type, name)
);

CREATE TABLE broker_features (
    feature    text PRIMARY KEY,
    enabled    boolean NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);
