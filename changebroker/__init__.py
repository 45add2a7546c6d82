"""changebroker's shared plumbing: config, logging, connections, the local stack and the CLI.

The services live in their own subpackages (``changebroker.changeserver``,
``changebroker.broker``, ``changebroker.registry``, ...: links to the checkout's top-level
folders, README "From a wheel"); the package's own modules hold what they all use.
"""
