-- The broker's and registry's metadata live apart from the published application data.
CREATE DATABASE changebroker_meta;
