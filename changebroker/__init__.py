"""changebroker's shared plumbing: config, logging, connections, the local stack and the CLI.

The services live in their own packages (``changeserver``, ``broker``,
``registry``); this package holds only what they all use.
"""
