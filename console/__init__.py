"""The operator's web console: server-rendered pages over the services' public HTTP APIs."""
