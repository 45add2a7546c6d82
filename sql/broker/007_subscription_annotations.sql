-- A subscription's annotations and labels (string -> string objects), as Nakadi keeps them:
-- set when it is created, replaced by a PUT that sends them, kept by one that does not.
ALTER TABLE broker_subscriptions ADD COLUMN annotations jsonb, ADD COLUMN labels jsonb;
