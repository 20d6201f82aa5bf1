#!/bin/sh
# Starts the Thrift2 gateway in the background (framed transport, binary
# protocol, port 9090), then HBase in standalone mode in the foreground.
# The gateway connects to HBase lazily, so starting it first is fine.
set -eu
mkdir -p /data/logs
"${HBASE_HOME}/bin/hbase-daemon.sh" --config "${HBASE_HOME}/conf" start thrift2 \
  -p 9090 -f -threadpool --infoport 9095
exec "${HBASE_HOME}/bin/hbase" --config "${HBASE_HOME}/conf" master start
