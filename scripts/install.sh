#!/usr/bin/env bash
# Install everything changebroker needs on a Debian host, idempotently:
# Java (a JDK with --test), Maven, PostgreSQL and HAProxy from Debian (when absent; Chromium
# and promtool too with --test), the virtual environment at .venv with the project in it (its
# dependencies at the versions requirements/constraints.txt locks), and the Kafka /
# Spark-connector jars from Maven Central into .state/cache, with a class archive of Spark's
# driver there (replay/class_archive.py). `--test` adds the test and lint tools, and Buf's CLI
# (built with Go) for the registry's Protobuf reference test.
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
if [[ "${1:-}" == "--test" ]]; then
  extras="[test,bench]"
fi

missing=()
command -v java >/dev/null || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null || missing+=(maven)
# The tests compile Java programs (a Nakadi client in tests/clients/, Apache Avro's checker as
# the registry's reference): a JDK, not only a JRE.
if [[ -n "$extras" ]] && ! command -v javac >/dev/null; then
  missing+=(openjdk-17-jdk-headless)
fi
# The console's browser tests drive Debian's Chromium (never a downloaded browser build).
if [[ -n "$extras" ]] && [[ ! -x /usr/bin/chromium ]]; then
  missing+=(chromium chromium-driver)
fi
# promtool (Debian's prometheus package) checks docker/prometheus's config and alert rules.
if [[ -n "$extras" ]] && ! command -v promtool >/dev/null; then
  missing+=(prometheus)
fi
# Debian's server package brings pgbench too (bench/writer_overhead.py runs it).
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
compgen -G "/usr/lib/postgresql/*/bin/pgbench" >/dev/null || missing+=(postgresql-contrib)
# `up --broker-processes N` puts the broker processes behind HAProxy (the cluster tests too).
[[ -x /usr/sbin/haproxy ]] || command -v haproxy >/dev/null || missing+=(haproxy)
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "missing system packages: ${missing[*]} (run: sudo apt-get install ${missing[*]})" >&2
    exit 1
  fi
  echo "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "Python >= 3.11 is needed (set PYTHON=/path/to/python3.11)" >&2
  exit 1
fi
if [[ ! -x .venv/bin/python ]]; then
  echo "creating .venv"
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
# The lock pins every dependency to the version the tests passed with (scripts/lock.py).
echo "installing changebroker${extras} into .venv, as locked in requirements/constraints.txt"
.venv/bin/python -m pip install -q -c requirements/constraints.txt -e ".${extras}"

if [[ -n "$extras" ]]; then
  # The registry's Protobuf verdicts are held against Buf's own CLI, built once from its Go
  # module (a few minutes; needs Go 1.26) into .state/cache.
  echo "building Buf's CLI for the registry's reference test (cached in .state/cache)"
  .venv/bin/python -m tests.registry.buf_reference
fi

echo "resolving the Kafka and Spark-connector jars (cached in .state/cache)"
.venv/bin/python - <<'PY'
from changebroker.stack.kafka import LocalKafka
from changebroker.state import StateDir, default_state_dir
from changebroker.replay.spark import connector_jars

state = StateDir(default_state_dir())
print(f"  kafka: {len(LocalKafka(state, 0, 0).jars())} jars")
print(f"  spark kafka connector: {len(connector_jars(state))} jars")
PY
# Once per machine (one to two minutes): Spark then starts seconds faster. Only an optimization,
# so a failure warns rather than stopping the install.
if ! .venv/bin/python -m changebroker.replay.class_archive; then
  echo "warning: no Spark class archive was made; Spark starts without it (slower)" >&2
fi
echo "installed: .venv/bin/changebroker"
