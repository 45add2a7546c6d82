"""ASGI plumbing every HTTP service shares, a module per job: X-Flow-Id and access lines
(``flow``), one-write responses (``responses``), ``Accept`` (``accept``), TLS options
(``tls``), the uvicorn protocol (``protocol``) and its limits (``limits``), draining
(``draining``), serving one process (``serving``) or ``--workers`` (``workers``). A service
imports ``from changebroker import http`` and uses the names below.

Error bodies are not here on purpose: each API has its own error format
(transicator, Nakadi Problem, OpenSchema), and each service owns its own.
"""

from changebroker.http.accept import accepted as accepted
from changebroker.http.draining import drain_in_worker as drain_in_worker
from changebroker.http.draining import draining as draining
from changebroker.http.flow import CLIENT_LEFT as CLIENT_LEFT
from changebroker.http.flow import FLOW_ID_HEADER as FLOW_ID_HEADER
from changebroker.http.flow import FlowIdMiddleware as FlowIdMiddleware
from changebroker.http.garbage import tune_gc as tune_gc
from changebroker.http.limits import DEFAULT_IDLE_TIMEOUT as DEFAULT_IDLE_TIMEOUT
from changebroker.http.limits import ConnectionLimits as ConnectionLimits
from changebroker.http.limits import add_limit_options as add_limit_options
from changebroker.http.limits import limits_of as limits_of
from changebroker.http.protocol import UpgradeIgnoringProtocol as UpgradeIgnoringProtocol
from changebroker.http.responses import RESPOND as RESPOND
from changebroker.http.responses import OneWriteResponse as OneWriteResponse
from changebroker.http.responses import Respond as Respond
from changebroker.http.responses import header_lines as header_lines
from changebroker.http.serving import add_server_options as add_server_options
from changebroker.http.serving import config as config
from changebroker.http.serving import serve as serve
from changebroker.http.tls import Tls as Tls
from changebroker.http.tls import add_tls_options as add_tls_options
from changebroker.http.tls import tls_of as tls_of
from changebroker.http.workers import serve_workers as serve_workers
