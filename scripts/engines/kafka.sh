#!/usr/bin/env bash
# A real Apache Kafka broker for tests: one KRaft node (broker + controller in one JVM)
# on loopback, its jars fetched from Maven into a cache and reused by later runs.
#
#   scripts/engines/kafka.sh fetch                 jars into $CACHE/kafka-<version>/libs (prints it)
#   scripts/engines/kafka.sh start DIR             format DIR (first start), start, wait until it
#                                                  answers; DIR/bootstrap holds host:port
#   scripts/engines/kafka.sh create-topic DIR NAME PARTITIONS [KEY=VALUE...]  (topic configs)
#   scripts/engines/kafka.sh stop DIR              SIGTERM, SIGKILL after 60 s
#   scripts/engines/kafka.sh kill DIR              SIGKILL
#   scripts/engines/kafka.sh restart DIR           stop if running, start on the same ports and data
#   scripts/engines/kafka.sh logs DIR [LINES]      the broker log's tail (default 200 lines)
#   scripts/engines/kafka.sh version               the pinned version
#
# A cluster of N KRaft nodes (each broker and controller, a static quorum of N voters),
# replication factor min(N, 3) with min.insync.replicas 2 for topics it creates and for
# Kafka's own; each node in DIR/node<ID>, DIR/bootstrap lists every node:
#   scripts/engines/kafka.sh start-cluster DIR N   format and start N nodes, wait for all
#   scripts/engines/kafka.sh kill-node DIR ID      SIGKILL node ID
#   scripts/engines/kafka.sh start-node DIR ID     start node ID again (same ports and data)
#   create-topic, stop, kill and logs take a cluster's DIR as they take a node's (logs: each
#   node's); start and restart refuse it.
#
# CACHE is ${LOGDEX_ENGINE_CACHE:-$HOME/.cache/logdex-engines}; Maven's ~/.m2 is reused too.
# Exit codes: 0 ok, 1 failure, 2 usage, 77 Maven's repository cannot be reached (the jars
# are not cached yet): tests report that as skipped, never as passed. With
# LOGDEX_REQUIRE_ENGINES=1 (CI sets it) an unreachable repository is a failure (exit 1).
#
# The broker runs detached from the caller; DIR/pid names it. With KAFKA_ENGINE_OWNER_PID
# set at start, a watcher SIGKILLs the broker when that process is gone (a test killed by
# ctest's timeout leaves no JVM behind).
set -euo pipefail

# Kafka 4.4.0: the newest release; its broker and tool classes are Java 17 bytecode (class
# file version 61) and it ran here on OpenJDK 17.
KAFKA_VERSION=4.4.0
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${LOGDEX_ENGINE_CACHE:-$HOME/.cache/logdex-engines}/kafka-$KAFKA_VERSION
LIBS=$CACHE/libs
START_DEADLINE=${KAFKA_START_DEADLINE:-120}
STOP_DEADLINE=${KAFKA_STOP_DEADLINE:-60}
EX_UNREACHABLE=77
# Named in full: a goal prefix ("dependency:") is resolved from the repository's metadata
# first, and that fails with a message that does not say the repository was unreachable.
DEPENDENCY_PLUGIN=org.apache.maven.plugins:maven-dependency-plugin:3.8.1

die() { echo "kafka.sh: $*" >&2; exit 1; }
usage() { sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

fetch() {
  if [ -f "$LIBS/.complete" ]; then
    echo "$LIBS"
    return 0
  fi
  command -v mvn >/dev/null || die "mvn not found (scripts/install-deps.sh --engines installs maven)"
  local tmp="$CACHE/libs.partial" log="$CACHE/fetch.log"
  mkdir -p "$CACHE"
  # One fetch at a time per cache (tests may start together); a second waits, then reuses it.
  exec 9>"$CACHE/.fetch.lock"
  flock 9
  if [ -f "$LIBS/.complete" ]; then
    exec 9>&-
    echo "$LIBS"
    return 0
  fi
  rm -rf "$tmp"
  echo "kafka.sh: fetching Apache Kafka $KAFKA_VERSION jars with Maven into $LIBS" >&2
  # -U: a failure Maven cached in ~/.m2 ("resolution will not be reattempted until ...")
  # is tried again, so the log says what happens now. The wagon settings bound a stalled
  # download (60 s without a byte) and retry a dropped connection.
  if ! mvn -q -B -U -f "$HERE/kafka/pom.xml" "$DEPENDENCY_PLUGIN:copy-dependencies" \
        -Dkafka.version="$KAFKA_VERSION" -DincludeScope=runtime -DoutputDirectory="$tmp" \
        -Dmaven.wagon.rto=60000 -Dmaven.wagon.http.retryHandler.count=3 \
        ${KAFKA_ENGINE_MAVEN_ARGS:-} >"$log" 2>&1 9>&-; then
    rm -rf "$tmp"
    # Only a transfer that never reached the repository is "unreachable". An artifact the
    # repository does not have ("Could not find artifact", "Failure to find") is a real
    # failure, as is anything else.
    # A repository that answered with an error (an HTTP status, a TLS or checksum failure)
    # was reached: that is a failure too.
    if grep -qE 'Could not transfer|Connect(ion)? (to .* )?(refused|failed|timed out)|Unknown ?Host|Network is unreachable|No route to host|Temporary failure in name resolution' "$log" &&
       ! grep -qE 'Could not find artifact|Failure to find|status code: [0-9]+|PKIX|[Cc]hecksum' "$log"; then
      echo "kafka.sh: Maven's repository cannot be reached, Kafka $KAFKA_VERSION jars are not cached (see $log):" >&2
      sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -m 1 -E '^\[ERROR\] .' | cut -c1-400 >&2 || true
      if [ "${LOGDEX_REQUIRE_ENGINES:-0}" = 1 ]; then
        die "LOGDEX_REQUIRE_ENGINES=1: the real-engine tests must run, not be skipped"
      fi
      exit $EX_UNREACHABLE
    fi
    tail -n 30 "$log" >&2
    die "mvn dependency:copy-dependencies failed (see $log)"
  fi
  [ -f "$tmp/kafka_2.13-$KAFKA_VERSION.jar" ] || die "fetch: kafka_2.13-$KAFKA_VERSION.jar missing from $tmp"
  rm -rf "$LIBS"
  mv "$tmp" "$LIBS" || die "cannot move the jars into $LIBS"
  touch "$LIBS/.complete" || die "cannot write $LIBS/.complete"
  exec 9>&-  # the lock is not for the broker start() runs next to inherit
  echo "$LIBS"
}

# The tools (format, topics) run for seconds: C1 only and the serial collector start them
# 3x faster here on 2 busy cores (11.9 s -> 3.6 s for a format).
kjava() { java -Xmx256m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC -cp "$LIBS/*" "$@"; }
# The broker: a test node, small heap; C1 only, as startup dominates a test's broker time
# (KAFKA_ENGINE_JVM_OPTS replaces these flags).
BROKER_JVM_OPTS=${KAFKA_ENGINE_JVM_OPTS:--Xms128m -Xmx512m -XX:TieredStopAtLevel=1 -XX:+UseG1GC -XX:MaxGCPauseMillis=20}

# Two distinct free loopback ports below the kernel's ephemeral range (free_ports.py says
# why); a broker that still loses one is started again on new ports (start()).
free_ports() { python3 "$HERE/free_ports.py" 2; }

# The broker's pid when it runs (a zombie or a reused pid does not count).
running_pid() {
  local dir=$1 pid
  [ -f "$dir/pid" ] || return 1
  pid=$(cat "$dir/pid")
  [ -r "/proc/$pid/cmdline" ] || return 1
  [ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ] || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "kafka.Kafka $dir/server.properties" || return 1
  echo "$pid"
}

# A node's config. One node: its own quorum (bootstrap servers, formatted --standalone).
# A cluster's node (DIR/node.id exists): the static quorum of every node's controller.
write_config() {
  local dir=$1 port=$2 cport=$3 id=1 quorum rf=1 isr=1
  quorum="controller.quorum.bootstrap.servers=127.0.0.1:$cport"
  if [ -f "$dir/node.id" ]; then
    id=$(cat "$dir/node.id")
    quorum="controller.quorum.voters=$(cat "$dir/../voters")"
    rf=$(cat "$dir/../replication")
    isr=$((rf > 1 ? 2 : 1))
    # A killed node's partitions move within 3 s, not the default 9.
    quorum+=$'\nbroker.session.timeout.ms=3000\nbroker.heartbeat.interval.ms=500'
  fi
  cat >"$dir/server.properties" <<EOF
# Written by scripts/engines/kafka.sh: a KRaft node, loopback only.
process.roles=broker,controller
node.id=$id
$quorum
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$dir/data
num.partitions=1
auto.create.topics.enable=false
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
share.coordinator.state.topic.replication.factor=$rf
share.coordinator.state.topic.min.isr=$isr
group.initial.rebalance.delay.ms=0
# A topic's retention.bytes (tests set it small) applies within a second, not 5 minutes.
log.retention.check.interval.ms=1000
EOF
  cat >"$dir/log4j2.properties" <<EOF
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.kafka.name = org.apache.kafka
logger.kafka.level = INFO
EOF
}

# Launches the broker in DIR on its ports file's ports and waits until it answers.
# Returns 3 when it exited because a port was taken, after 1 for any other failure.
launch() {
  spawn "$1" && await_ready "$1"
}

# Formats DIR's data (first start) and starts its node, detached. DIR/log.from: the
# broker log's line count before this start (await_ready reads from there).
spawn() {
  local dir=$1 port cport pid format_mode=(--standalone)
  # Called as `launch ... || rc=$?`, where set -e does not apply: each step checks.
  read -r port cport <"$dir/ports" && [ -n "$port" ] && [ -n "$cport" ] ||
    { echo "kafka.sh: no ports in $dir/ports" >&2; return 1; }
  write_config "$dir" "$port" "$cport" || { echo "kafka.sh: cannot write $dir's config" >&2; return 1; }
  [ -f "$dir/node.id" ] && format_mode=()  # a cluster's static quorum: no initial controllers to name
  if [ ! -f "$dir/data/meta.properties" ]; then
    local cluster_id  # a cluster's nodes share one
    if [ -f "$dir/node.id" ]; then
      cluster_id=$(cat "$dir/../cluster.id")
    else
      cluster_id=$(new_cluster_id)
    fi
    kjava -Dlog4j2.configurationFile="$dir/log4j2.properties" kafka.tools.StorageTool \
      format "${format_mode[@]}" -t "$cluster_id" -c "$dir/server.properties" >>"$dir/format.log" 2>&1 ||
      { cat "$dir/format.log" >&2; echo "kafka.sh: formatting $dir/data failed" >&2; return 1; }
  fi
  echo "=== kafka.sh start $(date -u +%FT%TZ) ===" >>"$dir/broker.log"
  wc -l <"$dir/broker.log" >"$dir/log.from"
  # setsid: the broker leaves the caller's process group (a ^C to a test does not reach
  # it first; the test stops it).
  # shellcheck disable=SC2086 # BROKER_JVM_OPTS is a list of flags
  setsid java $BROKER_JVM_OPTS -XX:+ExitOnOutOfMemoryError \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$dir/log4j2.properties" \
    -cp "$LIBS/*" kafka.Kafka "$dir/server.properties" >>"$dir/broker.log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$dir/pid"
  if [ -n "${KAFKA_ENGINE_OWNER_PID:-}" ]; then
    local owner=$KAFKA_ENGINE_OWNER_PID
    # Polls once a second until the owner or the broker is gone.
    setsid bash -c "while kill -0 $owner 2>/dev/null && kill -0 $pid 2>/dev/null; do sleep 1; done;
                    kill -0 $pid 2>/dev/null && kill -KILL $pid" >/dev/null 2>&1 </dev/null &
  fi
}

# Waits until DIR's node says it started and answers a metadata request naming itself.
await_ready() {
  local dir=$1 port cport pid deadline from id=1
  read -r port cport <"$dir/ports"
  from=$(cat "$dir/log.from")
  pid=$(cat "$dir/pid")
  [ -f "$dir/node.id" ] && id=$(cat "$dir/node.id")
  deadline=$((SECONDS + START_DEADLINE))
  while :; do
    if ! running_pid "$dir" >/dev/null; then
      tail -n 60 "$dir/broker.log" >&2
      echo "kafka.sh: the broker exited during start (log: $dir/broker.log)" >&2
      # This start's part of the log only.
      # grep reads to the end (no -q): tail is never cut off by a SIGPIPE under pipefail.
      if tail -n "+$((from + 1))" "$dir/broker.log" | grep -E 'BindException|Address already in use' >/dev/null; then
        return 3
      fi
      return 1
    fi
    # Ours said it started (another broker holding the port would answer kcat too), and a
    # real round trip: metadata naming this node on our listener.
    if tail -n "+$((from + 1))" "$dir/broker.log" | grep -F 'Kafka Server started' >/dev/null &&
       running_pid "$dir" >/dev/null &&
       kcat -L -b "127.0.0.1:$port" -m 5 2>/dev/null | grep -F "broker $id at 127.0.0.1:$port" >/dev/null; then
      break
    fi
    if [ $SECONDS -ge $deadline ]; then
      tail -n 60 "$dir/broker.log" >&2
      kill -KILL "$pid" 2>/dev/null || true
      echo "kafka.sh: the broker did not answer within ${START_DEADLINE}s (log: $dir/broker.log)" >&2
      return 1
    fi
    sleep 0.5
  done
  echo "127.0.0.1:$port" >"$dir/bootstrap"
  echo "kafka.sh: Apache Kafka $KAFKA_VERSION up at 127.0.0.1:$port (pid $pid, $dir)" >&2
}

# A Kafka Uuid: 16 random bytes, URL-safe base64 without padding (no JVM for it). Never
# one that starts with '-': the tool's argument parser takes it for an option (1 start in
# 64 failed with "expected one argument"; Kafka's own Uuid.randomUuid() skips those ids for
# the same reason).
new_cluster_id() {
  python3 -c 'import base64, os
while True:
    u = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    if not u.startswith("-"):
        print(u)
        break'
}

# N nodes in DIR/node1..N: all spawned, then each awaited (a node of a static quorum of 3
# cannot start alone: the controllers need a majority). No retry on a taken port here:
# a failed start fails, with the node's log.
start_cluster() {
  local dir=$1 n=$2 i ports=() voters="" rc=0
  [ "$n" -ge 1 ] 2>/dev/null || usage
  [ ! -f "$dir/voters" ] || die "a cluster was already made in $dir"
  fetch >/dev/null || rc=$?
  [ $rc -eq 0 ] || exit $rc
  read -r -a ports <<<"$(python3 "$HERE/free_ports.py" $((2 * n)))" || die "no free ports"
  for ((i = 1; i <= n; i++)); do
    mkdir -p "$dir/node$i"
    echo "${ports[$((2 * i - 2))]} ${ports[$((2 * i - 1))]}" >"$dir/node$i/ports"
    echo "$i" >"$dir/node$i/node.id"
    voters+="${voters:+,}$i@127.0.0.1:${ports[$((2 * i - 1))]}"
  done
  new_cluster_id >"$dir/cluster.id"
  echo $((n < 3 ? n : 3)) >"$dir/replication"
  echo "$voters" >"$dir/voters"
  # Written first: `stop` and `logs` find every node even when a start fails half way.
  echo "$n" >"$dir/nodes"
  # The first node's log names the version (kafka_engine_test.py reads DIR/broker.log).
  ln -sf node1/broker.log "$dir/broker.log"
  for ((i = 1; i <= n; i++)); do
    spawn "$dir/node$i" || { stop_all "$dir"; die "starting node $i failed"; }
  done
  for ((i = 1; i <= n; i++)); do
    await_ready "$dir/node$i" || { stop_all "$dir"; die "node $i did not start"; }
  done
  local bootstrap=""
  for ((i = 1; i <= n; i++)); do bootstrap+="${bootstrap:+,}$(cat "$dir/node$i/bootstrap")"; done
  echo "$bootstrap" >"$dir/bootstrap"
  echo "kafka.sh: a cluster of $n nodes up at $bootstrap (replication $(cat "$dir/replication"))" >&2
}

# Stops every node of DIR (one, or a cluster's) at once; fails when one did not stop.
stop_all() {
  local dir=$1 d pids=() p rc=0
  while IFS= read -r d; do
    stop "$d" &
    pids+=($!)
  done < <(nodes_of "$dir")
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  return $rc
}

# Refuses a single-node command on a cluster's folder (it would start a node of its own there).
not_cluster() {
  [ ! -f "$1/nodes" ] || die "$1 holds a cluster: use start-node / kill-node / stop"
}

# The node folders of DIR: its own (one node) or node1..N (a cluster).
nodes_of() {
  local dir=$1 i
  if [ -f "$dir/nodes" ]; then
    for ((i = 1; i <= $(cat "$dir/nodes"); i++)); do echo "$dir/node$i"; done
  else
    echo "$dir"
  fi
}

start() {
  local dir=$1 pid rc=0 attempt
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  if pid=$(running_pid "$dir"); then die "a broker already runs in $dir (pid $pid)"; fi
  fetch >/dev/null || rc=$?
  [ $rc -eq 0 ] || exit $rc
  if [ -f "$dir/ports" ]; then
    # A restart keeps its ports (clients know them) and its data.
    launch "$dir" || die "start failed"
    return 0
  fi
  # The first start: new ports, and new ones again (with a new format, which records the
  # controller's port) if another process took one first.
  for attempt in 1 2 3; do
    free_ports >"$dir/ports.tmp" && mv "$dir/ports.tmp" "$dir/ports" || die "no free ports"
    rc=0
    launch "$dir" || rc=$?
    [ $rc -eq 0 ] && return 0
    [ $rc -eq 3 ] || die "start failed"
    echo "kafka.sh: a port was taken (attempt $attempt of 3); new ports" >&2
    rm -rf "$dir/data" "$dir/ports"
  done
  die "no free ports after 3 attempts"
}

wait_gone() {
  local dir=$1 seconds=$2 deadline=$((SECONDS + $2))
  while running_pid "$dir" >/dev/null; do
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}

stop() {
  local dir=$1 pid
  pid=$(running_pid "$dir") || { echo "kafka.sh: no broker runs in $dir" >&2; return 0; }
  kill -TERM "$pid" 2>/dev/null || true
  if ! wait_gone "$dir" "$STOP_DEADLINE"; then
    echo "kafka.sh: the broker did not stop within ${STOP_DEADLINE}s; SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
    wait_gone "$dir" 30 || die "pid $pid survived SIGKILL"
  fi
}

kill_broker() {
  local dir=$1 pid
  pid=$(running_pid "$dir") || { echo "kafka.sh: no broker runs in $dir" >&2; return 0; }
  kill -KILL "$pid" 2>/dev/null || true
  wait_gone "$dir" 30 || die "pid $pid survived SIGKILL"
}

create_topic() {
  local dir=$1 name=$2 partitions=$3 kv configs=() rf=1
  [ -f "$dir/replication" ] && rf=$(cat "$dir/replication")
  shift 3
  for kv in "$@"; do configs+=(--config "$kv"); done
  [ -f "$dir/bootstrap" ] || die "no broker was started in $dir"
  [ -f "$LIBS/.complete" ] || die "not fetched"
  kjava -Dlog4j2.configurationFile="$(nodes_of "$dir" | head -n 1)/log4j2.properties" org.apache.kafka.tools.TopicCommand \
    --bootstrap-server "$(cat "$dir/bootstrap")" --create --if-not-exists --topic "$name" \
    --partitions "$partitions" --replication-factor "$rf" "${configs[@]}" >>"$dir/tools.log" 2>&1 ||
    { tail -n 20 "$dir/tools.log" >&2; die "creating topic $name failed"; }
}

dir_arg() { [ -n "${1:-}" ] || usage; mkdir -p "$1"; (cd "$1" && pwd); }

cmd=${1:-}
shift || true
case "$cmd" in
  fetch) fetch ;;
  start) d=$(dir_arg "${1:-}"); not_cluster "$d"; start "$d" ;;
  start-cluster) [ $# -eq 2 ] || usage; start_cluster "$(dir_arg "$1")" "$2" ;;
  kill-node) [ $# -eq 2 ] || usage; d="$(dir_arg "$1")/node$2"; [ -f "$d/ports" ] || die "no node $2 in $1"
    kill_broker "$d" ;;
  start-node) [ $# -eq 2 ] || usage; d="$(dir_arg "$1")/node$2"; [ -f "$d/ports" ] || die "no node $2 in $1"
    if pid=$(running_pid "$d"); then die "node $2 already runs (pid $pid)"; fi
    launch "$d" || die "node $2 did not start" ;;
  create-topic) [ $# -ge 3 ] || usage; d=$(dir_arg "$1"); shift; create_topic "$d" "$@" ;;
  stop) stop_all "$(dir_arg "${1:-}")" ;;
  kill) while IFS= read -r d; do kill_broker "$d"; done < <(nodes_of "$(dir_arg "${1:-}")") ;;
  restart) d=$(dir_arg "${1:-}"); not_cluster "$d"; stop "$d"; start "$d" ;;
  logs) while IFS= read -r d; do
      [ -f "$d/node.id" ] && echo "--- node $(cat "$d/node.id") ($d) ---"
      tail -n "${2:-200}" "$d/broker.log"
    done < <(nodes_of "$(dir_arg "${1:-}")") ;;
  version) echo "$KAFKA_VERSION" ;;
  *) usage ;;
esac
